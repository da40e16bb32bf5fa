package agent

import (
	"maps"
	"time"
)

// shrinkMin is the peak size below which a drained map is kept as it is.
const shrinkMin = 1024

// recent remembers values by key for a while, bounded in count, in bytes
// (when it has a size function) and in age, oldest evicted first, so an agent
// that runs for months does not grow without limit. Its sweep drops what
// expired and gives back the memory of a map that has drained; the heartbeat
// calls it, so an agent that went idle does not keep its last busy hour's
// keys. It is not safe for concurrent use; the agent guards it with its
// mutex.
type recent[K comparable, V any] struct {
	maxLen   int
	maxBytes int         // 0: no bound on bytes
	size     func(V) int // bytes of a value, counted against maxBytes
	ttl      time.Duration
	m        map[K]stamped[V]
	// order holds keys oldest first from head on; evicting from the front
	// keeps eviction O(1) per key.
	order []K
	head  int
	bytes int
	// peak is the most entries m held since it was last rebuilt, and
	// removed how many it dropped since.
	peak    int
	removed int
}

type stamped[V any] struct {
	v  V
	at time.Time
}

func newRecent[K comparable, V any](maxLen int, ttl time.Duration) *recent[K, V] {
	return &recent[K, V]{maxLen: maxLen, ttl: ttl, m: map[K]stamped[V]{}}
}

// get returns the value remembered for k, if it has not expired.
func (r *recent[K, V]) get(k K, now time.Time) (V, bool) {
	r.evict(now)
	e, ok := r.m[k]
	return e.v, ok
}

// has reports whether k is remembered and has not expired.
func (r *recent[K, V]) has(k K, now time.Time) bool {
	_, ok := r.get(k, now)
	return ok
}

// add remembers v for k from now on. Adding a remembered key replaces its
// value but not its age or place in the eviction order.
func (r *recent[K, V]) add(k K, v V, now time.Time) {
	r.evict(now)
	if e, ok := r.m[k]; ok {
		r.bytes += r.sizeOf(v) - r.sizeOf(e.v)
		r.m[k] = stamped[V]{v: v, at: e.at}
	} else {
		r.m[k] = stamped[V]{v: v, at: now}
		r.order = append(r.order, k)
		r.bytes += r.sizeOf(v)
		r.peak = max(r.peak, len(r.m))
	}
	// The newest entry stays even when it alone is over the byte bound.
	for len(r.m) > r.maxLen || (r.maxBytes > 0 && r.bytes > r.maxBytes && len(r.m) > 1) {
		r.popFront()
	}
}

// Len is the number of remembered keys.
func (r *recent[K, V]) Len() int { return len(r.m) }

// sweep forgets the expired entries and moves what is left to a map of its
// size once the map holds a quarter of what it once held (a Go map keeps the
// memory of its largest size), or once it has dropped twice what it
// holds: a map whose keys keep coming and going keeps some of the slots they
// left and grows past what its keys need, step by step.
func (r *recent[K, V]) sweep(now time.Time) {
	r.evict(now)
	if r.peak >= shrinkMin && (len(r.m)*4 <= r.peak || r.removed >= 2*max(len(r.m), shrinkMin)) {
		m := make(map[K]stamped[V], len(r.m))
		maps.Copy(m, r.m)
		r.m, r.peak, r.removed = m, len(m), 0
	}
}

func (r *recent[K, V]) sizeOf(v V) int {
	if r.size == nil {
		return 0
	}
	return r.size(v)
}

func (r *recent[K, V]) evict(now time.Time) {
	for r.head < len(r.order) {
		e, ok := r.m[r.order[r.head]]
		if ok && now.Sub(e.at) < r.ttl {
			return
		}
		r.popFront()
	}
}

func (r *recent[K, V]) popFront() {
	if r.head >= len(r.order) {
		return
	}
	var zero K
	k := r.order[r.head]
	if e, ok := r.m[k]; ok {
		r.bytes -= r.sizeOf(e.v)
		delete(r.m, k)
		r.removed++
	}
	r.order[r.head] = zero
	r.head++
	// Compact once the dead front dominates, so the slice does not keep
	// every key ever seen.
	if r.head > 1024 && r.head*2 > len(r.order) {
		r.order = append([]K(nil), r.order[r.head:]...)
		r.head = 0
	}
}

// finalResult is a finished task's result as published.
type finalResult struct {
	subject string
	data    []byte
}

// newFinalCache keeps the last results this agent published, so a repeated
// command can be answered without running again. Results are kept as long
// as the dedupe key that makes a command a repeat (ttl), up to limit results
// and maxBytes: a result holds up to 1 MiB of output and as much of error, so
// 64 MiB keeps at least the last 32 of the largest (one per task slot by
// default), and thousands of usual ones.
func newFinalCache(limit, maxBytes int, ttl time.Duration) *recent[taskKey, finalResult] {
	c := newRecent[taskKey, finalResult](limit, ttl)
	c.maxBytes = maxBytes
	c.size = func(f finalResult) int { return len(f.subject) + len(f.data) }
	return c
}
