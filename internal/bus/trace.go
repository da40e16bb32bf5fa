package bus

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// traceContext carries the W3C traceparent (and tracestate) of a span in
// NATS message headers. It is fixed rather than the global propagator so a
// controller and its agents agree whatever the process set up.
var traceContext = propagation.TraceContext{}

// InjectTrace writes the span context of ctx into msg's headers. A context
// without a valid span writes nothing.
func InjectTrace(ctx context.Context, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	traceContext.Inject(ctx, headerCarrier(msg.Header))
}

// ExtractTrace returns ctx carrying the remote span context found in msg's
// headers, or ctx unchanged when there is none.
func ExtractTrace(ctx context.Context, msg *nats.Msg) context.Context {
	if msg == nil || msg.Header == nil {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier(msg.Header))
}

// headerCarrier keeps the header names as the propagator writes them
// (lower-case "traceparent"): NATS header names are case-sensitive, unlike
// HTTP's, and other NATS clients look for the W3C spelling.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// TraceParent returns the W3C traceparent of the span in ctx, "" when ctx
// holds no valid span context.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c.Get("traceparent")
}

// ContextWithTraceParent returns ctx carrying the remote span context of a
// W3C traceparent, or ctx unchanged when tp is empty or malformed.
func ContextWithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}
