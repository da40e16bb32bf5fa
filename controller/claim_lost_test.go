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

// A claim whose write landed but whose answer was lost (a stream failing
// over) leaves the job running and owned by a live controller that does
// not run it; no peer takes over from a live owner. When the request comes
// again, the owner must run the job instead of dropping the request.
func TestClaimResumesJobStoredOwnedButNotRun(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	job := api.Job{
		ID: "job-claimlost0000001", Status: api.JobRunning, Owner: f.Controller.ID(),
		Target: api.Target{Scope: api.ScopeAll}, Strategy: api.StrategyFailFast, Expected: []string{"node-1", "node-2"},
		Tasks:     []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "resumed"}}},
		CreatedAt: now, UpdatedAt: now, StartedAt: &now,
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, job.ID, b); err != nil {
		t.Fatal(err)
	}
	// The request again, as a redelivery would bring it.
	if _, err := js.Publish(ctx, api.PriorityRequestSubject(api.DefaultPriority, job.ID), nil); err != nil {
		t.Fatal(err)
	}
	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s (%s), want completed", done.Status, done.Error)
	}
	for _, node := range []string{"node-1", "node-2"} {
		if r := done.Results[0][node]; r == nil || r.Output != "resumed" {
			t.Errorf("%s: %+v", node, r)
		}
	}
}
