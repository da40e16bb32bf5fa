package controller

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// testGroup builds a step group over a bare run: enough for the
// transitions that only touch the job's results.
func testGroup(t *testing.T, yaml string, nodes []string, barrier bool, results api.JobResults) *stepGroup {
	t.Helper()
	return testRollout(t, yaml, nodes, barrier, results, api.Rollout{})
}

func testRollout(t *testing.T, yaml string, nodes []string, barrier bool, results api.JobResults, ro api.Rollout) *stepGroup {
	t.Helper()
	spec, err := api.ParseJobSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	job := spec.Job()
	job.Results = results
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	r := &run{job: job, enc: newJobEncoder(), ctx: ctx, cancel: cancel, flushKick: make(chan struct{}, 1), steps: api.Flatten(job.Tasks),
		log: slog.New(slog.DiscardHandler)}
	g := r.newStepGroup(r.steps, nodes, false, barrier, ro, "tasks[0]")
	g.tk = r.newStepTrace(g.steps, len(nodes))
	return g
}

func TestStepGroupAdvance(t *testing.T) {
	const pipeline = `
target: {scope: all}
tasks:
  - tasks:
      - {backend: ping, action: echo}
      - {backend: ping, action: echo, condition: on_success}
      - {backend: ping, action: echo, condition: on_failure}
`
	tests := []struct {
		name    string
		results api.JobResults
		// wantCursor is where the node stops; 3 means past the pipeline.
		wantCursor int
		wantMore   bool
		wantFailed bool
		// wantSkipped are the steps recorded as skipped.
		wantSkipped []int
	}{
		{name: "fresh node starts at the first step", wantCursor: 0, wantMore: true},
		{
			name:       "resumed node skips steps with a final result",
			results:    api.JobResults{0: {"n1": {Status: api.StepSuccess}}},
			wantCursor: 1, wantMore: true,
		},
		{
			name:       "failed node runs only on_failure steps",
			results:    api.JobResults{0: {"n1": {Status: api.StepFailed}}},
			wantCursor: 2, wantMore: true, wantFailed: true, wantSkipped: []int{1},
		},
		{
			name:       "successful node skips on_failure and finishes",
			results:    api.JobResults{0: {"n1": {Status: api.StepSuccess}}, 1: {"n1": {Status: api.StepSuccess}}},
			wantCursor: 3, wantSkipped: []int{2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := testGroup(t, pipeline, []string{"n1"}, false, tt.results)
			n := g.nr["n1"]
			if more := g.advance(n); more != tt.wantMore {
				t.Fatalf("advance = %v, want %v", more, tt.wantMore)
			}
			if n.cursor != tt.wantCursor || n.failed != tt.wantFailed {
				t.Fatalf("cursor %d failed %v, want %d %v", n.cursor, n.failed, tt.wantCursor, tt.wantFailed)
			}
			for _, s := range tt.wantSkipped {
				if r := g.r.job.Results.Node(s, "n1"); r == nil || r.Status != api.StepSkipped {
					t.Fatalf("step %d: %+v, want skipped", s, r)
				}
			}
		})
	}
}

func TestStepGroupFinishCountsDown(t *testing.T) {
	g := testGroup(t, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]", []string{"a", "b"}, true, nil)
	g.finish(g.nr["a"])
	if g.remaining != 1 || g.nr["a"].cursor != 1 {
		t.Fatalf("remaining %d cursor %d, want 1 and 1", g.remaining, g.nr["a"].cursor)
	}
	if got := g.outcome().failed; len(got) != 0 {
		t.Fatalf("failed %v, want none", got)
	}
}

func TestStepGroupErrorBudget(t *testing.T) {
	one := &api.Limit{Value: 1}
	g := testRollout(t, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]", []string{"a", "b", "c", "d"}, true, nil,
		api.Rollout{MaxConcurrency: one, MaxErrors: one})
	if g.slots != 1 || g.budget != 1 || !g.hasBudget {
		t.Fatalf("slots %d budget %d/%v, want 1 and 1", g.slots, g.budget, g.hasBudget)
	}
	g.queue = []*nodeRun{g.nr["c"], g.nr["d"]}
	g.countError(g.nr["a"])
	if g.stopped {
		t.Fatal("stopped at the first error of a budget of 1")
	}
	g.countError(g.nr["a"]) // the same node again (a pipeline's later step)
	if g.stopped || g.errors != 1 {
		t.Fatalf("a node counted twice: errors %d stopped %v", g.errors, g.stopped)
	}
	g.countError(g.nr["b"])
	if !g.stopped {
		t.Fatal("not stopped once errors passed the budget")
	}
	g.stopQueue()
	out := g.outcome()
	if !out.exceeded || len(out.notStarted) != 2 || len(out.failed) != 2 {
		t.Fatalf("outcome %+v, want exceeded with 2 failed and 2 not started", out)
	}
	for _, id := range []string{"c", "d"} {
		res := g.r.job.Results.Node(0, id)
		if res == nil || res.Status != api.StepNotStarted || !strings.Contains(res.Output, "max_errors 1") {
			t.Fatalf("%s: %+v, want not_started naming max_errors", id, res)
		}
	}
}
