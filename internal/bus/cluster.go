package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ClusterFormTimeout bounds how long a controller waits for a clustered
// JetStream to elect its meta leader before giving up on the topology.
const ClusterFormTimeout = 60 * time.Second

// EnsureTopologyRetry runs EnsureTopology until it succeeds, ctx ends or
// wait has passed. A clustered JetStream answers nothing (or "temporarily
// unavailable") until enough servers have joined to elect a meta leader, and
// R3 streams need three servers; the controllers of a cluster start in any
// order, so the first ones wait here for the others.
func EnsureTopologyRetry(ctx context.Context, js jetstream.JetStream, t Topology, wait time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	delay := 250 * time.Millisecond
	var lastErr error
	for try := 1; ; try++ {
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		err := EnsureTopology(tctx, js, t)
		tcancel()
		if err == nil {
			if try > 1 {
				log.Info("JetStream topology ready", "replicas", t.Replicas, "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		lastErr = err
		if try == 1 || try%10 == 0 {
			log.Info("waiting for JetStream (cluster forming?)", "replicas", t.Replicas, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream not ready after %s (with replicas %d, at least %d servers of the cluster must be up and routed to each other): %w",
				time.Since(start).Round(time.Second), t.Replicas, t.Replicas, lastErr)
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}
