package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// logReplicas says at start how many copies of the streams and buckets the
// cluster keeps, and warns when one server's loss would lose data.
func (c *Controller) logReplicas(n int, chosen bool) {
	// The server this controller talks to names its cluster; empty when
	// it is a single server.
	cluster := c.nc.ConnectedClusterName()
	switch {
	case cluster == "":
		c.log.Info("replicas of streams and buckets", "replicas", n, "chosen", chosen)
	case !chosen && n == 1:
		c.log.Warn("replicas is 1 in a cluster: every stream and bucket has a single copy, so losing the server that holds it "+
			"loses its jobs and stops the cluster until it returns; leave replicas unset (3 in a cluster of three or more) or set replicas: 3",
			"replicas", n, "cluster", cluster)
	case chosen && len(c.cfg.NATSURLs) > 0:
		c.log.Warn("connected to a NATS cluster with replicas unset: streams and buckets are created with one copy; "+
			"set replicas (3 for a cluster of three or more) so that one server's loss loses no data",
			"replicas", n, "cluster", cluster)
	case chosen && n == 1:
		c.log.Warn("cluster_name is set but routes name no other server: streams and buckets are created with one copy; "+
			"list the other servers in routes, or set replicas", "replicas", n, "cluster", cluster)
	case chosen:
		c.log.Info("replicas of streams and buckets chosen from the cluster's size", "replicas", n,
			"servers", c.cfg.clusterServers(), "cluster", cluster)
	default:
		c.log.Info("replicas of streams and buckets", "replicas", n, "cluster", cluster)
	}
}

// topologyStreams names the streams and buckets the controller keeps, with
// the stream behind each (a KV bucket is the stream KV_<bucket>).
func topologyStreams() []api.StreamHealth {
	var out []api.StreamHealth
	streams, buckets := bus.DefaultTopology().Names()
	for _, s := range streams {
		out = append(out, api.StreamHealth{Name: s, Stream: s})
	}
	for _, b := range buckets {
		out = append(out, api.StreamHealth{Name: b, Bucket: true, Stream: bus.KVStream(b)})
	}
	return out
}

// streamHealth asks JetStream, concurrently and within ctx, for every
// stream's replicas, leader and current replicas. A stream whose info
// cannot be read (no leader: "stream is offline", or no answer) has
// Error set and no leader.
func (c *Controller) streamHealth(ctx context.Context) []api.StreamHealth {
	out := topologyStreams()
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			h := &out[i]
			s, err := c.js.Stream(ctx, h.Stream)
			if err != nil {
				h.Error = err.Error()
				if errors.Is(err, context.DeadlineExceeded) {
					h.Error = "no answer from JetStream (no leader?)"
				}
				return
			}
			fillHealth(h, s.CachedInfo())
		})
	}
	wg.Wait()
	return out
}

// fillHealth reads a stream's replica state from its info: the leader
// counts as current when there is one; peers count when current and online.
func fillHealth(h *api.StreamHealth, info *jetstream.StreamInfo) {
	h.Replicas = info.Config.Replicas
	if h.Replicas < 1 {
		h.Replicas = 1
	}
	ci := info.Cluster
	if ci == nil {
		// A stream answering without cluster info is served by its only
		// server.
		h.HasLeader, h.Current = true, 1
		return
	}
	h.Leader = ci.Leader
	h.HasLeader = ci.Leader != ""
	if h.HasLeader {
		h.Current = 1
	}
	for _, p := range ci.Replicas {
		if p != nil && keepingUp(p) {
			h.Current++
		}
	}
}

// keepingUp says whether a replica is current in the sense an operator
// needs: online, not still being added, heard from by the leader lately,
// and at most a few entries behind. JetStream's own flag is too strict for
// a busy stream (current only at lag 0, rarely seen at the moment of
// asking) and too lenient for an idle one (a dead peer of a stream that
// has no writes keeps lag 0, so it stays "current").
func keepingUp(p *jetstream.PeerInfo) bool {
	const (
		maxSilence = 5 * time.Second
		maxLag     = 100
	)
	return !p.Offline && !p.Pending && p.Active <= maxSilence && (p.Current || p.Lag <= maxLag)
}

// healthLine is a stream's state in a few words for /readyz.
func healthLine(h api.StreamHealth) string {
	if h.Error != "" {
		return h.Error
	}
	state := "ok"
	if h.Current < h.Replicas {
		state = "degraded"
	}
	return fmt.Sprintf("%s: %d replicas, %d current, leader %s", state, h.Replicas, h.Current, h.Leader)
}

// streamHealthTimeout bounds the stream info requests of /readyz, /status
// and a metrics scrape: a stream without a leader does not answer.
const streamHealthTimeout = 2 * time.Second
