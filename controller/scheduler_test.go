package controller_test

import (
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// submitWait submits a job file's text and waits for the job to end.
func submitWait(t *testing.T, f *fleet.Fleet, yaml string) *api.Job {
	t.Helper()
	return wait(t, f, submit(t, f, yaml).ID)
}

func TestBarrierOnGroup(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 4})
	j := submitWait(t, f, `
target: {scope: group, value: web}
tasks:
  - backend: ping
    action: echo
    params: {message: one}
  - backend: ping
    action: echo
    params: {message: two}
`)
	if j.Status != api.JobCompleted {
		t.Fatalf("status %s (%s), want completed", j.Status, j.Error)
	}
	if len(j.Expected) != 2 {
		t.Fatalf("expected nodes %v, want the 2 web nodes", j.Expected)
	}
	for step, want := range []string{"one", "two"} {
		for _, n := range j.Expected {
			r := j.Results.Node(step, n)
			if r == nil || r.Status != api.StepSuccess || r.Output != want {
				t.Fatalf("step %d node %s: %+v, want success %q", step, n, r, want)
			}
		}
	}
}

// A job too big to ride along in its request (which then holds only the
// id) is claimed by reading it.
func TestBigJobIsClaimedFromTheBucket(t *testing.T) {
	// The agent echoes the whole message (over the default output cap).
	f := fleettest.Start(t, fleet.Options{Agents: 1, Agent: func(_ int, c *agent.Config) { c.MaxOutputBytes = agent.MaxOutputBytesLimit }})
	msg := strings.Repeat("x", 100<<10)
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo, params: {message: "+msg+"}}]")
	if j.Status != api.JobCompleted || j.Results.Node(0, j.Expected[0]).Output != msg {
		t.Fatalf("status %s (%s)", j.Status, j.Error)
	}
}
