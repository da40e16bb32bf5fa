// Package testwait is the one polling helper of GRID's tests: wait for a
// condition that another goroutine (a controller, an agent, a server) makes
// true, failing the test with what was awaited when it does not come.
//
// It has no dependencies of GRID's, so the tests of every package, internal
// ones included, can use it.
package testwait

import (
	"testing"
	"time"
)

// Until polls cond every interval until it holds, and fails t after within
// naming what it waited for. The deadline is a hang guard, not a speed
// bound: pick one far above what the condition normally takes.
func Until(t testing.TB, within, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(every)
	}
}
