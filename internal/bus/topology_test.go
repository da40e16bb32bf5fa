package bus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
)

func testJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ns, err := embedded.StartServer(ctx, embedded.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A raise JetStream refuses (here: a single server cannot hold three
// replicas) leaves the streams as they are, with their other settings
// applied, and says what to do; it does not stop the controller's start.
func TestRaiseRefusedKeepsStreamsAndSaysSo(t *testing.T) {
	js := testJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureTopology(ctx, js, DefaultTopology()); err != nil {
		t.Fatal(err)
	}
	topo := DefaultTopology()
	topo.Replicas = 3
	topo.CommandsMaxAge = 2 * time.Hour
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, step := range topo.steps(js, log, 0) {
		if err := step(ctx); err != nil {
			t.Fatalf("a refused raise failed the topology: %v", err)
		}
	}
	for _, name := range []string{api.StreamCommands, KVStream(api.BucketJobs)} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 1 {
			t.Errorf("stream %s has %d replicas, want 1 (kept)", name, r)
		}
	}
	s, err := js.Stream(ctx, api.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Errorf("commands max age %s: the other settings were not applied", got)
	}
	for _, want := range []string{"stream commands keeps 1 replicas: raising it to 3 failed", "nats stream edit KV_jobs --replicas 3"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// Replicas chosen by the controller never lower a stream an operator gave
// more; configured ones are applied as given.
func TestWantReplicas(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replicas   int
		neverLower bool
		have, want int
	}{
		{"new stream", 3, true, 0, 3},
		{"chosen raises", 3, true, 1, 3},
		{"chosen keeps more", 1, true, 3, 3},
		{"chosen keeps more than 3", 3, true, 5, 5},
		{"configured raises", 3, false, 1, 3},
		{"configured lowers", 1, false, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := Topology{Replicas: tc.replicas, NeverLower: tc.neverLower}
			if got := topo.wantReplicas(tc.have); got != tc.want {
				t.Errorf("wantReplicas(%d) = %d, want %d", tc.have, got, tc.want)
			}
		})
	}
}
