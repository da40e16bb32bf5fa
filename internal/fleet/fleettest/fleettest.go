// Package fleettest starts an in-process fleet for a test: a real controller
// with an embedded NATS server and real agents, on random ports under
// t.TempDir, stopped when the test ends.
package fleettest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/fleet"
)

// Start starts a fleet for t. Heartbeats and offline detection are tightened
// so that tests about lost nodes finish in seconds; opts.Controller and
// opts.Agent run after that and may override it.
func Start(t testing.TB, opts fleet.Options) *fleet.Fleet {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	userCtl, userAgent := opts.Controller, opts.Agent
	opts.Controller = func(c *controller.Config) {
		c.NodeOfflineAfter = config.Duration(2 * time.Second)
		c.HeartbeatInterval = config.Duration(500 * time.Millisecond)
		c.RetryBackoff = config.Duration(50 * time.Millisecond)
		c.ResultGrace = config.Duration(2 * time.Second)
		c.FlushInterval = config.Duration(20 * time.Millisecond)
		if userCtl != nil {
			userCtl(c)
		}
	}
	opts.Agent = func(i int, c *agent.Config) {
		c.HeartbeatInterval = agent.Duration(300 * time.Millisecond)
		c.ShutdownGrace = agent.Duration(5 * time.Second)
		if userAgent != nil {
			userAgent(i, c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f, err := fleet.Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("fleet did not stop within 30s")
		}
	})
	return f
}

// JetStream connects to f's NATS server as the controller does, for a test
// that reads or writes the streams and buckets themselves. The connection is
// closed when the test ends.
func JetStream(t testing.TB, f *fleet.Fleet) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatalf("connect to the fleet's NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Bucket opens one of f's KV buckets over a connection of the test's own.
func Bucket(t testing.TB, ctx context.Context, f *fleet.Fleet, name string) jetstream.KeyValue {
	t.Helper()
	kv, err := JetStream(t, f).KeyValue(ctx, name)
	if err != nil {
		t.Fatalf("open bucket %s: %v", name, err)
	}
	return kv
}
