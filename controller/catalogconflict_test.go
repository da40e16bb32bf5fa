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

// A node that declares another node's action its own way (a param narrowed
// to a value no job uses) cannot make jobs aimed at the other node refused:
// the targeted nodes' own schemas decide, whichever declaration the merged
// catalog met first.
func TestANodesDeclarationCannotRefuseJobsForOthers(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	victim, err := f.Client().GetNode(ctx, "node-1")
	if err != nil || len(victim.Schemas) == 0 {
		t.Fatalf("node-1's schemas: %v %v", victim, err)
	}
	// node-2's key, its agent stopped, registers ping.echo with a message
	// that must be "nope".
	if err := f.KillAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	var set []api.BackendSchema
	for _, b := range victim.Schemas {
		if b.Name != "ping" {
			continue
		}
		for i, act := range b.Actions {
			b.Actions[i].Params = nil
			for _, p := range act.Params {
				if p.Name == "message" {
					p.Required, p.Enum, p.Default = true, []string{"nope"}, ""
				}
				b.Actions[i].Params = append(b.Actions[i].Params, p)
			}
		}
		set = append(set, b)
	}
	raw, _ := json.Marshal(set)
	evil, err := f.Client().GetNode(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := json.Marshal(api.NodeRegistration{Node: api.NodeInfo{ID: "node-2", Status: api.NodeOnline, Hostname: evil.Hostname,
		Version: evil.Version, Backends: []string{"ping"}, SchemaDigest: api.SchemaDigestOf(raw), SealKey: evil.SealKey,
		OnlineSince: time.Now().UTC(), LastSeen: time.Now().UTC()}, Schemas: raw})
	if err := a.ask(ctx, api.NodeRegisterSubject("node-2"), reg); err != nil {
		t.Fatalf("node-2 registering its own set: %v", err)
	}
	waitFor(t, 10*time.Second, "node-2's new set to count", func() bool {
		n, err := f.Client().GetNode(ctx, "node-2")
		return err == nil && n.SchemaDigest == api.SchemaDigestOf(raw)
	})
	// Aimed at node-2 (online while its registration is fresh), its own
	// declaration holds.
	if _, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}}}}); err == nil {
		t.Error("a job for node-2 that its own schema refuses was taken")
	}
	refused := 0
	for range 20 {
		// A fresh merge each time (the controller caches one for 100ms):
		// which declaration it meets first varies.
		time.Sleep(120 * time.Millisecond)
		_, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}}}})
		if err != nil {
			refused++
			t.Logf("refused: %v", err)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 20 jobs for node-1 refused because of node-2's declaration", refused)
	}
}
