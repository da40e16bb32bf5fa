// Package telemetry holds what the controller and the agent share for
// observability: GRID's tracer and the Prometheus plumbing (a private
// registry per instance and its HTTP handler). Setting up trace export from
// the OTEL_* environment is package traceexport, apart so that the slim
// grid-agent binary holds no exporter.
package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the tracer GRID's spans come from.
const InstrumentationName = "github.com/gridfleet/terraform-provider-grid"

// Tracer returns GRID's tracer from tp, or from the global provider when tp
// is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(InstrumentationName)
}
