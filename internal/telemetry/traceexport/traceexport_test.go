package traceexport

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

func TestSetupTracingFromEnv(t *testing.T) {
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	t.Setenv("OTEL_TRACES_EXPORTER", "")
	stop, err := SetupTracing(context.Background(), "grid-test", nil)
	if err != nil || otel.GetTracerProvider() != prev {
		t.Fatalf("unset exporter: err %v, provider changed %v", err, otel.GetTracerProvider() != prev)
	}
	_ = stop(context.Background())

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := SetupTracing(context.Background(), "grid-test", nil); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("unknown exporter: %v", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := SetupTracing(context.Background(), "grid-test", nil); err == nil {
		t.Fatal("unknown protocol accepted")
	}

	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	var out bytes.Buffer
	stop, err = SetupTracing(context.Background(), "grid-test", &out)
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer(nil).Start(context.Background(), "hello")
	span.End()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"hello"`) || !strings.Contains(out.String(), "grid-test") {
		t.Fatalf("console exporter wrote %q", out.String())
	}
}
