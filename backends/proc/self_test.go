package proc_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/proc"
)

// /proc/TID exists for every thread, and kill(2) on a thread id signals
// the whole process: the agent's threads are the agent, and must be
// refused as its pid is. Check mode, so nothing is sent either way.
func TestSignalRefusesTheAgentsThreads(t *testing.T) {
	// Threads busy elsewhere make sure the process has more than one.
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	tid := 0
	for _, e := range ents {
		if n, _ := strconv.Atoi(e.Name()); n != os.Getpid() {
			tid = n
			break
		}
	}
	if tid == 0 {
		t.Skip("the test process has one thread")
	}
	reg := backends.NewRegistry().MustRegister(proc.New(proc.Options{}))
	reg.SetAllowlist(mustAllow(t, "proc"))
	res, err := reg.Run(context.Background(), "proc", &backends.Request{Action: "signal", CheckMode: true,
		Params: api.Params{"pid": strconv.Itoa(tid), "signal": "KILL"}})
	if err == nil {
		t.Fatalf("signal to thread %d of the agent (pid %d) accepted: %s", tid, os.Getpid(), res.Output)
	}
	t.Log(err)
}

func mustAllow(t *testing.T, entries ...string) *backends.Allowlist {
	t.Helper()
	a, err := backends.ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
