package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// ClusterFormTimeout bounds how long a controller waits for a clustered
// JetStream to elect its meta leader before giving up on the topology.
const ClusterFormTimeout = 60 * time.Second

// RaiseWait bounds how long a controller retries raising a stream's replicas
// that JetStream cannot place yet (too few servers up) before it starts with
// the stream as it is.
const RaiseWait = 10 * time.Second

// EnsureTopologyRetry creates or updates the streams and buckets like
// EnsureTopology, retrying each until it succeeds, ctx ends or wait has
// passed. A clustered JetStream answers nothing until enough servers have
// joined to elect a meta leader, and R3 streams need three servers: the
// controllers of a cluster start in any order, so the first ones wait here
// for the others. The controllers of a new cluster also create the same
// streams at the same moment, and the server may then leave every one of
// the concurrent requests unanswered although the stream gets created; short
// tries (the next one finds the stream and only updates it) keep that from
// costing more than a second or two per stream.
func EnsureTopologyRetry(ctx context.Context, js jetstream.JetStream, t Topology, wait time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	retried := false
	steps := t.steps(js, log, RaiseWait)
	// Each try gets a little longer than the last; between tries a short,
	// jittered pause, so the controllers of a new cluster do not retry in step.
	tryTimeouts := retry.Policy{Initial: time.Second, Multiplier: 2, Max: 5 * time.Second}
	pause := retry.Policy{Initial: 300 * time.Millisecond, Jitter: 5.0 / 6} // 50-300ms
	for _, step := range steps {
		err := retry.Do(ctx, pause, func(try int) error {
			tctx, tcancel := context.WithTimeout(ctx, tryTimeouts.Delay(try))
			defer tcancel()
			err := step(tctx)
			if err != nil {
				retried = true
				if try == 1 || try%10 == 0 {
					log.Info("waiting for JetStream (cluster forming?)", "replicas", t.Replicas, "err", err)
				}
			}
			return err
		})
		if noStorage(err) {
			return err // not a cluster still forming: explain says what to do
		}
		if err != nil {
			return fmt.Errorf("JetStream not ready after %s (with replicas %d, at least %d servers of the cluster must be up and routed to each other): %w",
				time.Since(start).Round(time.Second), t.Replicas, t.Replicas, err)
		}
	}
	if retried {
		log.Info("JetStream topology ready", "replicas", t.Replicas, "after", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
