package agent

import (
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// A task that ends within runningAfter sends only its final result, which
// says when the backend started; a longer one reports running once, first.
func TestRunningReportOnlyForTasksThatTakeAWhile(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("rr", nil)
	before := time.Now()
	h.send(api.NodeCommandSubject("rr", "ping", "echo"), echo("rr-fast"))
	f := h.final("rr-fast", "rr", 5*time.Second)
	if f.Status != api.StepSuccess || f.StartedAt == nil || f.StartedAt.Before(before) || f.StartedAt.After(f.Timestamp) {
		t.Fatalf("fast final %+v, want success with started_at between the send and the end", f)
	}
	h.send(api.NodeCommandSubject("rr", "ping", "sleep"), command("rr-slow", "ping", "sleep", api.Params{"duration": "300ms"}))
	s := h.final("rr-slow", "rr", 5*time.Second)
	if s.Status != api.StepSuccess || s.StartedAt == nil {
		t.Fatalf("slow final %+v", s)
	}
	run := h.resultsOf("rr-slow", api.ResultRunning)
	if len(run) != 1 || !run[0].Timestamp.Equal(*s.StartedAt) {
		t.Fatalf("slow task: running reports %+v, want one stamped with the start %s", run, s.StartedAt)
	}
	// Reports of the fast task would have come long before the slow one's.
	if got := h.resultsOf("rr-fast", api.ResultRunning); len(got) != 0 {
		t.Fatalf("fast task sent %d running reports, want none", len(got))
	}
}
