package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Reports of jobs that do not exist are not stored: a node cannot fill
// the results stream, whose oldest results give way when it is full, with
// results of made-up jobs.
func TestReportsOfUnknownJobsAreNotStored(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := fleettest.JetStream(t, f)
	results, err := js.Stream(ctx, api.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := results.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := info.State.Msgs
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		job := "nojob" + strings.Repeat("x", i)
		b, _ := json.Marshal(api.TaskResult{JobID: job, NodeID: "node-1", Attempt: 1, Status: api.StepSuccess,
			Output: strings.Repeat("a", 512<<10), Timestamp: time.Now().UTC()})
		if err := a.ask(ctx, api.ReportSubject(job, 0, "node-1"), b); err == nil || !strings.Contains(err.Error(), "not known") {
			t.Errorf("report of made-up job %s: %v, want refused", job, err)
		}
	}
	if info, err = results.Info(ctx); err != nil || info.State.Msgs != before {
		t.Errorf("results stream holds %d messages after the made-up reports, had %d (%v)", info.State.Msgs, before, err)
	}
	// A real job's result is still stored and counted.
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := f.Client().WaitJob(ctx, j.ID); err != nil || done.Status != api.JobCompleted {
		t.Fatalf("a real job after the made-up reports: %v %v", done, err)
	}
}
