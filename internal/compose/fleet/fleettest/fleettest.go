// Package fleettest starts an in-process fleet for a test: a real controller
// with an embedded NATS server and real agents, on random ports under
// t.TempDir, stopped when the test ends.
package fleettest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Start starts a fleet for t. Heartbeats and offline detection are tightened
// so that tests about lost nodes finish in seconds; opts.Controller and
// opts.Agent run after that and may override it.
func Start(t testing.TB, opts fleet.Options) *fleet.Fleet {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	// The fleet's logs are kept (the last logKeep lines, at debug level)
	// and printed when the test fails, so a failure says what the
	// controller and agents saw. A test that wants the logs itself passes
	// its own logger.
	var keep *lineKeeper
	if opts.Logger == nil {
		keep = &lineKeeper{}
		opts.Logger = slog.New(slog.NewTextHandler(keep, &slog.HandlerOptions{Level: slog.LevelDebug}))
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
		if keep != nil && t.Failed() {
			t.Logf("the fleet's log (its last %d lines at most):\n%s", logKeep, keep.String())
		}
		cancel()
		select {
		case <-f.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("fleet did not stop within 30s")
		}
	})
	return f
}

// logKeep is how many of a fleet's last log lines a failed test prints.
const logKeep = 400

// lineKeeper keeps the last logKeep lines written to it.
type lineKeeper struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func (k *lineKeeper) Write(p []byte) (int, error) {
	line := string(p)
	k.mu.Lock()
	if len(k.lines) < logKeep {
		k.lines = append(k.lines, line)
	} else {
		k.lines[k.next] = line
		k.next = (k.next + 1) % logKeep
	}
	k.mu.Unlock()
	return len(p), nil
}

func (k *lineKeeper) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for i := range k.lines {
		b.WriteString(k.lines[(k.next+i)%len(k.lines)])
	}
	return b.String()
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
