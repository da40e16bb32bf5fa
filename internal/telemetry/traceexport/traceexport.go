// Package traceexport sets up OpenTelemetry trace export for a command
// from the standard OTEL_* environment variables. It holds the exporters
// (OTLP over gRPC and HTTP, console), so only the grid binary imports it;
// the slim grid-agent binary exports no traces.
package traceexport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SetupTracing installs a global tracer provider chosen by the standard
// environment variables and returns the function that flushes and stops it:
//
//	OTEL_TRACES_EXPORTER          none (default) | otlp | console
//	OTEL_EXPORTER_OTLP_PROTOCOL   grpc | http/protobuf (default)
//	                              (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins)
//	OTEL_EXPORTER_OTLP_ENDPOINT   and the other OTEL_EXPORTER_OTLP_* settings,
//	                              read by the exporters themselves
//	OTEL_SERVICE_NAME             overrides service (grid-controller, …)
//
// With no exporter the global provider stays the no-op one, so tracing costs
// nothing. The W3C trace-context propagator is installed either way.
func SetupTracing(ctx context.Context, service string, stderr io.Writer) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	noop := func(context.Context) error { return nil }
	var exp sdktrace.SpanExporter
	switch name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); name {
	case "", "none":
		return noop, nil
	case "otlp":
		proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch strings.ToLower(strings.TrimSpace(proto)) {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			return noop, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
		}
	case "console":
		if stderr == nil {
			stderr = os.Stderr
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stderr))
	default:
		return noop, fmt.Errorf("OTEL_TRACES_EXPORTER %q: want none, otlp or console", name)
	}
	if err != nil {
		return noop, fmt.Errorf("trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// StartTracing is SetupTracing for a command: the returned stop flushes the
// spans still buffered (bounded to 5s) and logs what could not be sent.
func StartTracing(ctx context.Context, service string, stderr io.Writer, log *slog.Logger) (stop func(), err error) {
	shutdown, err := SetupTracing(ctx, service, stderr)
	if err != nil {
		return func() {}, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil && log != nil {
			log.Warn("flushing traces", "err", err)
		}
	}, nil
}
