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
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

// observer holds an agent's metrics, tracer and optional HTTP listener
// (/metrics, /healthz, /readyz on Config.MetricsAddr).
type observer struct {
	reg          *prometheus.Registry
	tracer       trace.Tracer
	tasks        *prometheus.CounterVec
	taskDuration *prometheus.HistogramVec

	mu  sync.Mutex
	srv *http.Server
	url string
}

var (
	agentCommandsDesc = prometheus.NewDesc("grid_agent_commands_total",
		"Commands received, by what the agent did with them: accepted, ignored (excluded or not in the resolved target) or duplicate.",
		[]string{"outcome"}, nil)
	agentConnectedDesc = prometheus.NewDesc("grid_agent_nats_connected",
		"1 while the agent is connected to NATS.", nil, nil)
)

func newObserver(a *Agent) *observer {
	o := &observer{
		reg:    telemetry.NewRegistry(),
		tracer: telemetry.Tracer(a.cfg.TracerProvider),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_agent_tasks_total",
			Help: "Tasks this agent finished, by backend, action and status (success or failed).",
		}, []string{"backend", "action", "status"}),
		taskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grid_agent_task_duration_seconds",
			Help:    "Time a task ran on this agent (from its start, after waiting for a slot), by backend, action and status.",
			Buckets: telemetry.TaskBuckets,
		}, []string{"backend", "action", "status"}),
	}
	o.reg.MustRegister(o.tasks, o.taskDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_agent_tasks_in_flight",
			Help: "Tasks holding a slot (running) on this agent.",
		}, func() float64 { return float64(len(a.slots)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_agent_max_concurrent_tasks",
			Help: "Tasks this agent runs at once at most (max_concurrent).",
		}, func() float64 { return float64(cap(a.slots)) }),
		&agentCollector{a: a},
	)
	return o
}

// agentCollector reads the agent's counters and connection at scrape time.
type agentCollector struct{ a *Agent }

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentCommandsDesc
	ch <- agentConnectedDesc
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	s := &c.a.stats
	ch <- prometheus.MustNewConstMetric(agentCommandsDesc, prometheus.CounterValue, float64(s.accepted.Load()), "accepted")
	ch <- prometheus.MustNewConstMetric(agentCommandsDesc, prometheus.CounterValue, float64(s.ignored.Load()), "ignored")
	ch <- prometheus.MustNewConstMetric(agentCommandsDesc, prometheus.CounterValue, float64(s.duplicates.Load()), "duplicate")
	nc, _ := c.a.readiness()
	ch <- prometheus.MustNewConstMetric(agentConnectedDesc, prometheus.GaugeValue, boolFloat(nc != nil && nc.IsConnected()))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry is the agent's private Prometheus registry, served at /metrics
// on MetricsAddr.
func (a *Agent) Registry() *prometheus.Registry { return a.obs.reg }

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
	mux.Handle("GET /metrics", telemetry.Handler(a.obs.reg))
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
	srv := a.obs.srv
	a.obs.srv = nil
	a.obs.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

func writeHealth(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// traceCommand returns the trace context a command carried and the task's
// logger with its trace id.
func traceCommand(msg *nats.Msg, log *slog.Logger) (context.Context, *slog.Logger) {
	ctx := bus.ExtractTrace(context.Background(), msg)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		log = log.With("trace_id", sc.TraceID().String())
	}
	return ctx, log
}

// startTaskSpan starts the task's span, a child of the dispatch that sent
// the command; it covers waiting for a slot, the run and the result.
func (a *Agent) startTaskSpan(t *task) {
	parent := t.parent
	if parent == nil {
		parent = context.Background()
	}
	t.spanCtx, t.span = a.obs.tracer.Start(parent, "task "+t.cmd.Task.Name(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("grid.job.id", t.cmd.JobID),
			attribute.Int("grid.step", t.cmd.TaskIndex),
			attribute.Int("grid.attempt", t.cmd.Attempt),
			attribute.String("grid.node", a.id),
			attribute.Bool("grid.check_mode", t.cmd.CheckMode)))
}

// startBackendSpan starts the span of the backend run inside the task's.
func (a *Agent) startBackendSpan(ctx context.Context, t *task) (context.Context, trace.Span) {
	if t.span != nil {
		ctx = trace.ContextWithSpan(ctx, t.span)
	}
	return a.obs.tracer.Start(ctx, "backend "+t.cmd.Task.Name(), trace.WithAttributes(
		attribute.String("grid.backend", t.cmd.Task.Backend),
		attribute.String("grid.action", t.cmd.Task.Action)))
}

// endSpan ends a span, marking it failed on err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// observeTask records a task's final result in the metrics and its span.
func (a *Agent) observeTask(t *task, r *api.TaskResult) {
	status := r.Status
	a.obs.tasks.WithLabelValues(t.cmd.Task.Backend, t.cmd.Task.Action, status).Inc()
	a.obs.taskDuration.WithLabelValues(t.cmd.Task.Backend, t.cmd.Task.Action, status).Observe(time.Duration(r.Duration).Seconds())
	if t.span != nil {
		t.span.SetAttributes(attribute.String("grid.task.status", status), attribute.Bool("grid.task.changed", r.Changed))
		var err error
		if r.Status == api.StepFailed {
			err = errors.New(r.Error)
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
