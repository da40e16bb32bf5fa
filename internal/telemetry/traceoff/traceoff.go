// Package traceoff tells whether spans go anywhere, so hot paths can skip
// building them. It is apart from package telemetry, which brings the
// Prometheus client, so that the slim grid-agent binary can use it.
package traceoff

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// defaultProvider is the global tracer provider before anything set one:
// it makes no spans that go anywhere.
var defaultProvider = otel.GetTracerProvider()

// TracingOff reports whether spans from tp (the global provider when nil)
// go nowhere: the process set no provider, or tp is the no-op one. Hot
// paths skip building spans and their attributes then.
func TracingOff(tp trace.TracerProvider) bool {
	if tp == nil {
		return otel.GetTracerProvider() == defaultProvider
	}
	_, isNoop := tp.(noop.TracerProvider)
	return isNoop
}
