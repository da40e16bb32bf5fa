package controller

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// One trace follows a job end to end: the API request that submitted it,
// the job's run on the owning controller (a child of the request, through
// the traceparent stored on the job), one span per step, one per command
// published (its traceparent travels in the NATS headers), and on the agents
// the task and the backend run.

// untraced are the endpoints that scrapers and probes poll.
var untraced = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// traceHTTP wraps the API in a server span per request, continuing a trace
// the caller sent in a traceparent header.
func (c *Controller) traceHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if untraced[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := c.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r = r.WithContext(ctx)
		h.ServeHTTP(sw, r)
		if r.Pattern != "" && r.Pattern != "/" {
			span.SetName(r.Pattern)
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// stampTrace records the trace of the submitting request on the job, so the
// scheduler (on any controller) continues it.
func stampTrace(ctx context.Context, j *api.Job) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		j.TraceID = sc.TraceID().String()
		j.TraceParent = bus.TraceParent(ctx)
	}
}

// jobLogger is the logger of everything about one job.
func jobLogger(log *slog.Logger, j *api.Job) *slog.Logger {
	if j.TraceID != "" {
		return log.With("job", j.ID, "trace_id", j.TraceID)
	}
	return log.With("job", j.ID)
}

// startJobSpan starts the span of a run of the job, a child of the
// submitting request's span.
func (c *Controller) startJobSpan(j *api.Job) (context.Context, trace.Span) {
	parent := bus.ContextWithTraceParent(context.Background(), j.TraceParent)
	return c.tracer.Start(parent, "job", trace.WithAttributes(
		attribute.String("grid.job.id", j.ID),
		attribute.String("grid.job.target", j.Target.String()),
		attribute.String("grid.job.strategy", string(j.Strategy)),
		attribute.Int("grid.job.nodes", len(j.Expected)),
		attribute.String("grid.controller", c.id)))
}

// endJobSpan ends a run's span with the job's outcome.
func endJobSpan(span trace.Span, status api.JobStatus, errMsg string) {
	span.SetAttributes(attribute.String("grid.job.status", string(status)))
	if status != api.JobCompleted && errMsg != "" {
		span.SetStatus(codes.Error, errMsg)
	}
	span.End()
}

// stepTrace follows one runSteps call: a span (and a duration sample) per
// step, from the step's first dispatch until every node is past it, so a
// pipeline's steps overlap as the nodes advance at their own pace.
type stepTrace struct {
	r      *run
	steps  []api.FlatStep
	remain []int // nodes not yet past step i
	ctxs   []context.Context
	spans  []trace.Span
	start  []time.Time
	failed []bool
}

func (r *run) newStepTrace(steps []api.FlatStep, nodes int) *stepTrace {
	st := &stepTrace{r: r, steps: steps, remain: make([]int, len(steps)), ctxs: make([]context.Context, len(steps)),
		spans: make([]trace.Span, len(steps)), start: make([]time.Time, len(steps)), failed: make([]bool, len(steps))}
	for i := range st.remain {
		st.remain[i] = nodes
	}
	r.trace = st
	return st
}

// local is the position of a flat step in this group.
func (st *stepTrace) local(s api.FlatStep) int {
	i := s.Index - st.steps[0].Index
	if i < 0 || i >= len(st.steps) {
		return -1
	}
	return i
}

// ctx is the context to dispatch step s in; the first dispatch starts the
// step's span.
func (st *stepTrace) ctx(s api.FlatStep) context.Context {
	i := st.local(s)
	if i < 0 {
		return st.r.ctx
	}
	if st.spans[i] == nil {
		st.start[i] = time.Now()
		st.ctxs[i], st.spans[i] = st.r.c.tracer.Start(st.r.ctx, "step "+s.Task.Name(), trace.WithAttributes(
			attribute.String("grid.job.id", st.r.job.ID),
			attribute.Int("grid.step", s.Index),
			attribute.String("grid.step.path", s.Path),
			attribute.String("grid.backend", s.Task.Backend),
			attribute.String("grid.action", s.Task.Action),
			attribute.Int("grid.step.nodes", st.remain[i])))
	}
	return st.ctxs[i]
}

// move advances a node's cursor to, ending the spans of steps it was the
// last node before.
func (st *stepTrace) move(n *nodeRun, to int) {
	for i := n.cursor; i < to && i < len(st.steps); i++ {
		st.remain[i]--
		if st.remain[i] == 0 {
			st.end(i, true)
		}
	}
	n.cursor = to
}

// fail marks the node's current step as failed somewhere.
func (st *stepTrace) fail(n *nodeRun) {
	if n.cursor < len(st.steps) {
		st.failed[n.cursor] = true
	}
}

// end ends step i's span; observe records its duration, for a step that
// ran to the end on every node.
func (st *stepTrace) end(i int, observe bool) {
	span := st.spans[i]
	if span == nil {
		return
	}
	st.spans[i] = nil
	status := "success"
	if st.failed[i] {
		status = "failed"
		span.SetStatus(codes.Error, "failed on some nodes")
	}
	if observe {
		task := st.steps[i].Task
		st.r.c.metrics.stepDuration.WithLabelValues(task.Backend, task.Action, status).Observe(time.Since(st.start[i]).Seconds())
	}
	span.End()
}

// close ends the spans still open (the job was cancelled or timed out) and
// detaches the tracker from the run.
func (st *stepTrace) close() {
	cause := context.Cause(st.r.ctx)
	for i, span := range st.spans {
		if span != nil {
			if cause != nil {
				span.SetStatus(codes.Error, cause.Error())
			}
			st.end(i, cause == nil)
		}
	}
	st.r.trace = nil
}

// stepCtx is the context to dispatch step s in.
func (r *run) stepCtx(s api.FlatStep) context.Context {
	if r.trace != nil {
		return r.trace.ctx(s)
	}
	return r.ctx
}

// heard records the first result of a node's current attempt.
func (r *run) heard(n *nodeRun) {
	if n.heard {
		return
	}
	n.heard = true
	r.c.metrics.firstResult.Observe(time.Since(n.sentAt).Seconds())
}
