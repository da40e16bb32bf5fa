package controller_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestJobTimeoutStopsAgentsWork: a job's timeout stops the tasks it
// started on the agents, as a cancel does, and the node results say the
// job's timeout stopped them. Before, the controller reported "job timeout
// after 2s" while the agents' sleeps ran on to 10s.
func TestJobTimeoutStopsAgentsWork(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	finals := make(chan api.TaskResult, 16)
	sub, err := nc.Subscribe("result.>", func(m *nats.Msg) {
		var tr api.TaskResult
		if json.Unmarshal(m.Data, &tr) == nil && api.StepTerminal(tr.Status) {
			finals <- tr
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	j := submit(t, f, `
target: {scope: all}
timeout: 1s
tasks:
  - {backend: ping, action: sleep, params: {duration: 10s}}
`)
	for range 2 {
		select {
		case tr := <-finals:
			if tr.Status != api.StepFailed || tr.Cancelled || !strings.Contains(tr.Error, api.StoppedByJobTimeout) {
				t.Fatalf("agent's report: %+v, want a failure stopped by the job's timeout", tr)
			}
		case <-time.After(6 * time.Second):
			t.Fatal("an agent's 10s sleep was not stopped within 6s of a job with a 1s timeout starting")
		}
	}
	j = wait(t, f, j.ID)
	if j.Status != api.JobFailed || !strings.Contains(j.Error, "job timeout") {
		t.Fatalf("job %s %q, want failed by the job timeout", j.Status, j.Error)
	}
	for _, n := range []string{"node-1", "node-2"} {
		r := j.Results.Node(0, n)
		if r == nil || r.Status != api.StepFailed || !strings.Contains(r.Error, api.StoppedByJobTimeout) {
			t.Fatalf("%s result %+v, want failed: %s", n, r, api.StoppedByJobTimeout)
		}
	}
	// A cancel still reads as a cancel.
	j2 := submit(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: sleep, params: {duration: 10s}}]")
	time.Sleep(300 * time.Millisecond)
	if _, err := f.Client().CancelJob(t.Context(), j2.ID); err != nil {
		t.Fatal(err)
	}
	if j2 = wait(t, f, j2.ID); j2.Status != api.JobCancelled {
		t.Fatalf("cancelled job: %s", j2.Status)
	}
}
