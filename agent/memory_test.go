package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Everything an agent keeps per command is in its dedupe set, its recorded
// results and its cancelled jobs, and all of it is gone one dedupe window
// (seenTTL) after the commands: an agent under steady load holds at most
// a window's worth, however long it runs.
func TestPerCommandStateExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("mem", nil)
	const n = 40
	for i := range n {
		cmd := echo(fmt.Sprintf("mem-job-%d", i))
		cmd.TaskIndex = i % 3
		h.send(api.NodeCommandSubject("mem", "ping", "echo"), cmd)
	}
	h.cancelJob("mem-stopped")
	for i := range n {
		h.final(fmt.Sprintf("mem-job-%d", i), "mem", 5*time.Second)
	}
	type state struct{ running, seen, finals, cancelled int }
	held := func() state {
		a.mu.Lock()
		defer a.mu.Unlock()
		return state{len(a.running), a.seen.Len(), a.finals.Len(), a.cancelled.Len()}
	}
	eventually(t, 5*time.Second, "the finished tasks to leave the running set", func() bool { return held().running == 0 })
	if got, want := held(), (state{0, n, n, 1}); got != want {
		t.Errorf("after %d commands and a cancel the agent holds %+v, want %+v", n, got, want)
	}
	// The heartbeat's sweep, a window later.
	a.sweep(time.Now().Add(seenTTL))
	if got := held(); got != (state{}) {
		t.Errorf("a dedupe window after the commands the agent still holds %+v, want nothing", got)
	}
}
