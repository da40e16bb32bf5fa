package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// auditRecords reads the whole audit trail through GET /audit, in pages of
// limit records.
func auditRecords(t *testing.T, c *api.Client, q api.AuditQuery) []api.AuditRecord {
	t.Helper()
	var out []api.AuditRecord
	if err := c.EachAudit(context.Background(), q, func(r api.AuditRecord) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("read audit: %v", err)
	}
	return out
}

// byPeople drops what controllers recorded by themselves (enrollments,
// job starts and ends).
func byPeople(recs []api.AuditRecord) []api.AuditRecord {
	var out []api.AuditRecord
	for _, r := range recs {
		if !strings.HasPrefix(r.Actor, "controller:") {
			out = append(out, r)
		}
	}
	return out
}

// verifyChain walks records as grid audit verify does.
func verifyChain(recs []api.AuditRecord) (int, error) {
	var c api.AuditChain
	for _, r := range recs {
		if err := c.Next(r); err != nil {
			return c.Count, err
		}
	}
	return c.Count, nil
}

// Three tokens of different roles act in turn; the trail holds exactly their
// calls, in order, with their names, roles, resources and answers; a
// refused call and an unknown token are recorded too; a job's record hides
// its sensitive value; the cancelled job names who cancelled it, stored on
// the job and in its job.end record; and the chain is intact.
func TestAuditRecordsWhoDidWhatInOrder(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := f.Client()
	alice := f.ClientWithToken(makeToken(t, admin, "alice", api.RoleOperator))
	bob := f.ClientWithToken(makeToken(t, admin, "bob", api.RoleRead))

	done, err := alice.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "test", Action: "secret", Params: api.Params{"value": "hunter2-very-secret"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if j := wait(t, f, done.ID); j.Status != api.JobCompleted {
		t.Fatalf("secret job: %s (%s)", j.Status, j.Error)
	}
	long, err := alice.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "60s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the sleep to run", func() bool {
		cur, err := admin.GetJob(ctx, long.ID)
		return err == nil && nodeStatus(cur, 0, "node-1") == api.StepRunning
	})
	if _, err := alice.CancelJob(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
	cancelled := wait(t, f, long.ID)
	if cancelled.Status != api.JobCancelled || cancelled.CancelledBy != "alice" {
		t.Fatalf("cancelled job: status %s, cancelled_by %q; want cancelled by alice", cancelled.Status, cancelled.CancelledBy)
	}
	_, err = bob.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's submission: %v, want 403", err)
	}
	if code, _ := rawCall(t, f.Controller, "POST", "/job/"+long.ID+"/cancel", "not-a-token-of-this-cluster", nil); code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d, want 401", code)
	}
	if _, err := admin.RevokeToken(ctx, "bob"); err != nil {
		t.Fatal(err)
	}

	all := auditRecords(t, admin, api.AuditQuery{Limit: 3}) // small pages: paging is walked too
	if n, err := verifyChain(all); err != nil {
		t.Fatalf("chain of %d records broken after %d: %v", len(all), n, err)
	}
	people := byPeople(all)
	adminName := people[0].Actor
	if !strings.HasPrefix(adminName, "admin") {
		t.Fatalf("first record by %q, want the admin token", adminName)
	}
	type row struct {
		actor    string
		role     api.Role
		action   string
		resource string
		outcome  int
	}
	want := []row{
		{adminName, api.RoleAdmin, api.AuditTokenCreate, "alice", 201},
		{adminName, api.RoleAdmin, api.AuditTokenCreate, "bob", 201},
		{"alice", api.RoleOperator, api.AuditJobSubmit, done.ID, 202},
		{"alice", api.RoleOperator, api.AuditJobSubmit, long.ID, 202},
		{"alice", api.RoleOperator, api.AuditJobCancel, long.ID, 202},
		{"bob", api.RoleRead, api.AuditAuthDenied, "", 403},
		{"", "", api.AuditAuthFailed, long.ID, 401},
		{adminName, api.RoleAdmin, api.AuditTokenRevoke, "bob", 200},
	}
	var got []row
	for _, r := range people {
		got = append(got, row{r.Actor, r.Role, r.Action, r.Resource, r.Outcome})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit by token:\n got %v\nwant %v", got, want)
	}
	raw, _ := json.Marshal(all)
	if strings.Contains(string(raw), "hunter2") {
		t.Fatalf("the sensitive value is in the audit trail: %s", raw)
	}
	if p := string(people[2].Params); !strings.Contains(p, api.SensitiveValue) || !strings.Contains(p, "test.secret") {
		t.Fatalf("job.submit params %s: want the action and %q for the value", p, api.SensitiveValue)
	}

	// The jobs' own records: started, ended with their nodes' outcome,
	// and who cancelled.
	ends := map[string]api.AuditRecord{}
	starts := 0
	for _, r := range all {
		switch r.Action {
		case api.AuditJobEnd:
			ends[r.Job] = r
		case api.AuditJobStart:
			starts++
		}
	}
	if starts != 2 {
		t.Errorf("%d job.start records, want 2", starts)
	}
	if e := ends[done.ID]; e.Summary == nil || e.Summary.Targeted != 1 || e.Summary.Succeeded != 1 {
		t.Errorf("job.end of %s: %+v, want 1 targeted, 1 succeeded", done.ID, e)
	}
	if e := ends[long.ID]; !strings.Contains(e.Detail, "cancelled by alice") || e.Summary == nil {
		t.Errorf("job.end of the cancelled job: %+v, want it cancelled by alice", e)
	}

	// Filters.
	for _, c := range []struct {
		q    api.AuditQuery
		want int
	}{
		{api.AuditQuery{Actor: "alice"}, 3},
		{api.AuditQuery{Action: api.AuditTokenCreate}, 2},
		{api.AuditQuery{Job: long.ID}, 4}, // submit, start, cancel, end (the 401 names no job: it was not let in)
		{api.AuditQuery{Node: "node-1", Action: api.AuditNodeEnroll}, 1},
		{api.AuditQuery{Since: time.Now().Add(time.Hour)}, 0},
		{api.AuditQuery{Until: all[0].Time}, 0},
	} {
		if got := auditRecords(t, admin, c.q); len(got) != c.want {
			t.Errorf("query %+v: %d records, want %d: %+v", c.q, len(got), c.want, got)
		}
	}
	// Admins only.
	if _, err := alice.ListAudit(ctx, api.AuditQuery{}); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Errorf("an operator reading the audit: %v, want 403", err)
	}
}

// Three controllers record calls at the same time into one chain: every
// record lands, written by each of them, and the chain has no fork.
func TestAuditChainConcurrentControllers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	names := []string{"c1", "c2", "c3"}
	p := startPeers(ctx, t, names, nil, nil)
	const each = 15
	var wg sync.WaitGroup
	errs := make(chan error, len(names)*each)
	for _, n := range names {
		wg.Go(func() {
			for i := range each {
				if _, err := p.clients[n].CreateToken(ctx, fmt.Sprintf("%s-t%d", n, i), api.RoleRead); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := auditRecords(t, p.clients["c2"], api.AuditQuery{})
	if n, err := verifyChain(all); err != nil {
		t.Fatalf("chain of %d records broken after %d: %v", len(all), n, err)
	}
	writers := map[string]int{}
	for _, r := range all {
		if r.Action == api.AuditTokenCreate && r.Outcome == http.StatusCreated {
			writers[r.Controller]++
		}
	}
	for _, n := range names {
		if writers[n] != each {
			t.Errorf("controller %s wrote %d token.create records, want %d (all: %v)", n, writers[n], each, writers)
		}
	}
}

// republish replaces the audit stream's records by recs, as someone with
// the controllers' JetStream rights could: the stream refuses deleting
// single records, so the whole stream is made again.
func republish(t *testing.T, ctx context.Context, js jetstream.JetStream, recs [][]byte) {
	t.Helper()
	s, err := js.Stream(ctx, api.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	// A stream made again at once can come back with its old records
	// while the server still removes their files: delete until it is
	// made empty.
	waitFor(t, 20*time.Second, "the audit stream made again empty", func() bool {
		if err := js.DeleteStream(ctx, api.StreamAudit); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatal(err)
		}
		if _, err := js.Stream(ctx, api.StreamAudit); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
		s, err := js.CreateStream(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs == 0
	})
	for _, b := range recs {
		if _, err := js.Publish(ctx, api.SubjectAudit, b); err != nil {
			t.Fatal(err)
		}
	}
	s, err = js.Stream(ctx, api.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().State; st.Msgs != uint64(len(recs)) {
		t.Fatalf("republished %d records, the stream holds %d (%+v)", len(recs), st.Msgs, st)
	}
}

// verify finds a record edited (with its old hash, or a new one), one
// removed, and one slipped in, naming the first broken link; the stream
// refuses deleting or purging records outright.
func TestAuditVerifyFindsEdits(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := f.Client()
	for i := range 5 {
		makeToken(t, admin, fmt.Sprintf("t%d", i), api.RoleRead)
	}
	orig := auditRecords(t, admin, api.AuditQuery{})
	if _, err := verifyChain(orig); err != nil {
		t.Fatalf("before any edit: %v", err)
	}
	if len(orig) < 6 {
		t.Fatalf("%d records, want at least 6", len(orig))
	}
	js := fleettest.JetStream(t, f)
	s, err := js.Stream(ctx, api.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, orig[2].Seq); err == nil {
		t.Fatal("the audit stream let a record be deleted")
	}
	if err := s.Purge(ctx); err == nil {
		t.Fatal("the audit stream let itself be purged")
	}

	enc := func(r api.AuditRecord) []byte {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	k := len(orig) - 3 // a token.create record, with records after it
	for _, c := range []struct {
		name   string
		edit   func(recs []api.AuditRecord) [][]byte
		broken uint64
		reason string
	}{
		{"actor edited, hash kept", func(recs []api.AuditRecord) [][]byte {
			var out [][]byte
			for i, r := range recs {
				if i == k {
					r.Actor = "someone-else"
				}
				out = append(out, enc(r))
			}
			return out
		}, orig[k].Seq, "edited"},
		{"actor edited, hash made again", func(recs []api.AuditRecord) [][]byte {
			var out [][]byte
			for i, r := range recs {
				if i == k {
					r.Actor = "someone-else"
					r.Hash, _ = r.ComputeHash()
				}
				out = append(out, enc(r))
			}
			return out
		}, orig[k+1].Seq, "replaced"},
		{"record removed", func(recs []api.AuditRecord) [][]byte {
			var out [][]byte
			for i, r := range recs {
				if i != k {
					out = append(out, enc(r))
				}
			}
			return out
		}, orig[k+1].Seq, "missing"},
		{"record slipped in", func(recs []api.AuditRecord) [][]byte {
			var out [][]byte
			for i, r := range recs {
				out = append(out, enc(r))
				if i == k {
					forged := api.AuditRecord{Seq: r.Seq + 1, Time: r.Time, Actor: "ghost", Action: api.AuditJobCancel, PrevHash: r.Hash}
					forged.Hash, _ = forged.ComputeHash()
					out = append(out, enc(forged))
				}
			}
			return out
		}, orig[k+1].Seq, "slipped in"},
	} {
		t.Run(c.name, func(t *testing.T) {
			republish(t, ctx, js, c.edit(orig))
			got := auditRecords(t, admin, api.AuditQuery{})
			_, err := verifyChain(got)
			var br *api.AuditBreak
			if !errors.As(err, &br) || br.Seq != c.broken || !strings.Contains(br.Reason, c.reason) {
				var seqs []string
				for _, r := range got {
					seqs = append(seqs, fmt.Sprintf("%d:%s:%.8s<%.8s", r.Seq, r.Actor, r.Hash, r.PrevHash))
				}
				t.Fatalf("verify: %v; want the chain broken at seq %d (%s); records %v", err, c.broken, c.reason, seqs)
			}
		})
	}
	// Put back as it was, and the chain verifies again.
	var back [][]byte
	for _, r := range orig {
		back = append(back, enc(r))
	}
	republish(t, ctx, js, back)
	if _, err := verifyChain(auditRecords(t, admin, api.AuditQuery{})); err != nil {
		t.Fatalf("restored: %v", err)
	}
}

// An agent's connection cannot write to the audit stream, nor delete it or
// its records: agents have no JetStream rights.
func TestAuditAgentCannotWrite(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	makeToken(t, f.Client(), "someone", api.RoleRead) // a record to aim at
	before := auditRecords(t, f.Client(), api.AuditQuery{})
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(api.AuditRecord{Seq: before[len(before)-1].Seq + 1, Actor: "ghost", Action: api.AuditTokenCreate})
	for _, c := range []struct{ what, subject string }{
		{"publish a record", api.SubjectAudit},
		{"delete a record", "$JS.API.STREAM.MSG.DELETE." + api.StreamAudit},
		{"delete the stream", "$JS.API.STREAM.DELETE." + api.StreamAudit},
		{"purge the stream", "$JS.API.STREAM.PURGE." + api.StreamAudit},
		{"change the stream", "$JS.API.STREAM.UPDATE." + api.StreamAudit},
	} {
		a.refused(t, c.what, c.subject, func() error {
			return a.nc.PublishMsg(&nats.Msg{Subject: c.subject, Data: forged})
		})
	}
	after := auditRecords(t, f.Client(), api.AuditQuery{})
	if len(after) < len(before) {
		t.Fatalf("records went missing: %d before, %d after", len(before), len(after))
	}
	for _, r := range after {
		if r.Actor == "ghost" {
			t.Fatalf("the agent's record is in the trail: %+v", r)
		}
	}
	if _, err := verifyChain(after); err != nil {
		t.Fatal(err)
	}
}

// With the audit stream gone, a change is not made: the call whose record
// cannot be written answers 503 saying so, and every call after it is
// refused with 503 before it acts. Reads still answer.
func TestAuditFailsClosed(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := f.Client()
	makeToken(t, admin, "before", api.RoleRead)
	if err := fleettest.JetStream(t, f).DeleteStream(ctx, api.StreamAudit); err != nil {
		t.Fatal(err)
	}
	var ae *api.Error
	// The head was known: the call acts, then its record fails.
	_, err := admin.CreateToken(ctx, "during", api.RoleRead)
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ae.Error(), "audit record could not be written") {
		t.Fatalf("create token with the audit stream gone: %v, want 503 saying the record could not be written", err)
	}
	for _, name := range []string{"after-1", "after-2"} {
		_, err := admin.CreateToken(ctx, name, api.RoleRead)
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ae.Error(), "refused") {
			t.Fatalf("create token %s: %v, want 503 refused before acting", name, err)
		}
	}
	ts, err := admin.ListTokens(ctx)
	if err != nil {
		t.Fatalf("a read with the audit stream gone: %v", err)
	}
	for _, tk := range ts {
		if strings.HasPrefix(tk.Name, "after-") {
			t.Errorf("token %s was created without its record", tk.Name)
		}
	}
}

// A full audit stream refuses changes before they are made, naming
// audit_max_bytes; every token created has its record.
func TestAuditFullStreamRefusesChanges(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := f.Client()
	makeToken(t, admin, "before", api.RoleRead)
	js := fleettest.JetStream(t, f)
	s, err := js.Stream(ctx, api.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	cfg := info.Config
	// Room for a few more records, less than one of the largest.
	cfg.MaxBytes = int64(info.State.Bytes) + 2000
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f.Controller.LookAtAuditNow()
	var ae *api.Error
	_, err = admin.CreateToken(ctx, "after", api.RoleRead)
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ae.Error(), "audit_max_bytes") {
		t.Fatalf("create token with the audit stream full: %v, want 503 naming audit_max_bytes", err)
	}
	ts, err := admin.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, r := range auditRecords(t, admin, api.AuditQuery{Action: api.AuditTokenCreate}) {
		recorded[r.Resource] = r.Outcome == http.StatusCreated
	}
	for _, tk := range ts {
		if tk.Name == "after" {
			t.Errorf("token %s was created with the audit stream full", tk.Name)
		}
		// The controllers make their admin tokens themselves, not through
		// the API.
		if !strings.HasPrefix(tk.Name, "admin") && !recorded[tk.Name] {
			t.Errorf("token %s has no token.create record", tk.Name)
		}
	}
}

// Failed authentications are recorded up to the per-source limit a minute;
// the rest are dropped and counted, so a scan cannot flood the trail.
func TestAuditFailedAuthRateLimited(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	for i := range 25 {
		if code, _ := rawCall(t, f.Controller, "POST", "/job", fmt.Sprintf("guess-%d", i), nil); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, code)
		}
	}
	got := auditRecords(t, f.Client(), api.AuditQuery{Action: api.AuditAuthFailed})
	// A minute boundary in the middle lets up to twice the limit in.
	if len(got) < 10 || len(got) > 20 {
		t.Fatalf("%d auth.failed records for 25 failures from one source, want 10 (20 across a minute boundary)", len(got))
	}
	for _, r := range got {
		if r.Outcome != http.StatusUnauthorized || r.Remote == "" || r.Route != "POST /job" {
			t.Fatalf("auth.failed record %+v: want outcome 401, the remote address and the route", r)
		}
	}
}

// A schedule's life is recorded: created, paused, resumed and deleted by
// the token that did it, and each tick fired naming its job, by the
// controller.
func TestAuditScheduleLifecycle(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := f.ClientWithToken(makeToken(t, f.Client(), "ops", api.RoleOperator))
	if _, err := ops.CreateSchedule(ctx, everySecond("beat")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "two ticks fired", func() bool {
		return len(auditRecords(t, f.Client(), api.AuditQuery{Action: api.AuditScheduleTick})) >= 2
	})
	for _, step := range []func() error{
		func() error { _, err := ops.PauseSchedule(ctx, "beat"); return err },
		func() error { _, err := ops.ResumeSchedule(ctx, "beat"); return err },
		func() error { return ops.DeleteSchedule(ctx, "beat") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	var calls []string
	for _, r := range auditRecords(t, f.Client(), api.AuditQuery{Actor: "ops"}) {
		calls = append(calls, r.Action+" "+r.Resource)
	}
	want := []string{"schedule.create beat", "schedule.pause beat", "schedule.resume beat", "schedule.delete beat"}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("ops's records %q, want %q", calls, want)
	}
	for _, r := range auditRecords(t, f.Client(), api.AuditQuery{Action: api.AuditScheduleTick}) {
		if r.Resource != "beat" || r.Job == "" || !strings.HasPrefix(r.Actor, "controller:") || !strings.Contains(r.Detail, "as ops") {
			t.Fatalf("tick record %+v: want schedule beat, its job, by the controller for ops", r)
		}
		if j, err := f.Client().GetJob(ctx, r.Job); err != nil || j.ScheduleID != "beat" {
			t.Fatalf("tick's job %s: %v", r.Job, err)
		}
	}
}
