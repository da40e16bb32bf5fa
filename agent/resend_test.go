package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// logRecorder is a slog handler that keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count counts the messages that start with prefix.
func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// A result sent again for a repeated command retries while the results
// stream cannot store it; shutting the agent down stops that retry, and Done
// closes only after it has returned.
func TestShutdownStopsResendRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rec := &logRecorder{}
	a, stop := h.startAgent("resend", func(c *Config) { c.Logger = slog.New(rec) })
	cmd := echo("resend-job")
	h.send(api.NodeCommandSubject("resend", "ping", "echo"), cmd)
	h.final("resend-job", "resend", 5*time.Second)

	// Without the results stream no publish is acknowledged (each try times
	// out), so the resend keeps retrying.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.js.DeleteStream(ctx, api.StreamResults); err != nil {
		t.Fatalf("delete results stream: %v", err)
	}
	h.send(api.NodeCommandSubject("resend", "ping", "echo"), cmd)
	eventually(t, 20*time.Second, "the resend to retry", func() bool {
		return rec.count("publishing final result failed") >= 1
	})

	stop()
	select {
	case <-a.Done():
	case <-time.After(20 * time.Second): // a hang guard; publishFor is 30s
		t.Fatal("agent did not stop")
	}
	if rec.count("final result lost") != 1 {
		t.Fatalf("the resend was still retrying after Done closed")
	}
}
