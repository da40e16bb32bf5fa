package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// registry is the controller's in-memory view of the nodes bucket, kept
// current by a KV watch so target resolution never reads KV.
type registry struct {
	// loops counts the watch goroutine; the controller waits for it at
	// shutdown.
	loops sync.WaitGroup

	log          *slog.Logger
	offlineAfter time.Duration
	schemasKV    jetstream.KeyValue

	mu      sync.RWMutex
	nodes   map[string]*api.NodeInfo
	schemas map[string][]api.BackendSchema // by digest
	// changed is closed and replaced whenever a node changes state, so
	// waiting steps notice a node going offline at once.
	changed chan struct{}
	rr      uint64
	// heardAt is when this controller last received each node's
	// registry put on its core subscription (see watch).
	heardAt map[string]time.Time
	// heartbeats counts node puts (registrations and heartbeats); nil
	// counts nothing.
	heartbeats prometheus.Counter
	// admitted, when set (a secured bus), returns the groups a node id was
	// admitted with; a node not admitted is ignored, and an admitted node's
	// groups are those of its enrollment whatever its record says.
	admitted func(id string) (admittedAs, bool)
}

func newRegistry(log *slog.Logger, offlineAfter time.Duration, schemasKV jetstream.KeyValue) *registry {
	return &registry{log: log, offlineAfter: offlineAfter, schemasKV: schemasKV,
		nodes: map[string]*api.NodeInfo{}, heardAt: map[string]time.Time{}, schemas: map[string][]api.BackendSchema{}, changed: make(chan struct{})}
}

// watch follows the nodes bucket until ctx ends. It returns once the initial
// values are loaded.
//
// Liveness does not rest on the KV watch alone. The watch is an ordered
// consumer on one server of the cluster; when that server dies the watch
// stalls until the client notices the missed idle heartbeats and re-creates
// it elsewhere, and every node would look silent meanwhile. A put to the
// bucket is also a plain message on $KV.nodes.<id>, delivered to core
// subscribers without the stream, so a core subscription (re-established
// at once by the client on reconnect, served by this controller's own
// server) records when each node was last heard. It only marks the time;
// node contents and status changes come from the watch, in order.
func (r *registry) watch(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue) error {
	prefix := bus.KVSubject(api.BucketNodes, "")
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		id, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok || id == "" {
			return
		}
		// A delete or purge marker (a node revoked or removed) is no sign
		// of life.
		if m.Header.Get("KV-Operation") != "" {
			return
		}
		now := time.Now()
		r.mu.Lock()
		r.heardAt[id] = now
		r.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("subscribe node heartbeats: %w", err)
	}
	// Heartbeats come at 1/heartbeat_interval per node; at 10,000 nodes a
	// burst of registrations must not hit the default pending limit.
	_ = sub.SetPendingLimits(-1, 64<<20)
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	ready, err := follow(ctx, &r.loops, kv, r.log, "nodes", func(e jetstream.KeyValueEntry) { r.apply(ctx, e) })
	if err != nil {
		return err
	}
	return waitReady(ctx, ready, "nodes")
}

func (r *registry) apply(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		r.mu.Lock()
		delete(r.nodes, e.Key())
		delete(r.heardAt, e.Key())
		r.notifyLocked()
		r.mu.Unlock()
		return
	}
	if r.heartbeats != nil {
		r.heartbeats.Inc()
	}
	var n api.NodeInfo
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		r.log.Warn("ignoring malformed node entry", "node", e.Key(), "err", err)
		return
	}
	// The key is what the bus lets a node write; an id that differs from
	// it (or is no valid id, like '*') would let one node speak for another.
	if n.ID != e.Key() || !api.ValidToken(n.ID) {
		r.log.Warn("ignoring node entry whose id is not its key", "key", e.Key(), "id", n.ID)
		return
	}
	if r.admitted != nil {
		as, ok := r.admitted(n.ID)
		if !ok {
			r.log.Debug("ignoring node entry of a node not admitted", "node", n.ID)
			return
		}
		n.Groups, n.Site = as.groups, as.site
	}
	// A last_seen in the future would keep a silent node online; the time
	// the entry arrived is all it can claim.
	if now := time.Now().UTC(); n.LastSeen.After(now) {
		n.LastSeen = now
	}
	if n.SchemaDigest != "" {
		r.loadSchemas(ctx, n.SchemaDigest)
	}
	r.mu.Lock()
	prev := r.nodes[n.ID]
	if hb := time.Duration(n.HeartbeatInterval); hb > 0 && 2*hb > r.offlineAfter &&
		(prev == nil || prev.HeartbeatInterval != n.HeartbeatInterval) {
		// One missed beat would take it offline: it would flap.
		r.log.Warn("a node heartbeats too seldom for node_offline_after: it will be seen offline between beats; make node_offline_after at least twice its heartbeat_interval",
			"node", n.ID, "heartbeat_interval", hb, "node_offline_after", r.offlineAfter)
	}
	r.nodes[n.ID] = &n
	if prev == nil || prev.Status != n.Status || prev.OnlineSince != n.OnlineSince {
		r.notifyLocked()
	}
	r.mu.Unlock()
}

func (r *registry) loadSchemas(ctx context.Context, digest string) {
	r.mu.RLock()
	_, ok := r.schemas[digest]
	r.mu.RUnlock()
	if ok {
		return
	}
	e, err := r.schemasKV.Get(ctx, digest)
	if err != nil {
		r.log.Warn("node schemas not found", "digest", digest, "err", err)
		return
	}
	var set []api.BackendSchema
	if err := json.Unmarshal(e.Value(), &set); err != nil {
		r.log.Warn("ignoring malformed schema set", "digest", digest, "err", err)
		return
	}
	// Any node may write a schema set: it counts only under its own digest.
	if api.SchemaDigestOf(e.Value()) != digest && api.SchemaDigest(set) != digest {
		r.log.Warn("ignoring schema set stored under another set's digest", "digest", digest)
		return
	}
	r.mu.Lock()
	r.schemas[digest] = set
	r.mu.Unlock()
}

// forget drops a node (its admission ended).
func (r *registry) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.nodes[id]; ok {
		delete(r.nodes, id)
		delete(r.heardAt, id)
		r.notifyLocked()
	}
}

func (r *registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// changes returns a channel closed at the next node state change.
func (r *registry) changes() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// online reports whether a node is registered, not offline, and heard from
// recently: by its own last_seen or by when this controller last received a
// put of it, whichever is later.
func (r *registry) online(id string, now time.Time) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := r.nodes[id]
	return n != nil && r.isOnline(n, now)
}

// isOnline needs r.mu held (read or write).
func (r *registry) isOnline(n *api.NodeInfo, now time.Time) bool {
	if n.Status != api.NodeOnline {
		return false
	}
	seen := n.LastSeen
	if h := r.heardAt[n.ID]; h.After(seen) {
		seen = h
	}
	return now.Sub(seen) <= r.offlineAfter
}

// view returns a node as the API shows it: status derived from the
// heartbeat age, schemas filled in.
func (r *registry) view(n *api.NodeInfo, now time.Time, withSchemas bool) api.NodeInfo {
	v := *n
	if !r.isOnline(n, now) {
		v.Status = api.NodeOffline
	}
	if withSchemas {
		v.Schemas = r.schemas[n.SchemaDigest]
	}
	return v
}

// list returns every known node, sorted by id.
func (r *registry) list(withSchemas bool) []api.NodeInfo {
	now := time.Now()
	r.mu.RLock()
	out := make([]api.NodeInfo, 0, len(r.nodes))
	for _, n := range r.nodes {
		out = append(out, r.view(n, now, withSchemas))
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *registry) get(id string) (api.NodeInfo, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.nodes[id]
	if !ok {
		return api.NodeInfo{}, false
	}
	return r.view(n, time.Now(), true), true
}

// resolveAll returns the online nodes a target selects (ScopeAny picks one,
// round robin) and, for a group, site or node target, the nodes it matches
// that are offline, both sorted. Scopes all and any mean online nodes only,
// so they match no offline node. A site that no node is in is like a group
// that no node is in: it matches nothing.
func (r *registry) resolveAll(t api.Target) (online, offline []string) {
	return r.match(t, true)
}

// preview resolves a target as resolveAll would now, without moving the
// round robin of ScopeAny on: what a submission's answer shows.
func (r *registry) preview(t api.Target) (online, offline []string) {
	return r.match(t, false)
}

func (r *registry) match(t api.Target, pick bool) (online, offline []string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Scope == api.ScopeNode {
		// node:ID@SITE names the node only if it is at that site.
		if n := r.nodes[t.Value]; n != nil && t.Matches(n.ID, n.Site, n.Groups) {
			if r.isOnline(n, now) {
				online = append(online, n.ID)
			} else {
				offline = append(offline, n.ID)
			}
		}
		return online, offline
	}
	for _, n := range r.nodes {
		if !t.Matches(n.ID, n.Site, n.Groups) {
			continue
		}
		if r.isOnline(n, now) {
			online = append(online, n.ID)
		} else if t.Scope == api.ScopeGroup || t.Scope == api.ScopeSite {
			offline = append(offline, n.ID)
		}
	}
	sort.Strings(online)
	sort.Strings(offline)
	if t.Scope == api.ScopeAny && len(online) > 0 {
		next := r.rr + 1
		if pick {
			r.rr = next
		}
		return []string{online[int(next%uint64(len(online)))]}, nil
	}
	return online, offline
}

// sitesOf names the site of each of the nodes that is not in the default
// site (nil when none is): a job's NodeSites.
func (r *registry) sitesOf(ids ...[]string) map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out map[string]string
	for _, list := range ids {
		for _, id := range list {
			n := r.nodes[id]
			if n == nil || api.SiteOf(n.Site) == api.DefaultSite {
				continue
			}
			if out == nil {
				out = map[string]string{}
			}
			out[id] = n.Site
		}
	}
	return out
}

// nodeCatalog is the schemas that a set of nodes share.
type nodeCatalog struct {
	nodes []string
	cat   *api.Catalog
}

// catalogsOf groups nodes by the schemas they offer (their digest). Nodes
// whose schemas are unknown are left out: nothing can be judged of them.
func (r *registry) catalogsOf(ids []string) []nodeCatalog {
	r.mu.RLock()
	defer r.mu.RUnlock()
	byDigest := map[string]*nodeCatalog{}
	var out []*nodeCatalog
	for _, id := range ids {
		n := r.nodes[id]
		if n == nil {
			continue
		}
		set, ok := r.schemas[n.SchemaDigest]
		if !ok {
			continue
		}
		nc := byDigest[n.SchemaDigest]
		if nc == nil {
			nc = &nodeCatalog{cat: &api.Catalog{Backends: set}}
			byDigest[n.SchemaDigest] = nc
			out = append(out, nc)
		}
		nc.nodes = append(nc.nodes, id)
	}
	res := make([]nodeCatalog, len(out))
	for i, nc := range out {
		res[i] = *nc
	}
	return res
}

// catalog merges the schemas of online nodes.
func (r *registry) catalog() *api.Catalog {
	now := time.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	counts := map[string]int{}
	seen := map[string]bool{}
	var sets [][]api.BackendSchema
	for _, n := range r.nodes {
		if !r.isOnline(n, now) {
			continue
		}
		set := r.schemas[n.SchemaDigest]
		for _, b := range set {
			if len(b.Actions) > 0 { // not a backend whose every action is off here
				counts[b.Name]++
			}
		}
		if !seen[n.SchemaDigest] {
			seen[n.SchemaDigest] = true
			sets = append(sets, set)
		}
	}
	return &api.Catalog{Backends: api.MergeSchemas(sets...), Nodes: counts}
}

// counts tallies nodes by state.
func (r *registry) counts() api.NodeCounts {
	now := time.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := api.NodeCounts{Total: len(r.nodes)}
	for _, n := range r.nodes {
		if r.isOnline(n, now) {
			c.Online++
		} else {
			c.Offline++
		}
	}
	return c
}

var errNoNodes = errors.New("target matched no online nodes")
