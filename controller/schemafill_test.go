package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// A node cannot fill the schemas bucket (and shut new nodes out at its
// cap) by registering made-up sets: after a few new sets, more are
// refused and not stored.
func TestNodeCannotFillTheSchemasBucket(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := fleettest.Bucket(t, ctx, f, api.BucketSchemas)
	before := keysOf(t, ctx, kv)
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 10 {
		set := []api.BackendSchema{{Name: "ping", Description: fmt.Sprintf("made up %d %s", i, strings.Repeat("x", 1000)),
			Actions: []api.ActionSchema{{Name: "echo", Description: "echo"}}}}
		raw, _ := json.Marshal(set)
		reg, _ := json.Marshal(api.NodeRegistration{Node: api.NodeInfo{ID: "node-1", Status: api.NodeOnline, Backends: []string{"ping"},
			SchemaDigest: api.SchemaDigestOf(raw), OnlineSince: time.Now().UTC(), LastSeen: time.Now().UTC()}, Schemas: raw})
		if err := a.ask(ctx, api.NodeRegisterSubject("node-1"), reg); err != nil {
			if !strings.Contains(err.Error(), "new schema sets") {
				t.Fatalf("registration %d refused for another reason: %v", i, err)
			}
			refused++
		}
	}
	if refused < 5 {
		t.Errorf("%d of 10 made-up sets refused, want all but the first few", refused)
	}
	if after := keysOf(t, ctx, kv); len(after) > len(before)+5 {
		t.Errorf("the schemas bucket grew from %d to %d sets", len(before), len(after))
	}
}
