package controller_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Submissions are validated against the schemas of the nodes online at
// that moment, even though the merged schemas are cached between
// submissions: a node joining or leaving counts at once.
func TestValidationFollowsNodesJoiningAndLeaving(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{})
	ctx := context.Background()
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "x"}}}}
	if _, err := f.Client().SubmitJob(ctx, spec); !api.IsStatus(err, http.StatusBadRequest) {
		t.Fatalf("no nodes: %v, want 400", err)
	}
	a, err := f.AddAgent(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitOnline(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().SubmitJob(ctx, spec); err != nil {
		t.Fatalf("a node joined: %v", err)
	}
	if err := f.StopAgent(a.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the node offline", func() bool {
		n, err := f.Client().ListNodes(ctx)
		return err == nil && len(n) == 1 && n[0].Status == api.NodeOffline
	})
	if _, err := f.Client().SubmitJob(ctx, spec); !api.IsStatus(err, http.StatusBadRequest) {
		t.Fatalf("the node left: %v, want 400", err)
	}
}
