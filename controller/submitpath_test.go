package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Tests of the one path every job is made by (controller/submit.go): the
// API, a retry and a schedule's tick each apply the controller's policy
// for the caller, and a retry keeps the job's settings.

// policyFleet is one agent that offers every action, dangerous ones
// included (its resolver file is <sandbox>/resolv.conf), behind a
// controller whose allow list is ping and net.
func policyFleet(t *testing.T) *fleet.Fleet {
	t.Helper()
	return fleettest.Start(t, fleet.Options{Agents: 1,
		Agent:      func(_ int, c *agent.Config) { c.Allow = []string{"*"} },
		Controller: func(c *controller.Config) { c.Allow = []string{"ping", "net"} }})
}

// dnsSetJob is a job that rewrites every node's resolver file: a dangerous
// action, which only admin tokens may submit by default.
const dnsSetJob = `{"target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_set","params":{"servers":"192.0.2.53"}}]}`

// queueState counts what the store and the queue hold: the keys of the
// jobs bucket and the requests ever published.
type queueState struct {
	jobs     int
	requests uint64
}

func readQueueState(t *testing.T, f *fleet.Fleet) queueState {
	t.Helper()
	ctx := context.Background()
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	st, err := js.Stream(ctx, api.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return queueState{jobs: n, requests: info.State.LastSeq}
}

// refusedNothingQueued does one call that must be refused with code and a
// message holding want, and checks that it stored and queued no job.
func refusedNothingQueued(t *testing.T, f *fleet.Fleet, method, path, tok, body string, code int, want string) {
	t.Helper()
	before := readQueueState(t, f)
	got, msg := rawCall(t, f.Controller, method, path, tok, []byte(body))
	if got != code || !strings.Contains(msg, want) {
		t.Fatalf("%s %s: %d %q, want %d saying %q", method, path, got, msg, code, want)
	}
	if after := readQueueState(t, f); after != before {
		t.Fatalf("%s %s was refused but the store or queue changed: %+v, then %+v", method, path, before, after)
	}
}

// The attack of the issue: an operator retries an admin's net.dns_set job.
// The retry is submitted as the operator, so dangerous_roles refuses it
// with a 403 naming the action; no job is stored, no request queued, and
// the resolver file is not written again. The admin may retry it.
func TestOperatorCannotRetryAdminsDangerousJob(t *testing.T) {
	f := policyFleet(t)
	ctx := context.Background()
	op := makeToken(t, f.Client(), "deploy", api.RoleOperator)
	code, msg := rawCall(t, f.Controller, http.MethodPost, "/job", f.AdminToken(), []byte(dnsSetJob))
	if code != http.StatusAccepted {
		t.Fatalf("admin submits dns_set: %d %s", code, msg)
	}
	jobs, err := f.Client().ListJobs(ctx)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %v %v", jobs, err)
	}
	orig := wait(t, f, jobs[0].ID)
	if orig.Status != api.JobCompleted {
		t.Fatalf("admin's dns_set job: %s (%s)", orig.Status, orig.Error)
	}
	resolv := filepath.Join(f.DataDir(), "agents", "node-1", "sandbox", "resolv.conf")
	if b, err := os.ReadFile(resolv); err != nil || !strings.Contains(string(b), "192.0.2.53") {
		t.Fatalf("resolver file after the admin's job: %q %v", b, err)
	}
	const marker = "# untouched since the admin's job\n"
	if err := os.WriteFile(resolv, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"", `{"failed_only":false}`} {
		refusedNothingQueued(t, f, http.MethodPost, "/job/"+orig.ID+"/retry", op, body,
			http.StatusForbidden, "tasks[0]: net.dns_set is a dangerous action")
	}
	// The dashboard's Retry button is the same route with the same token:
	// nothing else to check. Nothing ran either.
	time.Sleep(300 * time.Millisecond)
	if b, _ := os.ReadFile(resolv); string(b) != marker {
		t.Fatalf("resolver file rewritten after a refused retry: %q", b)
	}
	// The admin's own retry goes through, as the admin.
	j, err := f.Client().RetryJob(ctx, orig.ID, false)
	if err != nil {
		t.Fatalf("admin retries: %v", err)
	}
	if j = wait(t, f, j.ID); j.Status != api.JobCompleted || j.RetryOf != orig.ID || j.SubmittedBy != "admin" {
		t.Fatalf("admin's retry: %s retry_of %q submitted_by %q", j.Status, j.RetryOf, j.SubmittedBy)
	}
}

// A retry, whole or of the failed nodes only, keeps the job's rollout
// limits and the run honours them: max_concurrency 2 on 5 nodes never has
// more than 2 nodes in a step at once (read from the nodes' timelines), and
// max_errors 0 stops the rollout at the first failures, leaving the rest
// not started, as it did in the original run.
func TestRetryKeepsRolloutLimits(t *testing.T) {
	// Every node has its own sandbox, so the write into dir fails on all.
	all := []string{"node-1", "node-2", "node-3", "node-4", "node-5"}
	f, dir := rolloutFleet(t, 5, all...)
	ctx := context.Background()
	orig := submitWait(t, f, fmt.Sprintf(`
target: {scope: all}
strategy: continue
priority: 7
timeout: 5m
max_concurrency: 2
max_errors: 0
tasks:
  - {backend: ping, action: sleep, params: {duration: 300ms}}
  - {backend: file, action: write, params: {path: %q, content: "x"}}
`, filepath.Join(dir, "app.conf")))
	check := func(name string, j *api.Job) {
		t.Helper()
		if j.MaxConcurrency == nil || j.MaxConcurrency.String() != "2" || j.MaxErrors == nil || j.MaxErrors.String() != "0" ||
			j.Priority != 7 || j.Timeout != "5m" || j.Strategy != api.StrategyContinue {
			t.Fatalf("%s: max_concurrency %v max_errors %v priority %d timeout %q strategy %q; want the original's",
				name, j.MaxConcurrency, j.MaxErrors, j.Priority, j.Timeout, j.Strategy)
		}
		if peak := peakInFlight(t, j, 0); peak != 2 {
			t.Fatalf("%s: %d nodes slept at once, want max_concurrency 2", name, peak)
		}
		// max_errors 0: the first two writes fail, the others never start.
		got := statuses(j, 1)
		want := map[string]string{"node-1": api.StepFailed, "node-2": api.StepFailed,
			"node-3": api.StepNotStarted, "node-4": api.StepNotStarted, "node-5": api.StepNotStarted}
		for n, w := range want {
			if got[n] != w {
				t.Fatalf("%s: step 1 %v, want %v", name, got, want)
			}
		}
		if j.Status != api.JobFailed || !strings.Contains(j.Error, "max_errors") {
			t.Fatalf("%s: %s (%s), want failed by max_errors", name, j.Status, j.Error)
		}
	}
	check("original", orig)
	for _, failedOnly := range []bool{false, true} {
		j, err := f.Client().RetryJob(ctx, orig.ID, failedOnly)
		if err != nil {
			t.Fatalf("retry (failed only %v): %v", failedOnly, err)
		}
		j = wait(t, f, j.ID)
		if failedOnly && !slices.Equal(j.Nodes, all) {
			t.Fatalf("failed-only retry on %v, want %v", j.Nodes, all)
		}
		check(fmt.Sprintf("retry (failed only %v)", failedOnly), j)
	}
}

// Every route that makes jobs applies the controller's policy for its
// caller, each proved here by a refusal that leaves the store and the
// queue as they were; a schedule's tick applies it for the schedule's
// creator. The route table is walked: a route that changes anything and
// that this test does not know fails it, so a route added later must come
// with its case here (or a reason it makes no job).
func TestEveryJobRouteAppliesPolicy(t *testing.T) {
	f := policyFleet(t)
	ctx := context.Background()
	admin := f.AdminToken()
	op := makeToken(t, f.Client(), "deploy", api.RoleOperator)
	const outsideAllow = `{"target":{"scope":"all"},"tasks":[{"backend":"test","action":"fail"}]}`
	schedule := func(name, job string) string {
		return fmt.Sprintf(`{"name":%q,"cron":"@hourly","paused":true,"job":%s}`, name, job)
	}
	// An admin's dns_set job, finished, for the retries.
	code, msg := rawCall(t, f.Controller, http.MethodPost, "/job", admin, []byte(dnsSetJob))
	if code != http.StatusAccepted {
		t.Fatalf("admin submits dns_set: %d %s", code, msg)
	}
	jobs, err := f.Client().ListJobs(ctx)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %v %v", jobs, err)
	}
	dnsJob := wait(t, f, jobs[0].ID).ID

	// The routes that make jobs, each with calls its policy must refuse.
	makers := map[string]func(t *testing.T){
		"POST /job": func(t *testing.T) {
			refusedNothingQueued(t, f, http.MethodPost, "/job", op, dnsSetJob, http.StatusForbidden, "net.dns_set is a dangerous action")
			refusedNothingQueued(t, f, http.MethodPost, "/job", admin, outsideAllow, http.StatusForbidden, "test.fail is not in this controller's allow list")
		},
		"POST /job/{id}/retry": func(t *testing.T) {
			refusedNothingQueued(t, f, http.MethodPost, "/job/"+dnsJob+"/retry", op, `{}`, http.StatusForbidden, "net.dns_set is a dangerous action")
		},
		// A schedule's job is checked for its creator when it is made or
		// changed, and again at every tick (below).
		"POST /schedules": func(t *testing.T) {
			refusedNothingQueued(t, f, http.MethodPost, "/schedules", op, schedule("op-dns", dnsSetJob), http.StatusForbidden, "net.dns_set is a dangerous action")
			refusedNothingQueued(t, f, http.MethodPost, "/schedules", admin, schedule("admin-fail", outsideAllow), http.StatusForbidden, "not in this controller's allow list")
		},
		"PUT /schedule/{id}": func(t *testing.T) {
			if code, msg := rawCall(t, f.Controller, http.MethodPost, "/schedules", op,
				[]byte(schedule("op-echo", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}]}`))); code != http.StatusCreated {
				t.Fatalf("operator creates a ping schedule: %d %s", code, msg)
			}
			refusedNothingQueued(t, f, http.MethodPut, "/schedule/op-echo", op, schedule("op-echo", dnsSetJob), http.StatusForbidden, "net.dns_set is a dangerous action")
		},
	}
	// The routes that change something but make no job, and why.
	noJobs := map[string]string{
		"POST /job/{id}/cancel":          "ends a job",
		"DELETE /job/{id}":               "removes a finished job",
		"DELETE /node/{id}":              "forgets a node",
		"POST /token":                    "makes a token",
		"DELETE /token/{name}":           "revokes a token",
		"POST /site":                     "makes a site",
		"DELETE /site/{name}":            "revokes a site",
		"POST /join-token":               "makes a join token",
		"DELETE /join-token/{name}":      "revokes a join token",
		"POST /enrollments/{id}/approve": "admits an agent",
		"POST /enrollments/{id}/revoke":  "revokes an agent",
		"POST /dlq/{id}/replay":          "queues again a job that was made, and checked, before",
		"DELETE /dlq/{id}":               "drops a dead letter",
		"POST /schedule/{id}/pause":      "stops a schedule's ticks",
		"POST /schedule/{id}/resume":     "lets a schedule's ticks fire again; each tick is made as its creator (below)",
		"DELETE /schedule/{id}":          "removes a schedule",
		"/":                              "answers 404",
	}
	seen := map[string]bool{}
	for _, rt := range f.Controller.APIRoutes() {
		seen[rt.Pattern] = true
		method, _, _ := strings.Cut(rt.Pattern, " ")
		if method == http.MethodGet || method == http.MethodHead {
			continue // reads change nothing
		}
		if _, ok := noJobs[rt.Pattern]; ok {
			continue
		}
		check, ok := makers[rt.Pattern]
		if !ok {
			t.Errorf("route %s is not known to this test: if it makes jobs (through submit, the only way), add a case "+
				"proving its caller's policy applies; if it makes none, list it in noJobs with why", rt.Pattern)
			continue
		}
		t.Run(rt.Pattern, check)
	}
	for p := range makers {
		if !seen[p] {
			t.Errorf("makers lists %s, which the route table does not have", p)
		}
	}
	for p := range noJobs {
		if !seen[p] {
			t.Errorf("noJobs lists %s, which the route table does not have", p)
		}
	}

	// A tick is submitted as the schedule's creator with the role its
	// token has now: an admin's dns_set schedule fires; once its token's
	// name belongs to an operator token, its ticks are refused by policy
	// and make no job.
	t.Run("schedule tick", func(t *testing.T) {
		owner := makeToken(t, f.Client(), "sched-owner", api.RoleAdmin)
		spec := everySecond("dns")
		spec.Job.Tasks = []api.Phase{{Backend: "net", Action: "dns_set", Params: api.Params{"servers": "192.0.2.53"}}}
		oc := f.ClientWithToken(owner)
		if _, err := oc.CreateSchedule(ctx, spec); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a job of the admin's schedule", func() bool { return len(scheduleJobs(t, f.Client(), "dns")) > 0 })
		if _, err := f.Client().RevokeToken(ctx, "sched-owner"); err != nil {
			t.Fatal(err)
		}
		makeToken(t, f.Client(), "sched-owner", api.RoleOperator)
		var s *api.Schedule
		waitFor(t, 30*time.Second, "a tick refused by policy", func() bool {
			s = getSchedule(t, f.Client(), "dns")
			return strings.Contains(s.LastSkipReason, "net.dns_set is a dangerous action") &&
				strings.Contains(s.LastSkipReason, `token "sched-owner" has role operator`)
		})
		// From now on every tick is the operator's.
		made := len(scheduleJobs(t, f.Client(), "dns"))
		waitFor(t, 30*time.Second, "two more refused ticks", func() bool { return getSchedule(t, f.Client(), "dns").Skipped >= s.Skipped+2 })
		if _, err := f.Client().PauseSchedule(ctx, "dns"); err != nil {
			t.Fatal(err)
		}
		s = settled(t, f.Client(), "dns")
		if n := len(scheduleJobs(t, f.Client(), "dns")); n != made || int64(n) != s.Fired {
			t.Fatalf("%d jobs of the schedule (fired %d), %d when its ticks were first refused", n, s.Fired, made)
		}
	})
}
