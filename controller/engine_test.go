package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

func submit(t *testing.T, f *fleet.Fleet, yaml string) *api.Job {
	t.Helper()
	spec, err := api.ParseJobSpec([]byte(yaml))
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	j, err := f.Client().SubmitJob(context.Background(), spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

func wait(t *testing.T, f *fleet.Fleet, id string) *api.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := f.Client().WaitJob(ctx, id)
	if err != nil {
		// Where it stood, to tell a job never claimed from one waiting on
		// results.
		if cur, gerr := f.Client().GetJob(context.Background(), id); gerr == nil {
			b, _ := json.MarshalIndent(cur, "", "  ")
			t.Logf("job %s as it stands:\n%s", id, b)
		}
		t.Fatalf("wait %s: %v", id, err)
	}
	return j
}

// waitFor polls until cond holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, d, 20*time.Millisecond, what, cond)
}

func nodeStatus(j *api.Job, step int, node string) string {
	if r := j.Results.Node(step, node); r != nil {
		return r.Status
	}
	return "<none>"
}

func TestPipelineThenBarrier(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3, Groups: func(int) []string { return []string{"web"} }})
	j := submitWait(t, f, `
target: {scope: group, value: web}
tasks:
  - tasks:
      - {backend: ping, action: echo, params: {message: a}}
      - {backend: ping, action: sleep, params: {duration: 10ms}}
      - {backend: ping, action: echo, params: {message: c}}
  - backend: ping
    action: echo
    params: {message: barrier}
`)
	if j.Status != api.JobCompleted {
		t.Fatalf("status %s (%s)", j.Status, j.Error)
	}
	if len(j.Results) != 4 {
		t.Fatalf("results for %d steps, want 4 (3 pipeline + 1 barrier)", len(j.Results))
	}
	for _, n := range j.Expected {
		// The barrier step starts only after every node finished the
		// pipeline.
		var lastPipelineEnd time.Time
		for _, other := range j.Expected {
			for _, e := range j.Results.Node(2, other).Events {
				if e.Status == api.StepSuccess && e.Time.After(lastPipelineEnd) {
					lastPipelineEnd = e.Time
				}
			}
		}
		barrier := j.Results.Node(3, n)
		if barrier.Status != api.StepSuccess || barrier.Output != "barrier" {
			t.Fatalf("barrier on %s: %+v", n, barrier)
		}
		if len(barrier.Events) == 0 || barrier.Events[0].Status != api.StepDispatched {
			t.Fatalf("barrier events on %s: %+v, want dispatched first", n, barrier.Events)
		}
		if barrier.Events[0].Time.Before(lastPipelineEnd) {
			t.Fatalf("barrier dispatched at %s before the pipeline ended at %s", barrier.Events[0].Time, lastPipelineEnd)
		}
		if j.Results.Node(2, n).Output != "c" {
			t.Fatalf("pipeline step 2 on %s: %+v", n, j.Results.Node(2, n))
		}
	}
}

func TestFailFastRollbackAndSkip(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	j := submitWait(t, f, `
target: {scope: all}
strategy: fail-fast
tasks:
  - {backend: test, action: fail, params: {message: boom}}
  - {backend: ping, action: echo, condition: on_success}
  - {backend: ping, action: echo}
  - condition: on_failure
    tasks:
      - {backend: ping, action: echo, params: {message: rollback}}
`)
	if j.Status != api.JobFailed {
		t.Fatalf("status %s, want failed", j.Status)
	}
	for _, n := range j.Expected {
		if r := j.Results.Node(0, n); r.Status != api.StepFailed || r.Error != "boom" {
			t.Fatalf("step 0 on %s: %+v", n, r)
		}
		if s := nodeStatus(j, 1, n); s != api.StepSkipped {
			t.Fatalf("on_success step on %s: %s, want skipped", n, s)
		}
		if s := nodeStatus(j, 2, n); s != api.StepSkipped {
			t.Fatalf("plain step after fail-fast on %s: %s, want skipped", n, s)
		}
		if r := j.Results.Node(3, n); r.Status != api.StepSuccess || r.Output != "rollback" {
			t.Fatalf("rollback on %s: %+v", n, r)
		}
	}
}

func TestContinueExcludesFailedNodes(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3})
	j := submitWait(t, f, `
target: {scope: all}
strategy: continue
tasks:
  - tasks:
      - {backend: ping, action: echo}
  - {backend: test, action: fail}
  - {backend: ping, action: echo, params: {message: after}}
`)
	// Every node fails step 1, so nobody is left for step 2.
	if j.Status != api.JobFailed {
		t.Fatalf("status %s, want failed when every node failed", j.Status)
	}
	for _, n := range j.Expected {
		if s := nodeStatus(j, 2, n); s != "<none>" {
			t.Fatalf("step 2 ran on failed node %s: %s", n, s)
		}
	}

	// One node failing leaves a partial failure; the others go on.
	j = submitWait(t, f, `
target: {scope: all}
strategy: continue
tasks:
  - tasks:
      - {backend: ping, action: echo}
  - {backend: test, action: fail}
`)
	if j.Status != api.JobFailed {
		t.Fatalf("status %s", j.Status)
	}
	spec := `
target: {scope: all}
strategy: continue
tasks:
  - {backend: test, action: flaky, params: {rate: 0}}
  - tasks:
      - {backend: ping, action: echo, params: {message: ok}}
`
	j = submitWait(t, f, spec)
	if j.Status != api.JobCompleted {
		t.Fatalf("status %s, want completed", j.Status)
	}
}

func TestPartialFailureUnderContinue(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3})
	// node-2 alone is targeted for the failing step through a pipeline
	// condition: the fail runs everywhere, but node targeting makes it one
	// node. Use a group of one to fail a subset.
	if _, err := f.AddAgent(context.Background(), []string{"canary"}); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitOnline(context.Background(), "node-4"); err != nil {
		t.Fatal(err)
	}
	// Steps in the same job all use the job's target; a subset failure comes
	// from flaky at 100% on… every node. Instead fail by parameter: the
	// failing node is the one whose sleep exceeds its timeout.
	j := submitWait(t, f, `
target: {scope: all}
strategy: continue
tasks:
  - {backend: ping, action: echo}
  - {backend: test, action: flaky, params: {rate: 50}, max_retries: 0}
  - {backend: ping, action: echo, params: {message: survivors}}
`)
	failed, ok := 0, 0
	for _, n := range j.Expected {
		switch nodeStatus(j, 1, n) {
		case api.StepFailed:
			failed++
			if s := nodeStatus(j, 2, n); s != "<none>" {
				t.Fatalf("failed node %s ran step 2: %s", n, s)
			}
		case api.StepSuccess:
			ok++
			if s := nodeStatus(j, 2, n); s != api.StepSuccess {
				t.Fatalf("surviving node %s step 2: %s", n, s)
			}
		}
	}
	want := api.JobCompleted
	switch {
	case failed > 0 && ok > 0:
		want = api.JobPartialFailure
	case failed > 0:
		want = api.JobFailed
	}
	if j.Status != want {
		t.Fatalf("status %s with %d failed and %d ok nodes, want %s", j.Status, failed, ok, want)
	}
}

func TestTargets(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 4, Groups: func(i int) []string {
		return [][]string{{"web.dev.us-east"}, {"web.dev.eu"}, {"web.prod"}, {"db"}}[i]
	}})
	cases := []struct {
		target string
		want   []string
	}{
		{"group:web", []string{"node-1", "node-2", "node-3"}},
		{"group:web.dev", []string{"node-1", "node-2"}},
		{"group:web.dev.us-east", []string{"node-1"}},
		{"group:db", []string{"node-4"}},
		{"node:node-3", []string{"node-3"}},
		{"all", []string{"node-1", "node-2", "node-3", "node-4"}},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			tgt, err := api.ParseTarget(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: tgt, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
			if err != nil {
				t.Fatal(err)
			}
			j = wait(t, f, j.ID)
			if j.Status != api.JobCompleted || strings.Join(j.Expected, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("status %s expected %v, want completed on %v", j.Status, j.Expected, tc.want)
			}
			if len(j.Results[0]) != len(tc.want) {
				t.Fatalf("results from %d nodes, want %d: %+v", len(j.Results[0]), len(tc.want), j.Results[0])
			}
		})
	}
	// any picks one online node, spreading successive jobs.
	seen := map[string]bool{}
	for range 4 {
		j := wait(t, f, submit(t, f, "target: {scope: any}\ntasks: [{backend: ping, action: echo}]").ID)
		if j.Status != api.JobCompleted || len(j.Expected) != 1 {
			t.Fatalf("any: status %s expected %v", j.Status, j.Expected)
		}
		seen[j.Expected[0]] = true
	}
	if len(seen) < 2 {
		t.Fatalf("any chose %v over 4 jobs; want it spread", seen)
	}
	// A target that matches no node, online or offline, is refused at
	// submit with the field at fault, and nothing is stored.
	before, err := f.Client().ListJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"{scope: group, value: nothing}", "{scope: node, value: node-99}"} {
		spec, err := api.ParseJobSpec([]byte("target: " + target + "\ntasks: [{backend: ping, action: echo}]"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Client().SubmitJob(context.Background(), spec)
		if !api.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "matches no node") || !strings.Contains(err.Error(), "target") {
			t.Errorf("target %s: %v, want a 400 saying it matches no node", target, err)
		}
	}
	if after, err := f.Client().ListJobs(context.Background()); err != nil || len(after) != len(before) {
		t.Errorf("refused submissions stored jobs: %d before, %d after (%v)", len(before), len(after), err)
	}
	// Asked for (Terraform's allow_empty), such a job is taken, and fails
	// for want of nodes.
	spec, _ := api.ParseJobSpec([]byte("target: {scope: group, value: nothing}\ntasks: [{backend: ping, action: echo}]"))
	j, err := f.Client().SubmitJobWith(context.Background(), spec, api.SubmitOptions{AllowEmpty: true})
	if err != nil {
		t.Fatalf("allow_empty submission: %v", err)
	}
	if j = wait(t, f, j.ID); j.Status != api.JobFailed || !strings.Contains(j.Error, "no online nodes") || len(j.Expected) != 0 {
		t.Fatalf("allow_empty job: status %s error %q expected %v", j.Status, j.Error, j.Expected)
	}
}

func TestTaskTimeoutAndRetries(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	j := submitWait(t, f, `
target: {scope: all}
tasks:
  - {backend: ping, action: sleep, params: {duration: 10s}, timeout: 300ms}
`)
	r := j.Results.Node(0, "node-1")
	if j.Status != api.JobFailed || r.Status != api.StepFailed || !strings.Contains(r.Error, "timed out") {
		t.Fatalf("status %s result %+v, want a timeout failure", j.Status, r)
	}
	if time.Duration(r.Duration) > 5*time.Second {
		t.Fatalf("timed-out task ran %s", r.Duration)
	}

	j = submitWait(t, f, `
target: {scope: all}
tasks:
  - {backend: test, action: flaky, params: {rate: 100}, max_retries: 2}
`)
	r = j.Results.Node(0, "node-1")
	if r.Status != api.StepFailed || r.Attempts != 3 {
		t.Fatalf("result %+v, want failed after 3 attempts", r)
	}
	var failures []time.Time
	for _, e := range r.Events {
		if e.Status == api.StepFailed {
			failures = append(failures, e.Time)
		}
	}
	if len(failures) != 3 {
		t.Fatalf("events %+v, want 3 failed attempts", r.Events)
	}
	// Backoff doubles: the second gap is at least the first.
	if g1, g2 := failures[1].Sub(failures[0]), failures[2].Sub(failures[1]); g1 < 40*time.Millisecond || g2 < 90*time.Millisecond {
		t.Fatalf("retry gaps %s, %s: want exponential backoff from 50ms", g1, g2)
	}
}

func TestRejectsBadJobs(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	cases := []struct {
		name, body, want string
		code             int
	}{
		{"unknown action", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"explode"}]}`, `unknown action "explode"`, 400},
		{"unknown backend", `{"target":{"scope":"all"},"tasks":[{"backend":"nope","action":"x"}]}`, `unknown backend "nope"`, 400},
		{"missing param", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"sleep"}]}`, `tasks[0].params.duration: missing required param (ping.sleep)`, 400},
		{"bad param", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"sleep","params":{"duration":"soon"}}]}`, `not a duration`, 400},
		{"negative duration param", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"sleep","params":{"duration":"-5s"}}]}`, `tasks[0].params.duration: "-5s" is negative`, 400},
		{"negative task timeout", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo","timeout":"-5s"}]}`, `tasks[0].timeout: "-5s" must be positive`, 400},
		{"negative job timeout", `{"target":{"scope":"all"},"timeout":"-1m","tasks":[{"backend":"ping","action":"echo"}]}`, `timeout: "-1m" must be positive`, 400},
		{"unknown field", `{"target":{"scope":"all"},"taks":[]}`, `unknown field "taks"`, 400},
		{"bad scope", `{"target":{"scope":"some"},"tasks":[{"backend":"ping","action":"echo"}]}`, `unknown scope`, 400},
		{"too deep", `{"target":{"scope":"all"},"tasks":[{"tasks":[{"tasks":[{"backend":"ping","action":"echo"}]}]}]}`, `nesting deeper`, 400},
		{"too large", `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo","params":{"message":"` + strings.Repeat("x", 2<<20) + `"}}]}`, `larger than`, 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := postJob(f, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb api.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != tc.code || !strings.Contains(eb.Error, tc.want) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, eb.Error, tc.code, tc.want)
			}
		})
	}
	jobs, err := f.Client().ListJobs(context.Background())
	if err != nil || len(jobs) != 0 {
		t.Fatalf("rejected jobs were stored: %d jobs, err %v", len(jobs), err)
	}
}

func TestCancelRunningJob(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	j := submit(t, f, `
target: {scope: all}
tasks:
  - {backend: ping, action: sleep, params: {duration: 60s}}
  - {backend: ping, action: echo}
`)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the sleep to start on both nodes", func() bool {
		cur, err := f.Client().GetJob(ctx, j.ID)
		return err == nil && nodeStatus(cur, 0, "node-1") == api.StepRunning && nodeStatus(cur, 0, "node-2") == api.StepRunning
	})
	// Listen to what the agents report, to see their sleeps end.
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	finals := make(chan api.TaskResult, 16)
	sub, err := nc.Subscribe(api.ResultSubject(j.ID), func(m *nats.Msg) {
		var tr api.TaskResult
		if json.Unmarshal(m.Data, &tr) == nil && api.StepTerminal(tr.Status) {
			finals <- tr
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The subscription must be in place at the server before the cancel,
	// or the reports can pass before it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := f.Client().CancelJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case tr := <-finals:
			if tr.Status != api.StepFailed || !strings.Contains(tr.Error, "cancel") || time.Duration(tr.Duration) > 10*time.Second {
				t.Fatalf("agent's report after cancel: %+v, want its sleep interrupted", tr)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an agent's sleep was not interrupted within 5s of the cancel")
		}
	}
	j = wait(t, f, j.ID)
	if j.Status != api.JobCancelled {
		t.Fatalf("status %s, want cancelled", j.Status)
	}
	// Both nodes were running when the job was cancelled: they were
	// reached, and the summary says they were cancelled.
	if want := (api.JobSummary{Targeted: 2, Reached: 2, Cancelled: 2}); j.Summary == nil || *j.Summary != want {
		t.Errorf("summary of a job cancelled while both nodes ran: %+v, want %+v", j.Summary, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %s", d)
	}
	if s := nodeStatus(j, 1, "node-1"); s != "<none>" {
		t.Fatalf("step after cancel ran: %s", s)
	}
	j2 := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]")
	if j2.Status != api.JobCompleted {
		t.Fatalf("follow-up job %s", j2.Status)
	}
	if _, err := f.Client().CancelJob(ctx, j.ID); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("cancel of a finished job: %v, want 409", err)
	}
}

func TestAdmissionControl(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) {
		c.MaxConcurrent = 1
		c.MaxPending = 1
	}})
	long := "target: {scope: all}\ntasks: [{backend: ping, action: sleep, params: {duration: 30s}}]"
	running := submit(t, f, long)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the first job to run", func() bool {
		j, err := f.Client().GetJob(ctx, running.ID)
		return err == nil && j.Status == api.JobRunning
	})
	spec, _ := api.ParseJobSpec([]byte(long))
	// The first job's request leaves the requests stream when its claim is
	// acknowledged, just after the run starts; until then it still counts
	// as pending.
	var queued *api.Job
	waitFor(t, 10*time.Second, "a second job queued", func() bool {
		j, err := f.Client().SubmitJob(ctx, spec)
		if err != nil && !api.IsStatus(err, http.StatusTooManyRequests) {
			t.Fatalf("second submit: %v", err)
		}
		queued = j
		return err == nil
	})
	_, err := f.Client().SubmitJob(ctx, spec)
	if !api.IsStatus(err, http.StatusTooManyRequests) {
		t.Fatalf("third submit: %v, want 429", err)
	}
	// Cancelling the pending job works before it ever runs.
	c, err := f.Client().CancelJob(ctx, queued.ID)
	if err != nil || c.Status != api.JobCancelled {
		t.Fatalf("cancel pending: %+v %v", c, err)
	}
	if _, err := f.Client().CancelJob(ctx, running.ID); err != nil {
		t.Fatal(err)
	}
	if j := wait(t, f, queued.ID); j.Status != api.JobCancelled || len(j.Results) != 0 {
		t.Fatalf("cancelled pending job ran: %+v", j)
	}
}

func TestNodeLostMidJob(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3})
	j := submit(t, f, `
target: {scope: all}
strategy: continue
tasks:
  - {backend: ping, action: sleep, params: {duration: 2s}}
  - {backend: ping, action: echo}
`)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "the sleep to start", func() bool {
		cur, err := f.Client().GetJob(ctx, j.ID)
		return err == nil && nodeStatus(cur, 0, "node-2") == api.StepRunning
	})
	if err := f.KillAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	j = wait(t, f, j.ID)
	r := j.Results.Node(0, "node-2")
	if r.Status != api.StepUnreachable || !strings.Contains(r.Error, "went offline") {
		t.Fatalf("lost node result %+v, want unreachable", r)
	}
	if j.Status != api.JobPartialFailure {
		t.Fatalf("status %s, want partial_failure", j.Status)
	}
	for _, n := range []string{"node-1", "node-3"} {
		if s := nodeStatus(j, 1, n); s != api.StepSuccess {
			t.Fatalf("healthy %s step 1: %s", n, s)
		}
	}
}

func TestStatusAndBackends(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}, {backend: ping, action: echo}]")
	submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: fail}]")
	ctx := context.Background()
	st, err := f.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Nodes.Online != 2 || st.Jobs.Total != 2 || st.Jobs.StatusCounts["completed"] != 1 || st.Jobs.StatusCounts["failed"] != 1 {
		t.Fatalf("status %+v", st)
	}
	if st.Jobs.OperationCounts["ping.echo"] != 2 || st.Jobs.OperationCounts["test.fail"] != 1 {
		t.Fatalf("operation counts %+v", st.Jobs.OperationCounts)
	}
	cat, err := f.Client().Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := cat.Backend("ping")
	if !ok || cat.Nodes["ping"] != 2 {
		t.Fatalf("catalog %+v", cat)
	}
	if _, ok := b.Action("sleep"); !ok {
		t.Fatalf("ping schema lacks sleep: %+v", b)
	}
	n, err := f.Client().GetNode(ctx, "node-1")
	if err != nil || len(n.Schemas) == 0 || n.Status != api.NodeOnline {
		t.Fatalf("node-1: %+v %v", n, err)
	}
	if _, err := f.Client().GetNode(ctx, "nope"); !api.IsStatus(err, 404) {
		t.Fatalf("missing node: %v", err)
	}
	ctls, err := f.Client().Controllers(ctx)
	if err != nil || len(ctls) != 1 || ctls[0].Status != "online" {
		t.Fatalf("controllers %+v %v", ctls, err)
	}
	// A graceful agent stop shows as offline at once.
	if err := f.StopAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "node-2 offline", func() bool {
		n, err := f.Client().GetNode(ctx, "node-2")
		return err == nil && n.Status == api.NodeOffline
	})
}

// postJob sends a raw POST /job with the fleet's admin token.
func postJob(f *fleet.Fleet, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, f.APIURL()+"/job", bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	return f.HTTPClient().Do(req)
}
