package agent

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// With tracing off the agent makes no spans, yet its result still carries
// the trace context the command came with, so the controller's trace goes
// on.
func TestResultCarriesCommandTraceWithTracingOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("trace1", nil)
	sub, err := h.nc.SubscribeSync(api.ResultSubject("jtrace"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	data, err := json.Marshal(echo("jtrace"))
	if err != nil {
		t.Fatal(err)
	}
	h.jobExists("jtrace")
	msg := &nats.Msg{Subject: api.NodeCommandSubject("trace1", "ping", "echo"), Data: data, Header: nats.Header{}}
	msg.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if err := h.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no final result: %v", err)
	}
	var r api.TaskResult
	if err := json.Unmarshal(got.Data, &r); err != nil || r.Status != api.StepSuccess {
		t.Fatalf("result %+v (%v), want success", r, err)
	}
	if tp := got.Header.Get("traceparent"); !strings.Contains(tp, traceID) {
		t.Errorf("result traceparent %q, want trace %s", tp, traceID)
	}
}

func TestDebugAddrServesProfiler(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("debug1", func(c *Config) { c.DebugAddr = "127.0.0.1:0" })
	if a.DebugURL() == "" {
		t.Fatal("no debug URL with debug_addr set")
	}
	resp, err := http.Get(a.DebugURL() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /debug/pprof/: %s", resp.Status)
	}
	b, _ := h.startAgent("debug2", nil)
	if b.DebugURL() != "" {
		t.Errorf("debug URL %q without debug_addr", b.DebugURL())
	}
}

// Not parallel: it sets the process's GOMAXPROCS.
func TestApplyProcessSettings(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	cases := []struct {
		name string
		env  string
		cfg  int
		want int
	}{
		{"default", "", 0, DefaultGOMAXPROCS},
		{"configured", "", 3, 3},
		{"environment wins", "5", 3, prev},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.env)
			runtime.GOMAXPROCS(prev)
			if got := ApplyProcessSettings(Config{GOMAXPROCS: c.cfg}); got != c.want || runtime.GOMAXPROCS(0) != c.want {
				t.Errorf("ApplyProcessSettings = %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), c.want)
			}
		})
	}
}
