package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/ping"
	"github.com/gridfleet/terraform-provider-grid/backends/testbackend"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// harness is a real embedded NATS server with GRID's topology, plus a
// connection that records every result published on it.
type harness struct {
	t   testing.TB
	url string
	nc  *nats.Conn
	js  jetstream.JetStream

	mu      sync.Mutex
	results []api.TaskResult
}

func newHarness(t testing.TB) *harness {
	return newHarnessCollecting(t, true)
}

// newHarnessCollecting is newHarness; collect false records no results (a
// benchmark waits for its own).
func newHarnessCollecting(t testing.TB, collecting bool) *harness {
	t.Helper()
	ctl := startController(t, "127.0.0.1:0")
	nc, err := nats.Connect(ctl.NATSURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	h := &harness{t: t, url: ctl.NATSURL(), nc: nc, js: js}
	// Final results are stored by the controller in the results stream,
	// running and progress reports go to the progress subject.
	collect := func(m *nats.Msg) {
		var r api.TaskResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return
		}
		want := api.ResultSubject(r.JobID)
		if r.Status == api.ResultRunning || r.Status == api.ResultProgress {
			want = api.ProgressSubject(r.JobID, r.TaskIndex, r.NodeID)
		}
		if want != m.Subject {
			r.Error = fmt.Sprintf("HARNESS: result on %s, want %s", m.Subject, want)
		}
		h.mu.Lock()
		h.results = append(h.results, r)
		h.mu.Unlock()
	}
	for _, subj := range []string{api.SubjectResults, api.SubjectProgress} {
		if !collecting {
			break
		}
		if _, err := nc.Subscribe(subj, collect); err != nil {
			t.Fatalf("subscribe %s: %v", subj, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return h
}

// startController starts a real controller (insecure: the agent tests
// are about the agent, security_test.go in controller about the bus) with
// its embedded NATS server on natsAddr; it stops at the end of the test,
// after the test's agents (cleanups run last-registered first).
func startController(t testing.TB, natsAddr string) *controller.Controller {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATSAddr = natsAddr
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Insecure = true
	cfg.Logger = testLogger().With("test", t.Name(), "component", "controller")
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ctl.Start(ctx); err != nil {
		cancel()
		t.Fatalf("start controller: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-ctl.Done():
		case <-time.After(20 * time.Second):
			t.Errorf("controller did not stop within 20s")
		}
	})
	return ctl
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testRegistry holds ping, test and probe, independent of what the built-in
// set grows into.
func testRegistry(t testing.TB, p *probe) *backends.Registry {
	t.Helper()
	r := backends.NewRegistry()
	for _, b := range []backends.Backend{ping.New(), testbackend.New(), p} {
		if err := r.Register(b); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	return r
}

// startAgent starts an agent on the harness server and stops it gracefully
// at the end of the test. mutate adjusts the config before New.
func (h *harness) startAgent(name string, mutate func(*Config)) (*Agent, context.CancelFunc) {
	h.t.Helper()
	cfg := Config{
		Name:              name,
		NATSURLs:          []string{h.url},
		HeartbeatInterval: Duration(time.Second),
		ShutdownGrace:     Duration(2 * time.Second),
		Registry:          testRegistry(h.t, &probe{}),
		Logger:            testLogger().With("test", h.t.Name()),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	startCtx, startCancel := context.WithTimeout(ctx, 10*time.Second)
	defer startCancel()
	// Start's ctx is the agent's lifetime; bound only the wait for Start.
	errc := make(chan error, 1)
	go func() { errc <- a.Start(ctx) }()
	select {
	case err := <-errc:
		if err != nil {
			cancel()
			h.t.Fatalf("Start: %v", err)
		}
	case <-startCtx.Done():
		cancel()
		h.t.Fatalf("Start did not return within 10s")
	}
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-a.Done():
		case <-time.After(15 * time.Second):
			h.t.Errorf("agent %s did not stop within 15s", name)
		}
	})
	return a, cancel
}

func (h *harness) send(subject string, cmd api.Command) {
	h.t.Helper()
	h.jobExists(cmd.JobID)
	data, err := json.Marshal(cmd)
	if err != nil {
		h.t.Fatalf("encode command: %v", err)
	}
	if err := h.nc.Publish(subject, data); err != nil {
		h.t.Fatalf("publish %s: %v", subject, err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatalf("flush: %v", err)
	}
}

func (h *harness) cancelJob(job string) {
	h.t.Helper()
	if err := h.nc.Publish(api.CancelSubject(job), nil); err != nil {
		h.t.Fatalf("publish cancel: %v", err)
	}
	if err := h.nc.Flush(); err != nil {
		h.t.Fatalf("flush: %v", err)
	}
}

// resultsOf returns the results of a job seen so far, optionally only those
// with the given status.
func (h *harness) resultsOf(job, status string) []api.TaskResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []api.TaskResult
	for _, r := range h.results {
		if r.JobID == job && (status == "" || r.Status == status) {
			out = append(out, r)
		}
	}
	return out
}

// final waits for the terminal result of a job on node.
func (h *harness) final(job, node string, within time.Duration) api.TaskResult {
	h.t.Helper()
	var got api.TaskResult
	eventually(h.t, within, fmt.Sprintf("final result of %s on %s", job, node), func() bool {
		for _, r := range h.resultsOf(job, "") {
			if r.NodeID == node && (r.Status == api.StepSuccess || r.Status == api.StepFailed) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, within, 10*time.Millisecond, what, cond)
}

func (h *harness) nodeInfo(id string) api.NodeInfo {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		h.t.Fatalf("nodes bucket: %v", err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		h.t.Fatalf("get node %s: %v", id, err)
	}
	var n api.NodeInfo
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		h.t.Fatalf("decode node %s: %v", id, err)
	}
	return n
}

func command(job, backend, action string, params api.Params) api.Command {
	return api.Command{
		JobID:      job,
		TaskIndex:  0,
		Attempt:    1,
		Task:       api.Task{Backend: backend, Action: action, Params: params},
		ResolvedAt: time.Now().UTC(),
	}
}

func echo(job string) api.Command {
	return command(job, "ping", "echo", api.Params{"message": "hello " + job})
}

// probe is a small real backend for what ping and test cannot show: counted
// runs, progress reports, an action without check mode, and a panic.
type probe struct {
	runs atomic.Int64
	// release ends the runs of "stuck", which ignore their context.
	release chan struct{}
}

func (*probe) Schema() api.BackendSchema {
	return api.BackendSchema{
		Name: "probe",
		Actions: []api.ActionSchema{
			{Name: "count", ReadOnly: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "hold", Type: api.TypeDuration, Default: "0s"}}},
			{Name: "progress", ReadOnly: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "for", Type: api.TypeDuration, Default: "600ms"}}},
			{Name: "write"},
			{Name: "panic", ReadOnly: true},
			{Name: "stuck", ReadOnly: true},
		},
	}
}

func (p *probe) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "count":
		n := p.runs.Add(1)
		d, _ := time.ParseDuration(req.Params["hold"])
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return &backends.Result{Output: fmt.Sprintf("run %d", n), Facts: map[string]any{"run": n}}, nil
	case "progress":
		d, _ := time.ParseDuration(req.Params["for"])
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			req.Progress(i, fmt.Sprintf("step %d", i))
			time.Sleep(5 * time.Millisecond)
		}
		return &backends.Result{Output: "done", Facts: map[string]any{"check_mode": req.CheckMode}}, nil
	case "write":
		return &backends.Result{Output: "wrote", Changed: true}, nil
	case "panic":
		panic("probe panics on purpose")
	case "stuck":
		<-p.release
		return &backends.Result{Output: "released"}, nil
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

func contains(s, sub string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(sub)) }

// jobExists stores a pending job under id unless one is there: the
// controller stores the results only of jobs that exist (and have not
// ended), and the harness sends commands of its own making. Pending, it is
// left alone by the controller's scheduler, which only claims a job
// through its request.
func (h *harness) jobExists(id string) {
	h.t.Helper()
	storeJob(h.t, h.js, id)
}

// storeJob is jobExists on any JetStream.
func storeJob(t testing.TB, js jetstream.JetStream, id string) {
	t.Helper()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatalf("jobs bucket: %v", err)
	}
	now := time.Now().UTC()
	b, _ := json.Marshal(api.Job{ID: id, Target: api.Target{Scope: api.ScopeAll}, Status: api.JobPending, Expected: []string{},
		CreatedAt: now, UpdatedAt: now})
	if _, err := kv.Create(ctx, id, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("store job %s: %v", id, err)
	}
}
