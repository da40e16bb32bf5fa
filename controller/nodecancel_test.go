package controller_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// A node cannot cancel a job: a result from node-1's key saying its task
// was cancelled, with no cancel of the job issued, fails node-1's step
// alone; the job is not cancelled and node-2's work goes on to its end.
func TestNodeReportingCancelledDoesNotCancelTheJob(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Strategy: api.StrategyContinue,
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "both sleeps to start", func() bool {
		cur, err := f.Client().GetJob(ctx, job.ID)
		return err == nil && nodeStatus(cur, 0, "node-1") == api.StepRunning && nodeStatus(cur, 0, "node-2") == api.StepRunning
	})
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(api.TaskResult{JobID: job.ID, TaskIndex: 0, NodeID: "node-1", Attempt: 1, Status: api.StepFailed,
		Cancelled: true, Error: "cancelled", Timestamp: time.Now().UTC()})
	if err := a.ask(ctx, api.ReportSubject(job.ID, 0, "node-1"), forged); err != nil {
		t.Fatalf("node-1's own report: %v", err)
	}
	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status == api.JobCancelled {
		t.Fatalf("one node's report cancelled the job: %s (%s)", done.Status, done.Error)
	}
	if s := nodeStatus(done, 0, "node-2"); s != api.StepSuccess {
		t.Errorf("node-2's sleep: %s, want success (its work was not stopped)", s)
	}
	if s := nodeStatus(done, 0, "node-1"); s != api.StepFailed {
		t.Errorf("node-1's step: %s, want failed", s)
	}
	if done.Status != api.JobPartialFailure {
		t.Errorf("job %s, want partial_failure (node-1 failed, node-2 succeeded, continue)", done.Status)
	}
}
