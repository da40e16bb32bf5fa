package controller_test

import (
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// A node's timeline holds dispatched, running and the outcome, in order,
// whether the agent reported running (a task that took a while) or only
// its final result with the start time (a quick one).
func TestTimelineHasRunningForQuickAndSlowTasks(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	j := submitWait(t, f, `
target: {scope: all}
tasks:
  - {backend: ping, action: echo, params: {message: quick}}
  - {backend: ping, action: sleep, params: {duration: 300ms}}
`)
	if j.Status != api.JobCompleted {
		t.Fatalf("status %s (%s)", j.Status, j.Error)
	}
	for step := range 2 {
		for _, n := range j.Expected {
			ev := j.Results.Node(step, n).Events
			if len(ev) != 3 || ev[0].Status != api.StepDispatched || ev[1].Status != api.StepRunning || ev[2].Status != api.StepSuccess {
				t.Fatalf("step %d on %s: events %+v, want dispatched, running, success", step, n, ev)
			}
			if ev[1].Time.Before(ev[0].Time) || ev[2].Time.Before(ev[1].Time) || ev[1].Attempt != 1 {
				t.Fatalf("step %d on %s: events out of order %+v", step, n, ev)
			}
		}
	}
}
