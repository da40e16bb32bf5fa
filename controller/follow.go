package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// followPolicy paces the tries to watch a bucket again after its watch
// ended.
var followPolicy = retry.Policy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.2}

// firstWatchWait bounds the tries to open a bucket's first watch. A watch
// is an ephemeral consumer that JetStream may place on any current server
// of the stream; on a server that has just restarted on its data dir and is
// still catching up, or while a cluster elects leaders, the creation can
// go unanswered within the client's API timeout. That is a state the
// cluster leaves by itself, so the controller tries again as long as it
// would wait for the cluster to form, instead of failing its start.
var firstWatchWait = bus.ClusterFormTimeout

// follow keeps a copy of a bucket current: it hands every entry of kv (the
// stored ones, then each change, deletions included) to apply, in order,
// from one goroutine counted in wg, until ctx ends. The returned channel
// is closed once the entries stored when it started have been applied.
//
// A watch that ends while ctx lives (its updates channel closed) is opened
// again from the revision after the last one applied, so no change made
// meanwhile is missed; tries are paced by followPolicy. The first watch
// is tried again for up to firstWatchWait; only its failure then is
// returned: a controller must not start without its copy of the bucket.
func follow(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue, log *slog.Logger, what string,
	apply func(jetstream.KeyValueEntry)) (<-chan struct{}, error) {
	w, err := firstWatch(ctx, kv, log, what)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", what, err)
	}
	ready := make(chan struct{})
	wg.Go(func() {
		var last uint64
		initial := true
		for {
			for stopped := false; !stopped; {
				select {
				case <-ctx.Done():
					_ = w.Stop()
					return
				case e, ok := <-w.Updates():
					switch {
					case !ok:
						stopped = true
					case e == nil:
						if initial {
							initial = false
							close(ready)
						}
					case e.Revision() > last:
						last = e.Revision()
						apply(e)
					}
				}
			}
			_ = w.Stop()
			err := retry.Do(ctx, followPolicy, func(try int) error {
				var err error
				if last == 0 {
					w, err = kv.WatchAll(ctx)
				} else {
					w, err = kv.WatchAll(ctx, jetstream.ResumeFromRevision(last+1))
				}
				if err != nil && try == 1 {
					log.Warn("watch ended; watching again", "bucket", what, "err", err)
				}
				return err
			})
			if err != nil {
				return // ctx ended
			}
		}
	})
	return ready, nil
}

// firstWatch opens a bucket's first watch, trying again while JetStream
// does not answer, for up to firstWatchWait or until ctx ends.
func firstWatch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, what string) (jetstream.KeyWatcher, error) {
	var w jetstream.KeyWatcher
	err := untilAnswered(ctx, log, "watch "+what, func() (err error) {
		w, err = kv.WatchAll(ctx)
		return err
	})
	return w, err
}

// untilAnswered tries op, which makes a consumer (a watch is one), again
// while it fails, for up to firstWatchWait or until ctx ends, and returns
// its last error. It is for the consumers a controller needs to start.
func untilAnswered(ctx context.Context, log *slog.Logger, what string, op func() error) error {
	policy := followPolicy
	policy.MaxElapsed = firstWatchWait
	return retry.Do(ctx, policy, func(try int) error {
		err := op()
		if err != nil && try == 1 {
			log.Warn("JetStream did not answer; trying again while the cluster settles", "what", what, "err", err)
		}
		return err
	})
}

// followLoaded is follow that returns once the stored entries are applied:
// for the copies a controller must not serve without (tokens,
// enrollments, join tokens).
func followLoaded(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue, log *slog.Logger, what string,
	apply func(jetstream.KeyValueEntry)) error {
	ready, err := follow(ctx, wg, kv, log, what, apply)
	if err != nil {
		return err
	}
	return waitReady(ctx, ready, what)
}

// waitReady waits for a followed bucket's stored entries to be applied.
func waitReady(ctx context.Context, ready <-chan struct{}, what string) error {
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("load %s: %w", what, ctx.Err())
	}
}
