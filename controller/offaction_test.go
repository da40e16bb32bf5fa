package controller_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// A job asking for an action the agents have but leave off is told it is
// off, whether it is dangerous, and how to enable it, not that the action
// does not exist; an action enabled on one node is offered.
func TestActionOffOnEveryNodeSaysHowToEnableIt(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Agent: func(i int, c *agent.Config) {
		if i == 1 { // node-2 enables apt.upgrade; node-1 keeps the default
			c.Allow = []string{"*", "apt.upgrade"}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(target, action string, params api.Params) error {
		_, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: target}, CheckMode: true,
			Tasks: []api.Phase{{Backend: "apt", Action: action, Params: params}}})
		return err
	}
	err := submit("node-1", "remove", api.Params{"package": "curl"})
	if !api.IsStatus(err, http.StatusBadRequest) {
		t.Fatalf("apt.remove, off everywhere: %v, want 400", err)
	}
	for _, want := range []string{"apt.remove is off", "dangerous", "allow", "--allow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("apt.remove, off everywhere: %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "unknown action") {
		t.Errorf("apt.remove, off everywhere, is called unknown: %v", err)
	}
	// Enabled on node-2: offered there (in check mode, nothing changes).
	if err := submit("node-2", "upgrade", nil); err != nil {
		t.Errorf("apt.upgrade on the node that enables it: %v", err)
	}
	if err := submit("node-1", "no_such_action", nil); err == nil || !strings.Contains(err.Error(), "unknown action") {
		t.Errorf("an action no backend has: %v, want unknown action", err)
	}
}
