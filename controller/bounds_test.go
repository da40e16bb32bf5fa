package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestHugeOutputEndsAndFreesSlot: a task writing about a million
// characters is capped at the agent (64 KiB by default, marked truncated),
// and the job ends and frees the controller's only slot.
func TestHugeOutputEndsAndFreesSlot(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Controller: func(c *controller.Config) { c.MaxConcurrent = 1 }})
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: output, params: {bytes: 1000000}}]")
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Status, j.Error)
	}
	for _, node := range []string{"node-1", "node-2"} {
		out := j.Results.Node(0, node).Output
		if len(out) > agent.DefaultMaxOutputBytes+200 || !strings.Contains(out, "truncated: 1000000 bytes") {
			t.Errorf("%s: output of %d bytes, ending %q; want it capped at 64 KiB and marked", node, len(out), out[max(0, len(out)-100):])
		}
	}
	// The slot is free: another job runs.
	if j := submitWait(t, f, "target: {scope: any}\ntasks: [{backend: ping, action: echo}]"); j.Status != api.JobCompleted {
		t.Fatalf("next job: %s %s", j.Status, j.Error)
	}
}

// TestJobOverBusLimitStillEnds: agents allowed 1 MiB of output each, on
// ten nodes, make a job bigger than the bus's 8 MiB payload limit. Its
// final write must still land (the controller cuts the stored outputs),
// and the slot must free.
func TestJobOverBusLimitStillEnds(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 10,
		Controller: func(c *controller.Config) { c.MaxConcurrent = 1 },
		Agent:      func(_ int, c *agent.Config) { c.MaxOutputBytes = agent.MaxOutputBytesLimit }})
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: output, params: {bytes: 1000000}}]")
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Status, j.Error)
	}
	if out := j.Results.Node(0, "node-1").Output; !strings.Contains(out, "truncated by the controller") {
		t.Errorf("output of %d bytes not marked as cut by the controller", len(out))
	}
	if j := submitWait(t, f, "target: {scope: any}\ntasks: [{backend: ping, action: echo}]"); j.Status != api.JobCompleted {
		t.Fatalf("next job: %s %s", j.Status, j.Error)
	}
}

// TestSubmitRefusesJobThatCannotFit: a job that could not be stored with
// its results once every targeted node answered is a 400 naming the limit.
func TestSubmitRefusesJobThatCannotFit(t *testing.T) {
	// 1,000 steps on 24 nodes: 24,000 results of some 400 bytes each.
	f := fleettest.Start(t, fleet.Options{Agents: 24})
	var tasks []string
	for range 1000 {
		tasks = append(tasks, `{"backend":"ping","action":"echo"}`)
	}
	body := `{"target":{"scope":"all"},"tasks":[` + strings.Join(tasks, ",") + `]}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.APIURL()+"/job", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	resp, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(eb.Error, "bus limit of") || !strings.Contains(eb.Error, "max_payload") {
		t.Fatalf("got %d %q, want a 400 naming the bus limit", resp.StatusCode, eb.Error)
	}
}
