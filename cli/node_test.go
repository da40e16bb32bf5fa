package cli

import (
	"context"
	"encoding/json"
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

// grid node list names each node's site and --site lists one site's
// nodes; the site comes from the node's enrollment (here: one admitted
// through the paris relay).
func TestNodeListSites(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.AdmitSiteNodes(ctx, "paris", map[string][]string{"par-1": {"web"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := fleettest.JetStream(t, f).KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(api.NodeInfo{ID: "par-1", Hostname: "par-host", Groups: []string{"web"}, Status: api.NodeOnline, LastSeen: time.Now().UTC()})
	if _, err := kv.Put(ctx, "par-1", rec); err != nil {
		t.Fatal(err)
	}
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, "--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile())...)
	}
	testwait.Until(t, 10*time.Second, 50*time.Millisecond, "par-1 listed", func() bool {
		_, out, _ := grid("node", "list")
		return strings.Contains(out, "par-1")
	})
	// rows maps each listed node to its SITE column.
	rows := func(out string) map[string]string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if head := strings.Fields(lines[0]); len(head) < 3 || head[2] != "SITE" {
			t.Fatalf("header %q: want SITE as the third column", lines[0])
		}
		m := map[string]string{}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 2 {
				m[f[0]] = f[2]
			}
		}
		return m
	}
	code, out, errOut := grid("node", "list")
	if got := rows(out); code != ExitOK || got["node-1"] != "default" || got["par-1"] != "paris" || len(got) != 2 {
		t.Errorf("node list: code %d rows %v err %q\n%s", code, got, errOut, out)
	}
	code, out, errOut = grid("node", "list", "--site", "paris")
	if got := rows(out); code != ExitOK || got["par-1"] != "paris" || len(got) != 1 {
		t.Errorf("node list --site paris: code %d rows %v err %q\n%s", code, got, errOut, out)
	}
	code, out, _ = grid("node", "list", "--site", "default", "-o", "json")
	var nodes []api.NodeInfo
	if err := json.Unmarshal([]byte(out), &nodes); code != ExitOK || err != nil || len(nodes) != 1 || nodes[0].ID != "node-1" {
		t.Errorf("node list --site default -o json: code %d %v %s", code, err, out)
	}
	if code, out, _ := grid("node", "list", "--site", "nowhere"); code != ExitOK || len(rows(out)) != 0 {
		t.Errorf("node list --site nowhere: code %d\n%s", code, out)
	}
	if code, _, errOut := grid("node", "list", "--site", "pa.ris"); code != ExitUsage || !strings.Contains(errOut, "not a site name") {
		t.Errorf("node list --site pa.ris: code %d err %q, want a usage error", code, errOut)
	}
}
