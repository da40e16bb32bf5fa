package bus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// A cap is never set below what a stream already holds: the jobs bucket
// and the commands stream (which discards old messages) keep the cap they
// have (here none, as an earlier version left them), lose nothing, and a
// warning names the setting; a cap above what they hold is applied, and
// a later lower one too once it fits.
func TestCapNeverBelowStored(t *testing.T) {
	js := testJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The requests and dead-letter streams as an earlier version made them:
	// unbounded, discarding old messages.
	for _, sc := range []jetstream.StreamConfig{
		{Name: api.StreamRequests, Subjects: []string{api.SubjectRequests}, Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardOld},
		{Name: api.StreamDeadLetters, Subjects: []string{"dlq.>"}, Retention: jetstream.LimitsPolicy},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	unbounded := DefaultTopology()
	unbounded.Limits = nil
	if err := EnsureTopology(ctx, js, unbounded); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{api.StreamRequests, api.StreamDeadLetters} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d := s.CachedInfo().Config.Discard; d != jetstream.DiscardNew {
			t.Errorf("%s discards %v after the upgrade, want new", name, d)
		}
	}
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := kv.Put(ctx, "job-"+string(rune('a'+i)), make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		if _, err := js.Publish(ctx, "cmd.all.ping.echo", make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
	}
	state := func(stream string) (maxBytes int64, msgs uint64) {
		t.Helper()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxBytes, s.CachedInfo().State.Msgs
	}

	small := DefaultTopology()
	small.Limits = Limits(0, 1<<20, 256<<10, 1<<20, 1<<20, 256<<10, 1<<20)
	var logs bytes.Buffer
	for _, step := range small.steps(js, slog.New(slog.NewTextHandler(&logs, nil)), 0) {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, stream := range []string{KVStream(api.BucketJobs), api.StreamCommands} {
		if c, msgs := state(stream); c != -1 || msgs != 8 {
			t.Errorf("%s: cap %d with %d messages, want its cap kept (-1) and its 8 messages", stream, c, msgs)
		}
	}
	for _, want := range []string{"bucket jobs holds", "raise jobs_max_bytes", "stream commands holds", "raise commands_max_bytes"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if c, _ := state(KVStream(api.BucketNodes)); c != 1<<20 {
		t.Errorf("nodes: cap %d, want 1 MiB (it holds nothing)", c)
	}

	// A cap above what they hold is applied; then a lower one that fits.
	for _, size := range []int64{4 << 20, 2 << 20} {
		big := DefaultTopology()
		big.Limits = Limits(0, 1<<20, size, 1<<20, 1<<20, size, 1<<20)
		if err := EnsureTopology(ctx, js, big); err != nil {
			t.Fatal(err)
		}
		for _, stream := range []string{KVStream(api.BucketJobs), api.StreamCommands} {
			if c, msgs := state(stream); c != size || msgs != 8 {
				t.Errorf("%s: cap %d with %d messages, want %d and 8", stream, c, msgs, size)
			}
		}
	}
}

// Caps that together exceed the server's JetStream storage stop the
// topology at once (no retrying until the cluster-forming timeout) with
// the settings to lower.
func TestCapsThatDoNotFitSayWhatToLower(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxStore: 64 << 20, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = EnsureTopologyRetry(ctx, js, DefaultTopology(), 20*time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "lower requests_max_bytes") || !strings.Contains(err.Error(), "stream requests") {
		t.Fatalf("caps over the server's storage: %v, want an error naming the settings", err)
	}
	t.Log(err)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %s: a refusal for want of storage is not worth retrying", d)
	}
}

// Every stream and bucket is stored with S2 compression, those an earlier
// version made without it included (EnsureTopology updates them), and what
// a compressed bucket holds reads back unchanged.
func TestStoresCompressed(t *testing.T) {
	js := testJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As an earlier version made them: no compression.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: api.StreamResults, Subjects: []string{api.SubjectResults}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: api.BucketJobs, History: 1}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopology(ctx, js, DefaultTopology()); err != nil {
		t.Fatal(err)
	}
	streams, buckets := DefaultTopology().Names()
	for _, b := range buckets {
		streams = append(streams, KVStream(b))
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Config.Compression; c != jetstream.S2Compression {
			t.Errorf("stream %s compression %v, want s2", name, c)
		}
	}
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte(`{"status":"success","output":"hello","events":[{"status":"running","time":"2026-11-24T12:00:00Z"}]}`), 200)
	if _, err := kv.Put(ctx, "job-1", val); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.Value(), val) {
		t.Errorf("a compressed bucket's value reads back changed (%d bytes, want %d)", len(e.Value()), len(val))
	}
}
