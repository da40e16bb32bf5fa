package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestRetryAndDelete: a retry submits the job's spec again linked by
// retry_of, with --failed-only only on the node that failed; a running job
// can be neither retried nor deleted, a finished one is deleted.
func TestRetryAndDelete(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3})
	ctx := context.Background()
	c := f.Client()
	// A path in node-2's sandbox: outside the others', so only node-2
	// writes it and node-1 and node-3 fail.
	path := filepath.Join(f.DataDir(), "agents", "node-2", "sandbox", "retry")
	j := submit(t, f, fmt.Sprintf(`
target: {scope: all}
strategy: continue
tasks:
  - {backend: file, action: write, params: {path: %q, content: "x"}}
`, path))
	j = wait(t, f, j.ID)
	if j.Status != api.JobPartialFailure || nodeStatus(j, 0, "node-2") != api.StepSuccess || nodeStatus(j, 0, "node-1") != api.StepFailed {
		t.Fatalf("first run: %s, node-1 %s, node-2 %s; want partial_failure with only node-2 through", j.Status, nodeStatus(j, 0, "node-1"), nodeStatus(j, 0, "node-2"))
	}

	all, err := c.RetryJob(ctx, j.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	all = wait(t, f, all.ID)
	if all.RetryOf != j.ID || all.Status != api.JobPartialFailure || len(all.Expected) != 3 {
		t.Fatalf("full retry: retry_of %q status %s expected %v", all.RetryOf, all.Status, all.Expected)
	}

	failed, err := c.RetryJob(ctx, j.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	failed = wait(t, f, failed.ID)
	want := []string{"node-1", "node-3"}
	if failed.RetryOf != j.ID || !slices.Equal(failed.Expected, want) || !slices.Equal(failed.Nodes, want) {
		t.Fatalf("failed-only retry: retry_of %q expected %v nodes %v, want %v", failed.RetryOf, failed.Expected, failed.Nodes, want)
	}
	for _, n := range []string{"node-2"} {
		if s := nodeStatus(failed, 0, n); s != "<none>" {
			t.Fatalf("failed-only retry ran on %s (%s)", n, s)
		}
	}

	ok := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]")
	if _, err := c.RetryJob(ctx, ok.ID, true); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("failed-only retry of a completed job: %v, want 409", err)
	}

	running := submit(t, f, "target: {scope: node, value: node-1}\ntasks: [{backend: ping, action: sleep, params: {duration: 30s}}]")
	waitFor(t, 10*time.Second, "the job to run", func() bool {
		cur, err := c.GetJob(ctx, running.ID)
		return err == nil && cur.Status == api.JobRunning
	})
	if _, err := c.RetryJob(ctx, running.ID, false); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("retry of a running job: %v, want 409", err)
	}
	if err := c.DeleteJob(ctx, running.ID); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("delete of a running job: %v, want 409", err)
	}
	if _, err := c.CancelJob(ctx, running.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, f, running.ID)

	for _, id := range []string{j.ID, running.ID} {
		if err := c.DeleteJob(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if _, err := c.GetJob(ctx, id); !api.IsStatus(err, http.StatusNotFound) {
			t.Fatalf("get of deleted job %s: %v, want 404", id, err)
		}
	}
	jobs, err := c.ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, lj := range jobs {
		if lj.ID == j.ID || lj.ID == running.ID {
			t.Fatalf("deleted job %s still listed", lj.ID)
		}
	}
	if err := c.DeleteJob(ctx, j.ID); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("second delete: %v, want 404", err)
	}
	if _, err := c.RetryJob(ctx, "job-missing", false); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("retry of a missing job: %v, want 404", err)
	}
}
