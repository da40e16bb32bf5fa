package bus

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	for _, step := range steps {
		tryTimeout := time.Second
		for try := 1; ; try++ {
			tctx, tcancel := context.WithTimeout(ctx, tryTimeout)
			err := step(tctx)
			tcancel()
			if err == nil {
				break
			}
			retried = true
			if try == 1 || try%10 == 0 {
				log.Info("waiting for JetStream (cluster forming?)", "replicas", t.Replicas, "err", err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("JetStream not ready after %s (with replicas %d, at least %d servers of the cluster must be up and routed to each other): %w",
					time.Since(start).Round(time.Second), t.Replicas, t.Replicas, err)
			case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond): //nolint:gosec // jitter between retries, not a secret
			}
			tryTimeout = min(tryTimeout*2, 5*time.Second)
		}
	}
	if retried {
		log.Info("JetStream topology ready", "replicas", t.Replicas, "after", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
