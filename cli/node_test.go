package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// A host scaled down leaves an offline record; grid node remove forgets it,
// and refuses a node whose agent still runs.
func TestNodeRemove(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx := context.Background()
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, "--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile())...)
	}

	code, _, errOut := grid("node", "remove", "node-1")
	if code == ExitOK || !strings.Contains(errOut, "is online") || !strings.Contains(errOut, "grid node revoke node-1") {
		t.Errorf("remove an online node: code %d err %q; want a refusal saying what to do", code, errOut)
	}
	if _, err := f.Client().GetNode(ctx, "node-1"); err != nil {
		t.Fatalf("a refused remove lost the node: %v", err)
	}

	if err := f.KillAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "node-2 offline", func() bool {
		n, err := f.Client().GetNode(ctx, "node-2")
		return err == nil && n.Status == api.NodeOffline
	})
	code, out, errOut := grid("node", "remove", "node-2")
	if code != ExitOK || strings.TrimSpace(out) != "node node-2 removed" {
		t.Fatalf("remove an offline node: code %d out %q err %q", code, out, errOut)
	}
	if _, err := f.Client().GetNode(ctx, "node-2"); !api.IsStatus(err, 404) {
		t.Errorf("GET /node/node-2 after remove: %v, want 404", err)
	}
	code, out, _ = grid("node", "list")
	if code != ExitOK || strings.Contains(out, "node-2") || !strings.Contains(out, "node-1") {
		t.Errorf("node list after remove: code %d\n%s", code, out)
	}
	// The record stays gone: nothing brings back a node whose agent is down.
	if nodes, err := f.Client().ListNodes(ctx); err != nil || len(nodes) != 1 {
		t.Errorf("nodes after remove: %d %v, want node-1 alone", len(nodes), err)
	}
	if code, _, errOut := grid("node", "remove", "node-2"); code == ExitOK || !strings.Contains(errOut, "not found") {
		t.Errorf("remove it again: code %d err %q, want not found", code, errOut)
	}
}
