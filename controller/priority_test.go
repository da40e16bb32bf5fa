package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

func prioJob(prio int, sleep string) *api.JobSpec {
	return &api.JobSpec{Target: api.Target{Scope: api.ScopeAny}, Priority: &prio,
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": sleep}}}}
}

func mustSubmit(t *testing.T, c *api.Client, spec *api.JobSpec) *api.Job {
	t.Helper()
	j, err := c.SubmitJob(context.Background(), spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

func waitRunning(t *testing.T, c *api.Client, ids ...string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("jobs %v to run", ids), func() bool {
		for _, id := range ids {
			j, err := c.GetJob(context.Background(), id)
			if err != nil || j.Status != api.JobRunning {
				return false
			}
		}
		return true
	})
}

// TestPriorityOrdersWaitingJobs: with the one slot taken, a low job queued
// before a high one starts after it, and jobs of one priority start in the
// order they were submitted.
func TestPriorityOrdersWaitingJobs(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) { c.MaxConcurrent = 1 }})
	c := f.Client()
	blocker := mustSubmit(t, c, prioJob(5, "1s"))
	waitRunning(t, c, blocker.ID)
	low1 := mustSubmit(t, c, prioJob(1, "10ms"))
	low2 := mustSubmit(t, c, prioJob(1, "10ms"))
	def := mustSubmit(t, c, &api.JobSpec{Target: api.Target{Scope: api.ScopeAny}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	high := mustSubmit(t, c, prioJob(9, "10ms"))
	if def.Priority != api.DefaultPriority {
		t.Fatalf("job without priority has %d, want the default %d", def.Priority, api.DefaultPriority)
	}
	order := []*api.Job{high, def, low1, low2}
	var prev time.Time
	for i, j := range order {
		j = wait(t, f, j.ID)
		if j.Status != api.JobCompleted || j.StartedAt == nil {
			t.Fatalf("job %d (priority %d): %s %s", i, j.Priority, j.Status, j.Error)
		}
		if !j.StartedAt.After(prev) {
			t.Fatalf("job %d in the expected order (priority %d) started at %s, not after the one before (%s)", i, j.Priority, j.StartedAt, prev)
		}
		prev = *j.StartedAt
	}

	// Out of range is a 400 naming the field.
	bad := 10
	_, err := c.SubmitJob(context.Background(), &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Priority: &bad,
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if !api.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("priority 10: %v, want 400 naming priority", err)
	}
}

// TestPriorityAcrossControllers: three controllers with one slot each are
// busy; a low job is queued, then a high one on another controller. The
// first controller to free its slot starts the high one; the low one waits
// for the next free slot.
func TestPriorityAcrossControllers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b", "ctl-c"}, []string{"node-1"}, func(cfg *controller.Config) {
		cfg.MaxConcurrent = 1
	})
	a, b := p.clients["ctl-a"], p.clients["ctl-b"]
	waitFor(t, 10*time.Second, "the node online", func() bool {
		n, err := a.ListNodes(ctx)
		return err == nil && len(n) == 1 && n[0].Status == api.NodeOnline
	})
	// One short and two long blockers: one controller each.
	b1 := mustSubmit(t, a, prioJob(5, "1s"))
	b2 := mustSubmit(t, a, prioJob(5, "4s"))
	b3 := mustSubmit(t, a, prioJob(5, "4s"))
	waitRunning(t, a, b1.ID, b2.ID, b3.ID)
	low := mustSubmit(t, a, prioJob(0, "10ms"))
	high := mustSubmit(t, b, prioJob(9, "3s"))
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	hj, err := a.WaitJob(wctx, high.ID)
	if err != nil {
		t.Fatal(err)
	}
	lj, err := a.WaitJob(wctx, low.ID)
	if err != nil {
		t.Fatal(err)
	}
	if hj.Status != api.JobCompleted || lj.Status != api.JobCompleted {
		t.Fatalf("high %s, low %s", hj.Status, lj.Status)
	}
	if !hj.StartedAt.Before(*lj.StartedAt) {
		t.Fatalf("high started at %s on %s, low at %s on %s: want high first", hj.StartedAt, hj.Owner, lj.StartedAt, lj.Owner)
	}
}
