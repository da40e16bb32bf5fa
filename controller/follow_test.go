package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// endingKV is a real bucket whose watches the test can end, as nats.go
// ends one whose subscription went away: a watch cannot be made to end on
// demand with a live server and connection.
type endingKV struct {
	jetstream.KeyValue
	mu      sync.Mutex
	watches []*endingWatch
	opens   int
}

type endingWatch struct {
	jetstream.KeyWatcher
	out  chan jetstream.KeyValueEntry
	end  chan struct{}
	once sync.Once
}

func (k *endingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	ew := &endingWatch{KeyWatcher: w, out: make(chan jetstream.KeyValueEntry), end: make(chan struct{})}
	go func() {
		defer close(ew.out)
		for {
			select {
			case <-ew.end:
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				select {
				case ew.out <- e:
				case <-ew.end:
					return
				}
			}
		}
	}()
	k.mu.Lock()
	k.watches = append(k.watches, ew)
	k.opens++
	k.mu.Unlock()
	return ew, nil
}

func (w *endingWatch) Updates() <-chan jetstream.KeyValueEntry { return w.out }
func (w *endingWatch) Stop() error {
	w.once.Do(func() { close(w.end) })
	return w.KeyWatcher.Stop()
}

// endAll ends every open watch.
func (k *endingKV) endAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watches {
		w.once.Do(func() { close(w.end) })
	}
}

// TestFollowAppliesEveryChangeAcrossAnEndedWatch: follow loads what is
// stored before saying ready, applies puts and deletes in order, and when
// its watch ends it watches again from where it stopped: nothing written
// meanwhile is lost and nothing is applied twice. Its goroutine ends with
// its context.
func TestFollowAppliesEveryChangeAcrossAnEndedWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bucket := storedBucket(ctx, t, "follow")
	kv := &endingKV{KeyValue: bucket}

	var (
		mu   sync.Mutex
		seen []string // "put k v" / "del k", in order
		revs []uint64
	)
	apply := func(e jetstream.KeyValueEntry) {
		mu.Lock()
		defer mu.Unlock()
		if e.Operation() == jetstream.KeyValuePut {
			seen = append(seen, "put "+e.Key()+" "+string(e.Value()))
		} else {
			seen = append(seen, "del "+e.Key())
		}
		revs = append(revs, e.Revision())
	}
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ready, err := follow(fctx, &wg, kv, slog.New(slog.DiscardHandler), "follow", apply)
	if err != nil {
		t.Fatal(err)
	}
	<-ready
	mu.Lock()
	if !slices.Equal(seen, []string{"put a 1"}) {
		t.Fatalf("ready after %v, want the stored entry first", seen)
	}
	mu.Unlock()

	if _, err := bucket.Put(ctx, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, 10*time.Millisecond, "b applied", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	})
	kv.endAll()
	// Written while no watch is open (or before the new one catches up).
	if _, err := bucket.Put(ctx, "a", []byte("3")); err != nil {
		t.Fatal(err)
	}
	if err := bucket.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	want := []string{"put a 1", "put b 2", "put a 3", "del b"}
	testwait.Until(t, 10*time.Second, 10*time.Millisecond, "the changes made across the ended watch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= len(want)
	})
	mu.Lock()
	if !slices.Equal(seen, want) || !slices.IsSorted(revs) {
		t.Fatalf("applied %v (revisions %v), want %v", seen, revs, want)
	}
	mu.Unlock()
	kv.mu.Lock()
	opens := kv.opens
	kv.mu.Unlock()
	if opens < 2 {
		t.Fatalf("the watch was opened %d times, want it opened again after it ended", opens)
	}

	stop()
	wg.Wait() // follow's goroutine ends with its context
}

// unansweredKV is a real bucket whose first watches go unanswered, as a
// consumer creation does on a server still catching up after a restart:
// nats.go then returns the API timeout.
type unansweredKV struct {
	jetstream.KeyValue
	mu       sync.Mutex
	failures int // watches still to fail; <0: all
	tries    int
}

func (k *unansweredKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	k.mu.Lock()
	k.tries++
	fail := k.failures != 0
	if k.failures > 0 {
		k.failures--
	}
	k.mu.Unlock()
	if fail {
		return nil, context.DeadlineExceeded
	}
	return k.KeyValue.WatchAll(ctx, opts...)
}

// TestFollowWaitsForAFirstWatchJetStreamDoesNotAnswerYet: a controller
// restarted into a cluster that is still catching up must come up. A first
// watch that goes unanswered is tried again, and the stored entries are
// applied once one is opened; one that stays unanswered past the wait
// fails the follow with the last error.
func TestFollowWaitsForAFirstWatchJetStreamDoesNotAnswerYet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bucket := storedBucket(ctx, t, "first")

	kv := &unansweredKV{KeyValue: bucket, failures: 2}
	var mu sync.Mutex
	var seen []string
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ready, err := follow(fctx, &wg, kv, slog.New(slog.DiscardHandler), "first", func(e jetstream.KeyValueEntry) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e.Key()+"="+string(e.Value()))
	})
	if err != nil {
		t.Fatalf("follow failed on watches JetStream answered late: %v", err)
	}
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after the watch was opened")
	}
	mu.Lock()
	if !slices.Equal(seen, []string{"a=1"}) {
		t.Errorf("applied %v, want the stored entry", seen)
	}
	mu.Unlock()
	if kv.tries != 3 {
		t.Errorf("%d tries to watch, want 3 (two unanswered, then one opened)", kv.tries)
	}
	stop()
	wg.Wait()

	prev := firstWatchWait
	firstWatchWait = 300 * time.Millisecond
	defer func() { firstWatchWait = prev }()
	never := &unansweredKV{KeyValue: bucket, failures: -1}
	if _, err := follow(ctx, &wg, never, slog.New(slog.DiscardHandler), "first", func(jetstream.KeyValueEntry) {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("follow on a bucket that never answers: %v, want the watch's timeout", err)
	}
	if never.tries < 2 {
		t.Errorf("%d tries before giving up, want it tried again", never.tries)
	}
}

// storedBucket makes a bucket on a server of its own that lives as long as
// ctx, holding a=1.
func storedBucket(ctx context.Context, t *testing.T, name string) jetstream.KeyValue {
	t.Helper()
	ns, err := embedded.StartServer(ctx, embedded.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped, and its files closed, before the data dir is removed.
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	return bucket
}
