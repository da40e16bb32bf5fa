package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// rateLimitFleet starts n agents under one controller limiting ping.echo to
// starts per window.
func rateLimitFleet(t *testing.T, n, starts int, per time.Duration) *fleet.Fleet {
	t.Helper()
	return fleettest.Start(t, fleet.Options{Agents: n, Controller: func(c *controller.Config) {
		c.RateLimits = controller.RateLimits{{Action: "ping.echo", Starts: starts, Per: config.Duration(per)}}
		// A task's deadline (its timeout plus this) shorter than a window:
		// waiting for a unit must not count against it.
		c.ResultGrace = config.Duration(300 * time.Millisecond)
	}})
}

// starts returns when each node's step was dispatched (every attempt),
// across the given jobs and steps.
func starts(jobs []*api.Job, steps ...int) []time.Time {
	var out []time.Time
	for _, j := range jobs {
		for _, s := range steps {
			for _, r := range j.Results[s] {
				for _, e := range r.Events {
					if e.Status == api.StepDispatched {
						out = append(out, e.Time)
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// delayedNodes counts the node steps whose timeline says a rate limit held
// them back.
func delayedNodes(j *api.Job, steps ...int) int {
	n := 0
	for _, s := range steps {
		for _, r := range j.Results[s] {
			if slices.ContainsFunc(r.Events, func(e api.Event) bool {
				return e.Status == api.StepPending && api.RateLimited(e.Message)
			}) {
				n++
			}
		}
	}
	return n
}

// checkWindows fails unless every window of per holds at most limit of the
// sorted start times. The controller records a dispatch just after the
// grant it belongs to, so two starts a window apart may look up to slack
// closer.
func checkWindows(t *testing.T, times []time.Time, limit int, per time.Duration) {
	t.Helper()
	const slack = 300 * time.Millisecond
	for i := 0; i+limit < len(times); i++ {
		if d := times[i+limit].Sub(times[i]); d < per-slack {
			t.Fatalf("starts %d and %d are %s apart: %d starts within %s, limit %d (all: %v)", i, i+limit, d, limit+1, per, limit, times)
		}
	}
}

// waitingNodes counts the nodes whose step waits for a rate limit.
func waitingNodes(j *api.Job, step int) int {
	n := 0
	for _, r := range j.Results[step] {
		if r.Status == api.StepPending && api.RateLimited(r.StatusReason) {
			n++
		}
	}
	return n
}

// A limit of 3 starts per 2s on 5 nodes: 3 start at once, 2 wait with the
// reason on the job and their results (seen through the API), and start in
// the next window; the job completes.
func TestRateLimitHoldsStartsToTheWindow(t *testing.T) {
	const limit, per = 3, 2 * time.Second
	f := rateLimitFleet(t, 5, limit, per)
	ctx := context.Background()
	j := submit(t, f, "target: {scope: all}\ntasks:\n  - {backend: ping, action: echo, timeout: 1s, params: {message: hi}}\n")
	var seen *api.Job
	waitFor(t, 10*time.Second, "two nodes waiting for the rate limit, the job saying why", func() bool {
		cur, err := f.Client().GetJob(ctx, j.ID)
		if err != nil || cur.Status != api.JobRunning || waitingNodes(cur, 0) != 5-limit {
			return false
		}
		seen = cur
		return api.RateLimited(cur.StatusReason)
	})
	if want := "rate limited: ping.echo 3 per 2s: 2 node starts waiting, next slot in "; !strings.HasPrefix(seen.StatusReason, want) {
		t.Fatalf("status reason %q, want it to start %q", seen.StatusReason, want)
	}
	for id, r := range seen.Results[0] {
		if r.Status == api.StepPending && !strings.HasPrefix(r.StatusReason, "rate limited: ping.echo 3 per 2s: next slot in ") {
			t.Fatalf("%s: pending with reason %q", id, r.StatusReason)
		}
	}
	if v := value(t, f.Controller.Registry(), "grid_rate_limited_waiting", map[string]string{"action": "ping.echo"}); v != 5-limit {
		t.Fatalf("grid_rate_limited_waiting %v, want %d", v, 5-limit)
	}

	done := wait(t, f, j.ID)
	if done.Status != api.JobCompleted || done.Error != "" || done.StatusReason != "" {
		t.Fatalf("job %s (%q), reason %q: want completed with nothing left to say", done.Status, done.Error, done.StatusReason)
	}
	for id, r := range done.Results[0] {
		if r.Status != api.StepSuccess || r.StatusReason != "" {
			t.Fatalf("%s: %s, reason %q", id, r.Status, r.StatusReason)
		}
	}
	if got := delayedNodes(done, 0); got != 5-limit {
		t.Fatalf("%d nodes waited, want %d", got, 5-limit)
	}
	times := starts([]*api.Job{done}, 0)
	if len(times) != 5 {
		t.Fatalf("%d starts, want 5", len(times))
	}
	checkWindows(t, times, limit, per)
	reg := f.Controller.Registry()
	if v := value(t, reg, "grid_rate_limited_total", map[string]string{"action": "ping.echo"}); v != 5-limit {
		t.Fatalf("grid_rate_limited_total %v, want %d", v, 5-limit)
	}
	if v := value(t, reg, "grid_rate_limited_waiting", map[string]string{"action": "ping.echo"}); v != 0 {
		t.Fatalf("grid_rate_limited_waiting %v after the job, want 0", v)
	}

	// A pipeline under max_concurrency: each node's start of each step
	// takes a unit, and a node waiting for one keeps its slot.
	pj := submit(t, f, `
target: {scope: all}
tasks:
  - max_concurrency: 2
    tasks:
      - {backend: ping, action: echo, params: {message: a}}
      - {backend: ping, action: echo, params: {message: b}}
`)
	pdone := wait(t, f, pj.ID)
	if pdone.Status != api.JobCompleted || pdone.StatusReason != "" {
		t.Fatalf("pipeline job %s (%q), reason %q", pdone.Status, pdone.Error, pdone.StatusReason)
	}
	all := starts([]*api.Job{done, pdone}, 0, 1)
	if len(all) != 5+10 {
		t.Fatalf("%d starts, want 15", len(all))
	}
	checkWindows(t, all, limit, per)
	if delayedNodes(pdone, 0, 1) == 0 {
		t.Fatal("no pipeline step waited for the limit")
	}

	// A check changes nothing: check-mode tasks take no unit.
	cj := submit(t, f, "target: {scope: all}\ncheck_mode: true\ntasks:\n  - {backend: ping, action: echo, params: {message: hi}}\n")
	cdone := wait(t, f, cj.ID)
	if cdone.Status != api.JobCompleted || delayedNodes(cdone, 0) != 0 {
		t.Fatalf("check-mode job %s, %d nodes waited: want completed, none waiting", cdone.Status, delayedNodes(cdone, 0))
	}
}

// A job waiting for a rate limit is cancelled at once: the waiting nodes'
// steps are cancelled, never started, and nothing waits any more.
func TestRateLimitCancelWhileWaiting(t *testing.T) {
	f := rateLimitFleet(t, 3, 1, time.Hour)
	ctx := context.Background()
	j := submit(t, f, "target: {scope: all}\ntasks:\n  - {backend: ping, action: echo, params: {message: hi}}\n")
	waitFor(t, 10*time.Second, "two nodes waiting for the rate limit", func() bool {
		cur, err := f.Client().GetJob(ctx, j.ID)
		return err == nil && waitingNodes(cur, 0) == 2 && api.RateLimited(cur.StatusReason)
	})
	if _, err := f.Client().CancelJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	done := wait(t, f, j.ID)
	if done.Status != api.JobCancelled || done.StatusReason != "" {
		t.Fatalf("job %s, reason %q: want cancelled, no reason", done.Status, done.StatusReason)
	}
	counts := map[string]int{}
	for id, r := range done.Results[0] {
		counts[r.Status]++
		if r.StatusReason != "" {
			t.Fatalf("%s: reason %q left", id, r.StatusReason)
		}
		if r.Status == api.StepCancelled && slices.ContainsFunc(r.Events, func(e api.Event) bool { return e.Status == api.StepDispatched }) {
			t.Fatalf("%s: cancelled but dispatched: %+v", id, r.Events)
		}
	}
	if counts[api.StepSuccess] != 1 || counts[api.StepCancelled] != 2 {
		t.Fatalf("results %v: want 1 success, 2 cancelled", counts)
	}
	if v := value(t, f.Controller.Registry(), "grid_rate_limited_waiting", map[string]string{"action": "ping.echo"}); v != 0 {
		t.Fatalf("grid_rate_limited_waiting %v after the cancel, want 0", v)
	}

	// The job's timeout counts the wait: the hour's one start is taken, so
	// this job's nodes wait until its timeout fails it.
	tj := submit(t, f, "target: {scope: all}\ntimeout: 1s\ntasks:\n  - {backend: ping, action: echo, params: {message: hi}}\n")
	tdone := wait(t, f, tj.ID)
	if tdone.Status != api.JobFailed || tdone.Error != "job timeout after 1s" || tdone.StatusReason != "" {
		t.Fatalf("job %s (%q), reason %q: want failed by its timeout", tdone.Status, tdone.Error, tdone.StatusReason)
	}
	for id, r := range tdone.Results[0] {
		if r.Status != api.StepFailed || !strings.HasPrefix(r.Error, api.StoppedByJobTimeout) || len(starts([]*api.Job{tdone}, 0)) != 0 {
			t.Fatalf("%s: %s (%q), events %+v: want failed by the job's timeout, never dispatched", id, r.Status, r.Error, r.Events)
		}
	}
}

// Two controllers share one limit: jobs run by each take units from the
// same window, so the cluster's starts keep to it; both jobs complete.
func TestRateLimitSharedAcrossControllers(t *testing.T) {
	const limit, per = 2, 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b"}, []string{"node-1", "node-2", "node-3"}, func(cfg *controller.Config) {
		// One job each, so the two jobs run on different controllers.
		cfg.MaxConcurrent = 1
		cfg.RateLimits = controller.RateLimits{{Action: "ping.echo", Starts: limit, Per: config.Duration(per)}}
	})
	a, b := p.clients["ctl-a"], p.clients["ctl-b"]
	// Each controller resolves the target of the job submitted to it from
	// the nodes it has heard, so both must have heard all three.
	for name, cl := range p.clients {
		waitFor(t, 10*time.Second, "three nodes online through "+name, func() bool {
			n, err := cl.ListNodes(ctx)
			return err == nil && len(n) == 3 && !slices.ContainsFunc(n, func(n api.NodeInfo) bool { return n.Status != api.NodeOnline })
		})
	}
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}}}}
	ja := mustSubmit(t, a, spec)
	jb := mustSubmit(t, b, spec)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	var jobs []*api.Job
	for _, id := range []string{ja.ID, jb.ID} {
		j, err := a.WaitJob(wctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != api.JobCompleted || j.StatusReason != "" {
			t.Fatalf("job %s: %s (%q), reason %q", id, j.Status, j.Error, j.StatusReason)
		}
		jobs = append(jobs, j)
	}
	if jobs[0].Owner == jobs[1].Owner {
		t.Fatalf("both jobs ran on %s", jobs[0].Owner)
	}
	times := starts(jobs, 0)
	if len(times) != 6 {
		t.Fatalf("%d starts, want 6", len(times))
	}
	checkWindows(t, times, limit, per)
	var delayed float64
	for _, c := range p.ctls {
		delayed += value(t, c.Registry(), "grid_rate_limited_total", map[string]string{"action": "ping.echo"})
	}
	// 6 starts at 2 per window: some waited, and each controller counted
	// the ones it held back.
	if delayed == 0 || int(delayed) != delayedNodes(jobs[0], 0)+delayedNodes(jobs[1], 0) {
		t.Fatalf("grid_rate_limited_total %v on both, %d+%d nodes waited: want some, the same count",
			delayed, delayedNodes(jobs[0], 0), delayedNodes(jobs[1], 0))
	}
}
