package controller_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// rolloutFleet starts n agents (node-1 … node-n) where a file write into
// the returned directory succeeds on every node but the bad ones: the
// good agents share that directory as their sandbox, the bad ones have
// their own, so the same write is refused there (outside the sandbox).
func rolloutFleet(t *testing.T, n int, bad ...string) (*fleet.Fleet, string) {
	t.Helper()
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	f := fleettest.Start(t, fleet.Options{Agents: n, Agent: func(i int, c *agent.Config) {
		if !slices.Contains(bad, fmt.Sprintf("node-%d", i+1)) {
			c.Sandbox = shared
		}
	}, Controller: func(c *controller.Config) {
		// The deployed default's share: with fleettest's 2s the controller
		// never re-sends a command a node has not answered (its first
		// re-send comes 2s after the dispatch), so a command or result
		// lost under a loaded machine would hold the step until the task
		// timeout instead of being asked for again.
		c.ResultGrace = config.Duration(10 * time.Second)
	}})
	return f, shared
}

func statuses(j *api.Job, step int) map[string]string {
	out := map[string]string{}
	for _, n := range j.Expected {
		out[n] = nodeStatus(j, step, n)
	}
	return out
}

// The boundaries of max_errors on a barrier step rolled out one node at a
// time (node-1 first): 0, 1, exactly at the threshold, one over, and
// percentages that round down.
func TestRolloutMaxErrorsBoundaries(t *testing.T) {
	const ok, failed, notStarted = api.StepSuccess, api.StepFailed, api.StepNotStarted
	oneBad, oneBadDir := rolloutFleet(t, 6, "node-2")
	twoBad, twoBadDir := rolloutFleet(t, 6, "node-2", "node-4")
	tests := []struct {
		name       string
		f          *fleet.Fleet
		dir        string
		limits     string
		wantStatus api.JobStatus
		want       []string // node-1 … node-6
		wantSum    api.JobSummary
	}{
		{name: "max_errors 0, no failure", f: oneBad, dir: "", limits: "max_concurrency: 1\nmax_errors: 0",
			wantStatus: api.JobCompleted, want: []string{ok, ok, ok, ok, ok, ok},
			wantSum: api.JobSummary{Targeted: 6, Reached: 6, Succeeded: 6}},
		{name: "max_errors 0, first failure stops", f: oneBad, dir: oneBadDir, limits: "max_concurrency: 1\nmax_errors: 0",
			wantStatus: api.JobFailed, want: []string{ok, failed, notStarted, notStarted, notStarted, notStarted},
			wantSum: api.JobSummary{Targeted: 6, Reached: 2, Succeeded: 1, Failed: 1, NotStarted: 4}},
		{name: "max_errors 1, exactly at the threshold", f: oneBad, dir: oneBadDir, limits: "max_concurrency: 1\nmax_errors: 1",
			wantStatus: api.JobPartialFailure, want: []string{ok, failed, ok, ok, ok, ok},
			wantSum: api.JobSummary{Targeted: 6, Reached: 6, Succeeded: 5, Failed: 1}},
		{name: "max_errors 1, one over", f: twoBad, dir: twoBadDir, limits: "max_concurrency: 1\nmax_errors: 1",
			wantStatus: api.JobFailed, want: []string{ok, failed, ok, failed, notStarted, notStarted},
			wantSum: api.JobSummary{Targeted: 6, Reached: 4, Succeeded: 2, Failed: 2, NotStarted: 2}},
		{name: "max_errors 2, two failures", f: twoBad, dir: twoBadDir, limits: "max_concurrency: 1\nmax_errors: 2",
			wantStatus: api.JobPartialFailure, want: []string{ok, failed, ok, failed, ok, ok},
			wantSum: api.JobSummary{Targeted: 6, Reached: 6, Succeeded: 4, Failed: 2}},
		// 20% of 6 nodes is 1.2, rounded down to 1: the second failure
		// passes it.
		{name: "max_errors 20% rounds down", f: twoBad, dir: twoBadDir, limits: "max_concurrency: 1\nmax_errors: 20%",
			wantStatus: api.JobFailed, want: []string{ok, failed, ok, failed, notStarted, notStarted},
			wantSum: api.JobSummary{Targeted: 6, Reached: 4, Succeeded: 2, Failed: 2, NotStarted: 2}},
		// 10% of 6 is 0.6, rounded down to 0 errors; as a concurrency it
		// still lets one node run.
		{name: "10% rounds to 0 errors and 1 slot", f: oneBad, dir: oneBadDir, limits: "max_concurrency: 10%\nmax_errors: 10%",
			wantStatus: api.JobFailed, want: []string{ok, failed, notStarted, notStarted, notStarted, notStarted},
			wantSum: api.JobSummary{Targeted: 6, Reached: 2, Succeeded: 1, Failed: 1, NotStarted: 4}},
		// A pipeline's limits, at the threshold and one over.
		{name: "pipeline at the threshold", f: oneBad, dir: oneBadDir, limits: "\npipeline: {max_concurrency: 1, max_errors: 1}",
			wantStatus: api.JobPartialFailure, want: []string{ok, failed, ok, ok, ok, ok},
			wantSum: api.JobSummary{Targeted: 6, Reached: 6, Succeeded: 5, Failed: 1}},
		{name: "pipeline one over", f: twoBad, dir: twoBadDir, limits: "\npipeline: {max_concurrency: 1, max_errors: 1}",
			wantStatus: api.JobFailed, want: []string{ok, failed, ok, failed, notStarted, notStarted},
			wantSum: api.JobSummary{Targeted: 6, Reached: 4, Succeeded: 2, Failed: 2, NotStarted: 2}},
		// The step's own limits override the job's.
		{name: "per step overrides the job", f: twoBad, dir: twoBadDir, limits: "max_concurrency: 6\nmax_errors: 0\nstep: {max_concurrency: 1, max_errors: 2}",
			wantStatus: api.JobPartialFailure, want: []string{ok, failed, ok, failed, ok, ok},
			wantSum: api.JobSummary{Targeted: 6, Reached: 6, Succeeded: 4, Failed: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobLimits, stepLimits, _ := strings.Cut(tt.limits, "\nstep: ")
			jobLimits, pipeLimits, _ := strings.Cut(jobLimits, "\npipeline: ")
			task := "{backend: ping, action: echo}"
			if tt.dir != "" {
				task = fmt.Sprintf("{backend: file, action: write, params: {path: %q, content: \"v2\\n\"}}", filepath.Join(tt.dir, "app.conf"))
			}
			if stepLimits != "" {
				task = strings.TrimSuffix(task, "}") + ", " + strings.Trim(stepLimits, "{}") + "}"
			}
			if pipeLimits != "" {
				// A one-step pipeline: each node advances on its own.
				task = "{" + strings.Trim(pipeLimits, "{}") + ", tasks: [" + task + "]}"
			}
			j := submitWait(t, tt.f, fmt.Sprintf("target: {scope: all}\n%s\ntasks:\n  - %s\n", jobLimits, task))
			got := statuses(j, 0)
			for i, want := range tt.want {
				if n := fmt.Sprintf("node-%d", i+1); got[n] != want {
					t.Fatalf("%s: %s, want %s; all: %v", n, got[n], want, got)
				}
			}
			if j.Status != tt.wantStatus {
				t.Fatalf("job %s (%s), want %s", j.Status, j.Error, tt.wantStatus)
			}
			if j.Summary == nil || *j.Summary != tt.wantSum {
				t.Fatalf("summary %+v, want %+v", j.Summary, tt.wantSum)
			}
			for n, st := range got {
				if st == notStarted {
					if r := j.Results.Node(0, n); !strings.Contains(r.Output, "not started: max_errors") {
						t.Fatalf("%s not started without the reason: %+v", n, r)
					}
				}
			}
			if tt.wantStatus == api.JobFailed && !strings.Contains(j.Error, "max_errors") {
				t.Fatalf("job error %q does not name max_errors", j.Error)
			}
		})
	}
}

// At most max_concurrency nodes run a barrier step at once: 40% of 5
// nodes is 2 slots.
func TestRolloutMaxConcurrencyBarrier(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 5})
	j := submitWait(t, f, `
target: {scope: all}
max_concurrency: 40%
tasks:
  - {backend: ping, action: sleep, params: {duration: 200ms}}
`)
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s (%s)", j.Status, j.Error)
	}
	if peak := peakInFlight(t, j, 0); peak != 2 {
		t.Fatalf("at most %d nodes ran at once, want exactly 2", peak)
	}
}

// peakInFlight is the most nodes that were between dispatch and final
// result of step at the same moment.
func peakInFlight(t *testing.T, j *api.Job, step int) int {
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, n := range j.Expected {
		r := j.Results.Node(step, n)
		if r == nil || len(r.Events) < 2 {
			t.Fatalf("%s: no timeline: %+v", n, r)
		}
		edges = append(edges, edge{r.Events[0].Time, 1}, edge{r.Events[len(r.Events)-1].Time, -1})
	}
	// An end and a start at the same instant: the slot was freed first.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

// A pipeline rolls out per node: a node holds its slot through every step
// of the pipeline. When node-1 fails its first step with max_errors 0, the
// nodes in flight (node-2, node-3) finish the whole pipeline and the rest
// never start.
func TestRolloutPipelineInFlightFinish(t *testing.T) {
	f, dir := rolloutFleet(t, 5, "node-1")
	j := submitWait(t, f, fmt.Sprintf(`
target: {scope: all}
tasks:
  - max_concurrency: 3
    max_errors: 0
    tasks:
      - {backend: file, action: write, params: {path: %q, content: "v2
"}}
      - {backend: ping, action: sleep, params: {duration: 500ms}}
  - {backend: ping, action: echo}
  - condition: on_failure
    tasks:
      - {backend: ping, action: echo, params: {message: rollback}}
`, filepath.Join(dir, "app.conf")))
	if j.Status != api.JobFailed || !strings.Contains(j.Error, "max_errors 0 exceeded at tasks[0]") {
		t.Fatalf("job %s (%s), want failed by max_errors at tasks[0]", j.Status, j.Error)
	}
	want := map[string][4]string{
		"node-1": {api.StepFailed, api.StepSkipped, api.StepSkipped, api.StepSuccess},
		"node-2": {api.StepSuccess, api.StepSuccess, api.StepSkipped, api.StepSuccess},
		"node-3": {api.StepSuccess, api.StepSuccess, api.StepSkipped, api.StepSuccess},
		"node-4": {api.StepNotStarted, api.StepNotStarted, "<none>", "<none>"},
		"node-5": {api.StepNotStarted, api.StepNotStarted, "<none>", "<none>"},
	}
	for n, w := range want {
		for step, st := range w {
			if got := nodeStatus(j, step, n); got != st {
				t.Fatalf("%s step %d: %s, want %s", n, step, got, st)
			}
		}
	}
	sum := api.JobSummary{Targeted: 5, Reached: 3, Succeeded: 2, Failed: 1, NotStarted: 2}
	if *j.Summary != sum {
		t.Fatalf("summary %+v, want %+v", *j.Summary, sum)
	}
}

// A node that goes away mid-step is unreachable, not failed, and counts
// toward max_errors; the nodes in flight when the threshold is crossed
// finish and are reported, the one waiting for a slot never starts.
func TestRolloutUnreachableInFlight(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 4})
	j := submit(t, f, `
target: {scope: all}
max_concurrency: 3
max_errors: 0
tasks:
  - {backend: ping, action: sleep, params: {duration: 6s}}
`)
	waitFor(t, 10*time.Second, "node-3 running", func() bool {
		g, err := f.Client().GetJob(context.Background(), j.ID)
		return err == nil && nodeStatus(g, 0, "node-3") == api.StepRunning
	})
	if err := f.KillAgent("node-3"); err != nil {
		t.Fatal(err)
	}
	done := wait(t, f, j.ID)
	want := map[string]string{"node-1": api.StepSuccess, "node-2": api.StepSuccess, "node-3": api.StepUnreachable, "node-4": api.StepNotStarted}
	if got := statuses(done, 0); !maps.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if done.Status != api.JobFailed {
		t.Fatalf("job %s (%s), want failed", done.Status, done.Error)
	}
	sum := api.JobSummary{Targeted: 4, Reached: 2, Succeeded: 2, Unreachable: 1, NotStarted: 1}
	if *done.Summary != sum {
		t.Fatalf("summary %+v, want %+v", *done.Summary, sum)
	}
	if m := getRaw(t, f, "/metrics"); !strings.Contains(m, `grid_task_results_total{action="sleep",backend="ping",status="unreachable"} 1`) {
		t.Fatalf("metrics lack the unreachable result:\n%s", grepLines(m, "grid_task_results_total"))
	}
}

// A submission is checked against the nodes its target resolves to: node-1
// allows only ping.echo (its allowlist), node-2 everything. A job that
// needs ping.sleep on node-1 is refused with a 400 naming node-1, though
// node-2 offers the action; the same job on node-2 alone is accepted.
func TestSubmitValidatedAgainstTargetedNodes(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Groups: func(i int) []string { return []string{fmt.Sprintf("g%d", i+1)} },
		Agent: func(i int, c *agent.Config) {
			if i == 0 {
				c.Allow = []string{"ping.echo"}
			}
		}})
	ctx := context.Background()
	for _, tc := range []struct {
		target  string
		wantErr string // "" accepted
	}{
		{target: "{scope: node, value: node-1}", wantErr: "tasks[1]: 1 targeted node(s) cannot run ping.sleep: node-1"},
		{target: "{scope: all}", wantErr: "tasks[1]: 1 targeted node(s) cannot run ping.sleep: node-1"},
		{target: "{scope: group, value: g1}", wantErr: "node-1"},
		{target: "{scope: node, value: node-2}"},
		{target: "{scope: group, value: g2}"},
	} {
		spec, err := api.ParseJobSpec([]byte("target: " + tc.target + "\ntasks:\n  - {backend: ping, action: echo}\n  - {backend: ping, action: sleep, params: {duration: 1ms}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		j, err := f.Client().SubmitJob(ctx, spec)
		if tc.wantErr == "" {
			if err != nil {
				t.Fatalf("%s: %v, want accepted", tc.target, err)
			}
			if done := wait(t, f, j.ID); done.Status != api.JobCompleted {
				t.Fatalf("%s: %s %s", tc.target, done.Status, done.Error)
			}
			continue
		}
		if !api.IsStatus(err, 400) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Fatalf("%s: %v, want a 400 with %q", tc.target, err, tc.wantErr)
		}
	}
}

// Jobs written for the seed's API: the POST /job answer holds the resolved
// nodes in expected; ping hostname, test succeed (with a message) and test
// fail with a message run.
func TestSeedCompatibility(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	j := submit(t, f, `
target: {scope: all}
strategy: continue
tasks:
  - {backend: ping, action: hostname}
  - {backend: test, action: succeed}
  - {backend: test, action: succeed, params: {message: all good}}
  - {backend: test, action: fail, params: {message: broke on purpose}}
`)
	if want := []string{"node-1", "node-2"}; !slices.Equal(j.Expected, want) {
		t.Fatalf("answer's expected %v, want %v", j.Expected, want)
	}
	done := wait(t, f, j.ID)
	host, _ := os.Hostname()
	for _, n := range []string{"node-1", "node-2"} {
		if r := done.Results.Node(0, n); r.Status != api.StepSuccess || r.Output != host || r.Facts["hostname"] != host {
			t.Fatalf("ping hostname on %s: %+v", n, r)
		}
		if r := done.Results.Node(1, n); r.Status != api.StepSuccess || r.Output == "" {
			t.Fatalf("test succeed on %s: %+v", n, r)
		}
		if r := done.Results.Node(2, n); r.Status != api.StepSuccess || r.Output != "all good" {
			t.Fatalf("test succeed with a message on %s: %+v", n, r)
		}
		if r := done.Results.Node(3, n); r.Status != api.StepFailed || r.Error != "broke on purpose" {
			t.Fatalf("test fail with a message on %s: %+v", n, r)
		}
	}
}

// A node of the group that is offline when the target is resolved is
// reported unreachable, not dropped; a node target that is offline fails
// the job as unreachable.
func TestOfflineNodeOfTargetIsUnreachable(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 3, Groups: func(int) []string { return []string{"web"} }})
	if err := f.StopAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node-2 offline", func() bool {
		n, err := f.Client().GetNode(context.Background(), "node-2")
		return err == nil && n.Status == api.NodeOffline
	})
	j := submitWait(t, f, "target: {scope: group, value: web}\ntasks: [{backend: ping, action: echo}]")
	if j.Status != api.JobPartialFailure || !slices.Equal(j.Unreachable, []string{"node-2"}) {
		t.Fatalf("job %s unreachable %v (%s), want partial_failure with node-2 unreachable", j.Status, j.Unreachable, j.Error)
	}
	if sum := (api.JobSummary{Targeted: 3, Reached: 2, Succeeded: 2, Unreachable: 1}); *j.Summary != sum {
		t.Fatalf("summary %+v, want %+v", *j.Summary, sum)
	}
	j = submitWait(t, f, "target: {scope: node, value: node-2}\ntasks: [{backend: ping, action: echo}]")
	if j.Status != api.JobFailed || !strings.Contains(j.Error, "unreachable") || j.Summary.Unreachable != 1 {
		t.Fatalf("job on the offline node: %s %q %+v", j.Status, j.Error, j.Summary)
	}
	// Scope all means the online nodes: the offline one is not targeted.
	if j = submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]"); j.Status != api.JobCompleted {
		t.Fatalf("job on all: %s %s", j.Status, j.Error)
	}
	if m := getRaw(t, f, "/metrics"); !strings.Contains(m, `grid_job_nodes_total{outcome="unreachable"} 2`) {
		t.Fatalf("metrics lack the 2 unreachable nodes:\n%s", grepLines(m, "grid_job_nodes_total"))
	}
}

// getRaw is this file's one raw HTTP request to the controller API.
func getRaw(t *testing.T, f *fleet.Fleet, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, f.APIURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	resp, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
