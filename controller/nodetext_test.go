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

// A node record whose free text holds control characters (an ANSI escape
// that would clear an operator's terminal or retitle it) is refused, and
// the node's stored record keeps what it had.
func TestNodeRecordWithControlCharactersRefused(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := f.Client().GetNode(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for field, set := range map[string]func(*api.NodeInfo){
		"hostname": func(n *api.NodeInfo) { n.Hostname = "web\x1b[2J\x1b]0;owned\x07" },
		"version":  func(n *api.NodeInfo) { n.Version = "1.0\r\n" },
		"backends": func(n *api.NodeInfo) { n.Backends = []string{"ping\x1b[31m"} },
	} {
		n := api.NodeInfo{ID: "node-1", Status: api.NodeOnline, Hostname: before.Hostname, Version: before.Version,
			Backends: before.Backends, SchemaDigest: before.SchemaDigest, SealKey: before.SealKey,
			OnlineSince: before.OnlineSince, LastSeen: time.Now().UTC()}
		set(&n)
		b, _ := json.Marshal(n)
		err := a.ask(ctx, api.NodeHeartbeatSubject("node-1"), b)
		if err == nil || !strings.Contains(err.Error(), "control characters") {
			t.Errorf("%s with control characters: %v, want refused", field, err)
		}
	}
	after, err := f.Client().GetNode(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if after.Hostname != before.Hostname || after.Version != before.Version || strings.Join(after.Backends, ",") != strings.Join(before.Backends, ",") {
		t.Errorf("stored record changed: %+v, was %+v", after, before)
	}
}
