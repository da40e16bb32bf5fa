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

// A node's progress reports cannot grow its job past what can be stored:
// one far over the cap is dropped, a large one is cut to a status line,
// and the job still ends (a job that outgrew the bus could never be
// written again and would hold its slot for ever).
func TestProgressReportsCannotWedgeAJob(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sleep to start", func() bool {
		cur, err := f.Client().GetJob(ctx, job.ID)
		return err == nil && nodeStatus(cur, 0, "node-1") == api.StepRunning
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
	pct := 50
	// '<' is written \u003c in JSON: six bytes stored for each one sent.
	for _, n := range []int{60 << 10, 900 << 10} {
		b, _ := json.Marshal(api.TaskResult{JobID: job.ID, TaskIndex: 0, NodeID: "node-1", Attempt: 1, Status: api.ResultProgress,
			Progress: &pct, Output: strings.Repeat("<", n), Timestamp: time.Now().UTC()})
		if err := a.nc.Publish(api.ProgressSubject(job.ID, 0, "node-1"), b); err != nil {
			t.Fatal(err)
		}
	}
	// The task ends, reported by the node's key.
	final, _ := json.Marshal(api.TaskResult{JobID: job.ID, TaskIndex: 0, NodeID: "node-1", Attempt: 1, Status: api.StepSuccess,
		Timestamp: time.Now().UTC()})
	if err := a.ask(ctx, api.ReportSubject(job.ID, 0, "node-1"), final); err != nil {
		t.Fatal(err)
	}
	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s (%s), want completed", done.Status, done.Error)
	}
	if r := done.Results.Node(0, "node-1"); r == nil || len(r.ProgressMessage) > 4<<10 {
		t.Errorf("progress message kept: %d bytes, want at most 4 KiB", len(r.ProgressMessage))
	}
}
