package controller_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// A node_offline_after that one missed heartbeat would pass is said at
// WARN: at start against the agents' default heartbeat, and for each node
// whose own heartbeat_interval is too long for it.
func TestNodeOfflineAfterShorterThanHeartbeatsWarns(t *testing.T) {
	logs := &syncBuffer{}
	fleettest.Start(t, fleet.Options{Agents: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Controller: func(c *controller.Config) {
			c.NodeOfflineAfter = config.Duration(3 * time.Second)
		},
		Agent: func(i int, c *agent.Config) {
			if i == 0 { // node-1 beats too seldom; node-2 often enough
				c.HeartbeatInterval = agent.Duration(2 * time.Second)
			}
		}})
	if !logged(logs, "WARN", "node_offline_after is less than twice the agents' default heartbeat_interval") {
		t.Error("no warning at start for a node_offline_after below twice the default heartbeat")
	}
	waitFor(t, 10*time.Second, "a warning about node-1's heartbeat", func() bool {
		for _, l := range logs.lines() {
			if l["level"] == "WARN" && l["node"] == "node-1" && l["heartbeat_interval"] != nil {
				return true
			}
		}
		return false
	})
	for _, l := range logs.lines() {
		if l["level"] == "WARN" && l["node"] == "node-2" && l["heartbeat_interval"] != nil {
			t.Errorf("warned about node-2, whose heartbeat fits: %v", l)
		}
	}
}
