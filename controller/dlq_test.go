package controller_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestPoisonRequestGoesToDeadLetters: a request whose job cannot be read is
// tried max_deliveries times, then moves to the dead-letter stream with the
// reason (instead of being redelivered forever); replay queues it again,
// drop removes it, and a metric counts them.
func TestPoisonRequestGoesToDeadLetters(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) { c.MaxDeliveries = 3 }})
	ctx := context.Background()
	c := f.Client()
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	poison := func(id string) {
		t.Helper()
		if _, err := kv.Put(ctx, id, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, api.PriorityRequestSubject(api.DefaultPriority, id), []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	deadLetter := func(id string) *api.DeadLetter {
		dls, err := c.DeadLetters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range dls {
			if dls[i].JobID == id {
				return &dls[i]
			}
		}
		return nil
	}

	poison("job-poison1")
	var dl *api.DeadLetter
	waitFor(t, 20*time.Second, "the poison request in the dead-letter stream", func() bool {
		dl = deadLetter("job-poison1")
		return dl != nil
	})
	if !strings.Contains(dl.Reason, "decode job") || dl.Deliveries != 3 {
		t.Fatalf("dead letter %+v, want the decode error after 3 deliveries", dl)
	}

	// Repaired, the job is replayed and runs.
	job := api.Job{ID: "job-poison1", Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}},
		Status: api.JobPending, Expected: []string{}, Strategy: api.StrategyFailFast, CreatedAt: time.Now().UTC()}
	b, _ := json.Marshal(job)
	if _, err := kv.Put(ctx, job.ID, b); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplayDeadLetter(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if done := wait(t, f, job.ID); done.Status != api.JobCompleted {
		t.Fatalf("replayed job %s: %s", done.Status, done.Error)
	}
	if deadLetter(job.ID) != nil {
		t.Fatal("replayed dead letter still listed")
	}

	poison("job-poison2")
	waitFor(t, 20*time.Second, "the second poison request dead-lettered", func() bool { return deadLetter("job-poison2") != nil })
	if err := c.DropDeadLetter(ctx, "job-poison2"); err != nil {
		t.Fatal(err)
	}
	if err := c.DropDeadLetter(ctx, "job-poison2"); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("second drop: %v, want 404", err)
	}
	if dls, err := c.DeadLetters(ctx); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after replay and drop: %+v %v", dls, err)
	}
	if body := dlqGet(t, f.HTTPClient(), f.APIURL()+"/metrics", f.AdminToken()); !strings.Contains(body, "grid_requests_dead_lettered_total 2") {
		t.Fatalf("metrics lack grid_requests_dead_lettered_total 2")
	}
}

// dlqGet is this file's one raw HTTP request to the controller.
func dlqGet(t *testing.T, hc *http.Client, url, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
