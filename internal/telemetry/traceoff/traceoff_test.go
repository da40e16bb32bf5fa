package traceoff

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestTracingOff(t *testing.T) {
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	cases := []struct {
		name string
		tp   trace.TracerProvider
		want bool
	}{
		{"global default", nil, true},
		{"noop", noop.NewTracerProvider(), true},
		{"sdk", sdk, false},
	}
	for _, c := range cases {
		if got := TracingOff(c.tp); got != c.want {
			t.Errorf("%s: TracingOff = %v, want %v", c.name, got, c.want)
		}
	}
	otel.SetTracerProvider(sdk)
	if TracingOff(nil) {
		t.Error("a global provider set up: TracingOff(nil) = true")
	}
}
