package controller

import (
	"sync"

	"golang.org/x/time/rate"
)

// keyedLimiter is a token bucket per key (a node id). Its keys are
// enrolled nodes, so the map grows with the fleet, not with what a sender
// makes up.
type keyedLimiter struct {
	every rate.Limit
	burst int
	mu    sync.Mutex
	keys  map[string]*rate.Limiter
}

func newKeyedLimiter(every rate.Limit, burst int) *keyedLimiter {
	return &keyedLimiter{every: every, burst: burst, keys: map[string]*rate.Limiter{}}
}

// allow takes one token of key's bucket, reporting whether there was one.
func (k *keyedLimiter) allow(key string) bool {
	k.mu.Lock()
	l := k.keys[key]
	if l == nil {
		l = rate.NewLimiter(k.every, k.burst)
		k.keys[key] = l
	}
	k.mu.Unlock()
	return l.Allow()
}
