package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry/traceoff"
)

// observer holds an agent's metrics, tracer and optional HTTP listener
// (/metrics, /healthz, /readyz on Config.MetricsAddr).
type observer struct {
	metrics agentMetrics
	tracer  trace.Tracer

	mu  sync.Mutex
	srv *http.Server
	url string
	// debugSrv serves pprof on DebugAddr.
	debugSrv *http.Server
	debugURL string
}

// agentMetrics are the series an agent serves at /metrics. There are two
// builds of them: Prometheus's client with the Go runtime and process
// collectors (metrics_prom.go, the default), and a small text exposition of
// the same grid_agent_* series for the slim grid-agent binary, which the
// grid_slim build tag selects (metrics_slim.go): the Prometheus client and
// the protobuf runtime it brings are a fifth of that binary.
type agentMetrics interface {
	// taskDone counts a finished task and observes its duration.
	taskDone(backend, action, status string, d time.Duration)
	// handler serves the metrics in the Prometheus text format.
	handler() http.Handler
}

// taskLabels are a finished task's backend, action and status: the labels
// of its series in both builds.
type taskLabels struct{ backend, action, status string }

// The agent's series, shared by both builds.
const (
	metricTasks         = "grid_agent_tasks_total"
	helpTasks           = "Tasks this agent finished, by backend, action and status (success or failed)."
	metricTaskDuration  = "grid_agent_task_duration_seconds"
	helpTaskDuration    = "Time a task ran on this agent (from its start, after waiting for a slot), by backend, action and status."
	metricTasksInFlight = "grid_agent_tasks_in_flight"
	helpTasksInFlight   = "Tasks holding a slot (running) on this agent."
	metricMaxConcurrent = "grid_agent_max_concurrent_tasks"
	helpMaxConcurrent   = "Tasks this agent runs at once at most (max_concurrent)."
	metricCommands      = "grid_agent_commands_total"
	helpCommands        = "Commands received, by what the agent did with them: accepted, ignored (excluded or not in the resolved target) or duplicate."
	metricNATSConnected = "grid_agent_nats_connected"
	helpNATSConnected   = "1 while the agent is connected to NATS."
	instrumentationName = "github.com/gridfleet/terraform-provider-grid" // telemetry.InstrumentationName
)

// outcomeCount is the commands the agent received with one outcome.
type outcomeCount struct {
	outcome string
	n       int64
}

// commandCounts are the commands by outcome, in the order they are served.
func (a *Agent) commandCounts() []outcomeCount {
	s := &a.stats
	return []outcomeCount{{"accepted", s.accepted.Load()}, {"ignored", s.ignored.Load()}, {"duplicate", s.duplicates.Load()}}
}

// natsConnected is 1 while the agent is registered and connected to NATS.
func (a *Agent) natsConnected() float64 {
	nc, _ := a.readiness()
	return boolFloat(nc != nil && nc.IsConnected())
}

func newObserver(a *Agent) *observer {
	tp := a.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &observer{metrics: newAgentMetrics(a), tracer: tp.Tracer(instrumentationName)}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricsURL is the base URL of the metrics and health listener, "" when
// MetricsAddr is not set or the agent has not started.
func (a *Agent) MetricsURL() string {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	return a.obs.url
}

// readiness returns the connection once the node is registered and not
// stopping, and whether it is.
func (a *Agent) readiness() (*nats.Conn, bool) {
	a.mu.Lock()
	registered := a.info.Status == api.NodeOnline && !a.info.OnlineSince.IsZero()
	stopping := a.stopping
	a.mu.Unlock()
	if !registered {
		return nil, false
	}
	// a.nc was set before the registration we just saw, under a.mu.
	return a.nc, !stopping
}

// startHTTP serves /metrics, /healthz and /readyz on MetricsAddr.
func (a *Agent) startHTTP() error {
	if a.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("agent %s: metrics listen on %s: %w", a.id, a.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.obs.metrics.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		nc, ok := a.readiness()
		checks := map[string]string{"registered": "yes", "nats": "connected", "status": "ready"}
		code := http.StatusOK
		if !ok {
			checks["registered"] = "no (starting or stopping)"
		}
		if nc == nil || !nc.IsConnected() {
			checks["nats"] = "not connected"
			ok = false
		}
		if !ok {
			checks["status"], code = "not ready", http.StatusServiceUnavailable
		}
		writeHealth(w, code, checks)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.obs.mu.Lock()
	a.obs.srv = srv
	a.obs.url = "http://" + ln.Addr().String()
	a.obs.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", "err", err)
		}
	}()
	a.log.Info("serving metrics and health", "url", a.obs.url+"/metrics")
	return nil
}

func (a *Agent) stopHTTP() {
	a.obs.mu.Lock()
	srvs := []*http.Server{a.obs.srv, a.obs.debugSrv}
	a.obs.srv, a.obs.debugSrv = nil, nil
	a.obs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range srvs {
		if srv != nil {
			_ = srv.Shutdown(ctx)
		}
	}
}

func writeHealth(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// commandLogger is log with a command's job, step and attempt, and the
// trace id its message carried (parent).
func commandLogger(parent context.Context, log *slog.Logger, cmd *api.Command) *slog.Logger {
	log = log.With("job", cmd.JobID, "step", cmd.TaskIndex, "attempt", cmd.Attempt)
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
		log = log.With("trace_id", sc.TraceID().String())
	}
	return log
}

// startTaskSpan starts the task's span, a child of the dispatch that sent
// the command; it covers waiting for a slot, the run and the result.
//
// With tracing off (no provider set up) no span is made: the noop tracer
// would still cost the span's name and attributes for every command. The
// task's results then carry the command's own trace context on.
func (a *Agent) startTaskSpan(t *task) {
	parent := t.parent
	if parent == nil {
		parent = context.Background()
	}
	if traceoff.TracingOff(a.cfg.TracerProvider) {
		if trace.SpanContextFromContext(parent).IsValid() {
			t.spanCtx = parent
		}
		return
	}
	t.spanCtx, t.span = a.obs.tracer.Start(parent, "task "+t.cmd.Task.Name(), trace.WithSpanKind(trace.SpanKindConsumer))
	// A span the sampler dropped records nothing: its attributes are not
	// built.
	if t.span.IsRecording() {
		t.span.SetAttributes(
			attribute.String("grid.job.id", t.cmd.JobID),
			attribute.Int("grid.step", t.cmd.TaskIndex),
			attribute.Int("grid.attempt", t.cmd.Attempt),
			attribute.String("grid.node", a.id),
			attribute.Bool("grid.check_mode", t.cmd.CheckMode))
	}
}

// startBackendSpan starts the span of the backend run inside the task's.
// Without a task span (tracing off) there is none.
func (a *Agent) startBackendSpan(ctx context.Context, t *task) (context.Context, trace.Span) {
	if t.span == nil {
		return ctx, nil
	}
	ctx = trace.ContextWithSpan(ctx, t.span)
	if !t.span.IsRecording() {
		// Not sampled: the backend's span would not be either, and the
		// task's context already carries the trace on.
		return ctx, nil
	}
	return a.obs.tracer.Start(ctx, "backend "+t.cmd.Task.Name(), trace.WithAttributes(
		attribute.String("grid.backend", t.cmd.Task.Backend),
		attribute.String("grid.action", t.cmd.Task.Action)))
}

// endSpan ends a span, marking it failed on err; nil is no span.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// observeTask records a task's final result in the metrics and its span.
func (a *Agent) observeTask(t *task, r *api.TaskResult) {
	status := r.Status
	a.obs.metrics.taskDone(t.cmd.Task.Backend, t.cmd.Task.Action, status, time.Duration(r.Duration))
	if t.span != nil {
		var err error
		if t.span.IsRecording() {
			t.span.SetAttributes(attribute.String("grid.task.status", status), attribute.Bool("grid.task.changed", r.Changed))
			if r.Status == api.StepFailed {
				err = errors.New(r.Error)
			}
		}
		endSpan(t.span, err)
	}
}

// traceCtx is the context whose span a task's results carry.
func (t *task) traceCtx() context.Context {
	if t.spanCtx != nil {
		return t.spanCtx
	}
	return context.Background()
}
