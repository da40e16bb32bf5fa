package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// scrape fetches url's /metrics (sending tok when set: a controller's API
// wants one, an agent's metrics listener does not), fails the test on any
// promlint problem and returns the exposition.
func scrape(t *testing.T, hc *http.Client, base, tok string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s\n%s", base, resp.Status, body)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("lint %s: %v", base, err)
	}
	for _, p := range problems {
		t.Errorf("promlint %s: %s: %s", base, p.Metric, p.Text)
	}
	return string(body)
}

// metric finds a gathered sample by name and labels (a subset).
func metric(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := metric(t, g, name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestMetricsAfterJobs(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Agent: func(_ int, c *agent.Config) {
		c.MetricsAddr = "127.0.0.1:0"
	}})
	ok := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}, {backend: ping, action: echo}]")
	if ok.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", ok.ID, ok.Status)
	}
	bad := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: fail, max_retries: 1}]")
	if bad.Status != api.JobFailed {
		t.Fatalf("job %s: %s", bad.ID, bad.Status)
	}

	text := scrape(t, f.HTTPClient(), f.APIURL(), f.AdminToken())
	for _, name := range []string{"grid_jobs_submitted_total", "grid_jobs_running", "grid_jobs_pending", "grid_nodes",
		"grid_nats_connections", "grid_jetstream_stream_messages", "grid_jetstream_consumer_pending_messages",
		"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(text, "\n"+name) {
			t.Errorf("exposition lacks %s", name)
		}
	}
	g := f.Controller.Registry()
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"grid_jobs_submitted_total", nil, 2},
		{"grid_jobs_finished_total", map[string]string{"status": "completed"}, 1},
		{"grid_jobs_finished_total", map[string]string{"status": "failed"}, 1},
		{"grid_job_duration_seconds", map[string]string{"status": "completed"}, 1},
		{"grid_job_duration_seconds", map[string]string{"status": "failed"}, 1},
		{"grid_jobs_running", nil, 0},
		{"grid_jobs_pending", nil, 0},
		{"grid_admission_rejections_total", nil, 0},
		// Two echo steps and one failing step, one sample each.
		{"grid_step_duration_seconds", map[string]string{"backend": "ping", "action": "echo", "status": "success"}, 2},
		{"grid_step_duration_seconds", map[string]string{"backend": "test", "action": "fail", "status": "failed"}, 1},
		// 2 nodes × 2 echo steps; 2 nodes × 2 attempts of the failing one.
		{"grid_task_results_total", map[string]string{"backend": "ping", "action": "echo", "status": "success"}, 4},
		{"grid_task_results_total", map[string]string{"backend": "test", "action": "fail", "status": "failed"}, 4},
		{"grid_task_retries_total", map[string]string{"backend": "test", "action": "fail"}, 2},
		// Every attempt on every node answered once: 4 + 4.
		{"grid_dispatch_first_result_seconds", nil, 8},
		{"grid_nodes", map[string]string{"status": "online"}, 2},
		{"grid_nodes", map[string]string{"status": "offline"}, 0},
		{"grid_nats_up", nil, 1},
		{"grid_jetstream_consumer_pending_messages", map[string]string{"stream": "requests", "consumer": "scheduler"}, 0},
	}
	for _, w := range want {
		if got := value(t, g, w.name, w.labels); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	if got := value(t, g, "grid_node_heartbeats_total", nil); got < 2 {
		t.Errorf("grid_node_heartbeats_total = %v, want at least the 2 registrations", got)
	}
	if got := value(t, g, "grid_nats_connections", nil); got < 3 {
		t.Errorf("grid_nats_connections = %v, want the controller's and both agents'", got)
	}
	if got := value(t, g, "grid_jetstream_stream_messages", map[string]string{"stream": api.StreamResults}); got < 8 {
		t.Errorf("results stream holds %v messages, want at least 8 final results", got)
	}

	// Each agent: its own registry, its tasks by status, and the health
	// endpoints on its metrics listener.
	var agentTotal float64
	for _, name := range []string{"node-1", "node-2"} {
		a := f.Agent(name)
		base := a.MetricsURL()
		if base == "" {
			t.Fatalf("%s has no metrics URL", name)
		}
		scrape(t, nil, base, "")
		ag := a.Registry()
		if got := value(t, ag, "grid_agent_tasks_total", map[string]string{"backend": "ping", "action": "echo", "status": "success"}); got != 2 {
			t.Errorf("%s echo successes = %v, want 2", name, got)
		}
		if got := value(t, ag, "grid_agent_tasks_total", map[string]string{"backend": "test", "action": "fail", "status": "failed"}); got != 2 {
			t.Errorf("%s failures = %v, want 2", name, got)
		}
		agentTotal += value(t, ag, "grid_agent_task_duration_seconds", map[string]string{"backend": "ping"})
		if got := value(t, ag, "grid_agent_tasks_in_flight", nil); got != 0 {
			t.Errorf("%s in flight = %v, want 0", name, got)
		}
		if got := value(t, ag, "grid_agent_commands_total", map[string]string{"outcome": "accepted"}); got != 4 {
			t.Errorf("%s accepted commands = %v, want 4", name, got)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %s", name, path, resp.Status)
			}
		}
	}
	if agentTotal != 4 {
		t.Errorf("agents' ping duration samples = %v, want 4", agentTotal)
	}
}

func getStatus(t *testing.T, hc *http.Client, url string) int {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestReadyzFollowsNATS(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	if code := getStatus(t, f.HTTPClient(), f.APIURL()+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz after start: %d, want 200", code)
	}
	f.Controller.NATSServer().Shutdown()
	waitFor(t, 5*time.Second, "readyz to report not ready", func() bool {
		return getStatus(t, f.HTTPClient(), f.APIURL()+"/readyz") == http.StatusServiceUnavailable
	})
	if code := getStatus(t, f.HTTPClient(), f.APIURL()+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz without NATS: %d, want 200 (the process is alive)", code)
	}
	if v := value(t, f.Controller.Registry(), "grid_nats_up", nil); v != 0 {
		t.Fatalf("grid_nats_up = %v after the server stopped", v)
	}
}

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(s.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func TestOneTraceFromAPIToBackend(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	// Debug level: an agent logs a task that succeeded only there.
	logs := &syncBuffer{}
	f := fleettest.Start(t, fleet.Options{
		Agents:     1,
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Controller: func(c *controller.Config) { c.TracerProvider = tp },
		Agent:      func(_ int, c *agent.Config) { c.TracerProvider = tp },
	})
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo, params: {message: hi}}]")
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s", j.Status)
	}
	if j.TraceID == "" || j.TraceParent == "" {
		t.Fatalf("job has no trace: trace_id %q, trace_parent %q", j.TraceID, j.TraceParent)
	}

	// The agent ends its spans after publishing the result, so they may
	// land a moment after the job is done.
	find := func(name string) tracetest.SpanStub {
		t.Helper()
		var found []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name && s.SpanContext.TraceID().String() == j.TraceID {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			var names []string
			for _, s := range exp.GetSpans() {
				names = append(names, fmt.Sprintf("%s(%s)", s.Name, s.SpanContext.TraceID()))
			}
			t.Fatalf("want one span %q in trace %s, found %d among %v", name, j.TraceID, len(found), names)
		}
		return found[0]
	}
	waitFor(t, 5*time.Second, "the agent's spans", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "task ping.echo" && s.SpanContext.TraceID().String() == j.TraceID {
				n++
			}
		}
		return n == 1
	})

	apiSpan := find("POST /job")
	jobSpan := find("job")
	stepSpan := find("step ping.echo")
	dispatch := find("dispatch ping.echo")
	task := find("task ping.echo")
	backend := find("backend ping.echo")
	if apiSpan.Parent.IsValid() {
		t.Errorf("API span has a parent %s; the client sent no traceparent", apiSpan.Parent.SpanID())
	}
	for _, link := range []struct {
		child, parent tracetest.SpanStub
	}{{jobSpan, apiSpan}, {stepSpan, jobSpan}, {dispatch, stepSpan}, {task, dispatch}, {backend, task}} {
		if got, want := link.child.Parent.SpanID(), link.parent.SpanContext.SpanID(); got != want {
			t.Errorf("span %q: parent %s, want %q (%s)", link.child.Name, got, link.parent.Name, want)
		}
	}
	if got := jobSpan.EndTime.Sub(jobSpan.StartTime); got <= 0 || stepSpan.StartTime.Before(jobSpan.StartTime) {
		t.Errorf("job span %s does not enclose the step", got)
	}

	// The job's log lines carry its trace id; the agent's carry job, step
	// and node as well.
	var ctlLine, agentLine bool
	for _, l := range logs.lines() {
		if l["job"] != j.ID {
			continue
		}
		switch l["msg"] {
		case "job finished":
			ctlLine = l["trace_id"] == j.TraceID
		case "task finished":
			agentLine = l["trace_id"] == j.TraceID && l["node"] == "node-1" && l["step"] == float64(0)
		}
	}
	if !ctlLine || !agentLine {
		t.Errorf("log lines without the job's trace id (controller %v, agent %v)", ctlLine, agentLine)
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
