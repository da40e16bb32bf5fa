package controller

import (
	"context"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// testGroup builds a step group over a bare run: enough for the
// transitions that only touch the job's results.
func testGroup(t *testing.T, yaml string, nodes []string, barrier bool, results api.JobResults) *stepGroup {
	t.Helper()
	spec, err := api.ParseJobSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	job := spec.Job()
	job.Results = results
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	r := &run{job: job, enc: newJobEncoder(), ctx: ctx, cancel: cancel, flushKick: make(chan struct{}, 1), steps: api.Flatten(job.Tasks)}
	g := r.newStepGroup(r.steps, nodes, false, barrier)
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
	if got := g.failed(); len(got) != 0 {
		t.Fatalf("failed %v, want none", got)
	}
}
