package agent

import "time"

// recentSet remembers keys for a while, bounded in both size and age, so an
// agent that runs for months does not grow without limit. It is not safe for
// concurrent use; the agent guards it with its mutex.
type recentSet[K comparable] struct {
	max   int
	ttl   time.Duration
	added map[K]time.Time
	// order holds keys oldest first from head on; evicting from the front
	// keeps eviction O(1) per key.
	order []K
	head  int
}

func newRecentSet[K comparable](limit int, ttl time.Duration) *recentSet[K] {
	return &recentSet[K]{max: limit, ttl: ttl, added: map[K]time.Time{}}
}

// Has reports whether k was added and has not yet expired.
func (s *recentSet[K]) Has(k K, now time.Time) bool {
	s.evict(now)
	_, ok := s.added[k]
	return ok
}

// Add remembers k from now on; adding a remembered key changes nothing.
func (s *recentSet[K]) Add(k K, now time.Time) {
	s.evict(now)
	if _, ok := s.added[k]; ok {
		return
	}
	s.added[k] = now
	s.order = append(s.order, k)
	for len(s.added) > s.max {
		s.popFront()
	}
}

// Len is the number of remembered keys.
func (s *recentSet[K]) Len() int { return len(s.added) }

func (s *recentSet[K]) evict(now time.Time) {
	for s.head < len(s.order) {
		t, ok := s.added[s.order[s.head]]
		if ok && now.Sub(t) < s.ttl {
			return
		}
		s.popFront()
	}
}

func (s *recentSet[K]) popFront() {
	if s.head >= len(s.order) {
		return
	}
	var zero K
	delete(s.added, s.order[s.head])
	s.order[s.head] = zero
	s.head++
	// Compact once the dead front dominates, so the slice does not keep
	// every key ever seen.
	if s.head > 1024 && s.head*2 > len(s.order) {
		s.order = append([]K(nil), s.order[s.head:]...)
		s.head = 0
	}
}

// finalResult is a finished task's result as published.
type finalResult struct {
	subject string
	data    []byte
}

// finalCache keeps the last results this agent published, oldest evicted
// first, so a repeated command can be answered without running again.
type finalCache struct {
	max   int
	byKey map[taskKey]finalResult
	order []taskKey
}

func newFinalCache(limit int) *finalCache {
	return &finalCache{max: limit, byKey: map[taskKey]finalResult{}}
}

func (c *finalCache) put(k taskKey, f finalResult) {
	if _, ok := c.byKey[k]; !ok {
		c.order = append(c.order, k)
	}
	c.byKey[k] = f
	for len(c.order) > c.max {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *finalCache) get(k taskKey) (finalResult, bool) {
	f, ok := c.byKey[k]
	return f, ok
}
