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

// A node is online while its registry puts keep arriving, even when the
// last_seen it writes is old (its clock is behind, or the entry reaches the
// controller's KV watch late), and offline once they stop for
// node_offline_after.
func TestNodeLivenessFollowsReceivedHeartbeats(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{}) // node_offline_after 2s
	js := fleettest.JetStream(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AdmitNode(ctx, "skewed-1", []string{"web.prod"}); err != nil {
		t.Fatal(err)
	}
	skewed := time.Now().Add(-10 * time.Minute).UTC()
	info, _ := json.Marshal(api.NodeInfo{ID: "skewed-1", Groups: []string{"web.prod"}, Status: api.NodeOnline,
		OnlineSince: skewed, LastSeen: skewed})
	status := func() string {
		n, err := f.Client().GetNode(ctx, "skewed-1")
		if err != nil {
			return ""
		}
		return n.Status
	}

	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := kv.Put(ctx, "skewed-1", info); err != nil {
				if ctx.Err() == nil {
					t.Errorf("heartbeat put: %v", err)
				}
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	waitFor(t, 5*time.Second, "the node to be listed", func() bool { return status() != "" })
	// Several offline windows long: last_seen alone says offline throughout.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if s := status(); s != api.NodeOnline {
			t.Fatalf("node heartbeating with an old last_seen is %q, want online", s)
		}
	}
	close(stop)
	<-beating
	waitFor(t, 10*time.Second, "the silent node to go offline", func() bool { return status() == api.NodeOffline })
}
