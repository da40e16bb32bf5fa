package agent

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRecentBoundsAndExpiry(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	r := newRecent[string, struct{}](3, time.Minute)
	for i, k := range []string{"a", "b", "c", "d"} {
		r.add(k, struct{}{}, t0.Add(time.Duration(i)*time.Second))
	}
	if r.has("a", t0.Add(5*time.Second)) || !r.has("b", t0.Add(5*time.Second)) || r.Len() != 3 {
		t.Errorf("count bound: a kept %v, b kept %v, len %d; want the 3 newest", r.has("a", t0), r.has("b", t0), r.Len())
	}
	// b was added at t0+1s: gone a minute later; d (t0+3s) not yet.
	at := t0.Add(61 * time.Second)
	if r.has("b", at) || !r.has("d", at) || r.Len() != 2 {
		t.Errorf("expiry: b %v d %v len %d", r.has("b", at), r.has("d", at), r.Len())
	}
	// Without any lookup, sweep alone expires what is due.
	r.sweep(t0.Add(2 * time.Minute))
	if r.Len() != 0 {
		t.Errorf("after sweep: %d keys left", r.Len())
	}
}

func TestFinalCacheBytesAndExpiry(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	c := newFinalCache(100, 1000, time.Hour)
	res := func(n int) finalResult { return finalResult{subject: "s", data: []byte(strings.Repeat("x", n-1))} }
	key := func(i int) taskKey { return taskKey{job: "job", step: i} }
	for i := range 5 {
		c.add(key(i), res(300), t0)
	}
	// 5×300 bytes over a 1000-byte bound: the two oldest go.
	for i := range 5 {
		if _, ok := c.get(key(i), t0); ok != (i >= 2) {
			t.Errorf("result %d kept: %v", i, ok)
		}
	}
	// One result over the bound alone is still kept: the newest always is.
	c.add(key(9), res(5000), t0)
	if f, ok := c.get(key(9), t0); !ok || len(f.data) != 4999 || c.Len() != 1 {
		t.Errorf("big result kept %v (%d bytes), %d results", ok, len(f.data), c.Len())
	}
	// Replacing a value recounts its bytes.
	c.add(key(9), res(10), t0)
	c.add(key(10), res(500), t0)
	if c.Len() != 2 || c.bytes != 510 {
		t.Errorf("%d results, %d bytes; want 2, 510", c.Len(), c.bytes)
	}
	// Results expire with the dedupe key they answer for.
	c.sweep(t0.Add(time.Hour))
	if c.Len() != 0 || c.bytes != 0 {
		t.Errorf("after an hour: %d results, %d bytes", c.Len(), c.bytes)
	}
}

// A busy hour fills the dedupe set; once its keys expire, the heartbeat's
// sweep gives the memory back rather than keeping the map at its largest.
func TestRecentSweepReleasesMemory(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	t0 := time.Now()
	base := heap()
	r := newRecent[taskKey, struct{}](seenMax, seenTTL)
	for i := range seenMax {
		r.add(taskKey{job: fmt.Sprintf("job-%016d", i), step: i % 7, attempt: 1}, struct{}{}, t0)
	}
	full := heap()
	r.sweep(t0.Add(seenTTL))
	drained := heap()
	t.Logf("heap: %d KiB empty, %d KiB with %d keys, %d KiB after they expired", base>>10, full>>10, seenMax, drained>>10)
	if r.Len() != 0 {
		t.Fatalf("%d keys left", r.Len())
	}
	// The job ids themselves are garbage either way; the map's memory
	// (several MiB at 100,000 keys) must go too.
	if grown, kept := full-base, drained-base; grown < 4<<20 || kept > grown/8 {
		t.Errorf("%d bytes still held of %d", kept, grown)
	}
	r.add(taskKey{job: "after"}, struct{}{}, t0.Add(seenTTL))
	if !r.has(taskKey{job: "after"}, t0.Add(seenTTL)) {
		t.Error("set unusable after shrinking")
	}
	runtime.KeepAlive(r)
}

// Under steady load keys come and go for ever: a new one each command, the
// oldest expiring. The dedupe set and the recorded results then hold one
// window's worth (seenTTL × rate), in no more memory than that window took
// when it first filled up, however many windows pass. (A Go map whose keys
// churn keeps some of the slots they left and grows past that, about 1.4×
// here, unless the sweep moves it to a fresh map now and then.)
func TestDedupeWindowBoundedUnderChurn(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	const window, windows = 2000, 250
	t0 := time.Now()
	step := seenTTL / window
	seen := newRecent[taskKey, struct{}](seenMax, seenTTL)
	finals := newFinalCache(finalsMax, finalsMaxBytes, seenTTL)
	result := []byte(strings.Repeat("r", 300)) // a small task's result
	base := heap()
	var first, most int64
	for i := range window * windows {
		now := t0.Add(time.Duration(i) * step)
		k := taskKey{job: fmt.Sprintf("job-%016d", i), step: i % 3, attempt: 1}
		seen.add(k, struct{}{}, now)
		finals.add(k, finalResult{subject: "report." + k.job + ".0.node", data: slices.Clone(result)}, now)
		if i%window != window-1 {
			continue
		}
		// The heartbeat's sweep; then the window's figures.
		seen.sweep(now)
		finals.sweep(now)
		if seen.Len() != window || finals.Len() != window {
			t.Fatalf("after %d commands: %d keys and %d results held, want the window's %d", i+1, seen.Len(), finals.Len(), window)
		}
		held := heap() - base
		if first == 0 {
			first = held
		}
		most = max(most, held)
		if held > first*6/5 {
			t.Fatalf("after %d windows the window holds %d KiB, over 1.2× the %d KiB it took when it first filled up", (i+1)/window, held>>10, first>>10)
		}
	}
	t.Logf("a window of %d commands: %d KiB when it first filled up, at most %d KiB, %d KiB after %d windows", window, first>>10, most>>10, (heap()-base)>>10, windows)
	runtime.KeepAlive(seen)
	runtime.KeepAlive(finals)
}
