package bus

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceRoundTripThroughHeaders(t *testing.T) {
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := ContextWithTraceParent(context.Background(), tp)
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	msg := &nats.Msg{Subject: "cmd.all.ping.echo"}
	InjectTrace(ctx, msg)
	if got := msg.Header["traceparent"]; len(got) != 1 || got[0] != tp {
		t.Fatalf("header = %v, want traceparent %s", msg.Header, tp)
	}
	sc := trace.SpanContextFromContext(ExtractTrace(context.Background(), msg))
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.SpanID().String() != "b7ad6b7169203331" || !sc.IsRemote() {
		t.Fatalf("extracted %+v", sc)
	}
}

func TestTraceAbsent(t *testing.T) {
	msg := &nats.Msg{Subject: "x"}
	InjectTrace(context.Background(), msg)
	if len(msg.Header) != 0 {
		t.Fatalf("no span, yet headers %v", msg.Header)
	}
	if sc := trace.SpanContextFromContext(ExtractTrace(context.Background(), msg)); sc.IsValid() {
		t.Fatalf("extracted %v from nothing", sc)
	}
	if TraceParent(context.Background()) != "" || TraceParent(ContextWithTraceParent(context.Background(), "garbage")) != "" {
		t.Fatal("traceparent from nothing")
	}
}
