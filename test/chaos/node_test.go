package chaos

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// oneController starts a single (unclustered) controller and n agents.
func oneController(t *testing.T, dir string, spec func(*ctlSpec), agents ...string) (*ctlSpec, *proc, *api.Client, map[string]*proc) {
	t.Helper()
	s := newCtlSpecs(t, dir, 1, 1)[0]
	if spec != nil {
		spec(s)
	}
	c := startController(t, dir, s)
	waitReady(t, s, 60*time.Second)
	cl := client(t, s)
	procs := map[string]*proc{}
	for _, name := range agents {
		procs[name] = startAgent(t, dir, name, []string{"web"}, []string{s.natsURL()}, "1s")
	}
	waitNodes(t, cl, 30*time.Second, agents...)
	return s, c, cl, procs
}

func waitStep(t *testing.T, cl *api.Client, id string, step int, nodes []string, status string) {
	t.Helper()
	waitFor(t, 20*time.Second, "step to be "+status, func() bool {
		j, err := cl.GetJob(context.Background(), id)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if r := nodeResult(j, step, n); r == nil || r.Status != status {
				return false
			}
		}
		return true
	})
}

func waitJob(t *testing.T, cl *api.Client, id string, d time.Duration) *api.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	j, err := cl.WaitJob(ctx, id)
	if err != nil {
		t.Fatalf("job %s not finished within %s: %v", id, d, err)
	}
	return j
}

// An agent killed with SIGKILL mid-task: its node fails the step as
// unreachable once its heartbeat is older than node_offline_after, long
// before the task's timeout; under continue the other nodes finish the job.
func TestAgentKilledMidTask(t *testing.T) {
	needChaos(t)
	dir := t.TempDir()
	nodes := []string{"node-1", "node-2", "node-3"}
	_, _, cl, agents := oneController(t, dir, func(s *ctlSpec) { s.nodeOffline = "4s" }, nodes...)
	j, err := cl.SubmitJob(context.Background(), &api.JobSpec{
		Target: api.Target{Scope: api.ScopeAll}, Strategy: api.StrategyContinue,
		Tasks: []api.Phase{
			{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "5s"}, Timeout: "30s"},
			{Backend: "ping", Action: "echo", Params: api.Params{"message": "after"}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, j.ID, 0, nodes, api.StepRunning)
	agents["node-2"].kill9()
	killed := time.Now()
	done := waitJob(t, cl, j.ID, 40*time.Second)
	r := nodeResult(done, 0, "node-2")
	var failedAt time.Time
	for _, e := range r.Events {
		if e.Status == api.StepUnreachable {
			failedAt = e.Time
		}
	}
	t.Logf("job %s %s; node-2: %s %q %s after the kill; job done %s after the kill",
		done.ID, done.Status, r.Status, r.Error, failedAt.Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	if r.Status != api.StepUnreachable || !strings.Contains(r.Error, "went offline") {
		t.Fatalf("node-2 step 0: %s %q, want unreachable", r.Status, r.Error)
	}
	// Heartbeat 1s, offline after 4s: well within the task's 30s timeout.
	if d := failedAt.Sub(killed); d > 10*time.Second {
		t.Errorf("unreachable reported %s after the kill", d)
	}
	if done.Status != api.JobPartialFailure {
		t.Errorf("job %s, want partial_failure: %s", done.Status, describeFailures(done))
	}
	for _, n := range []string{"node-1", "node-3"} {
		for step := range 2 {
			if r := nodeResult(done, step, n); r == nil || r.Status != api.StepSuccess {
				t.Errorf("step %d on %s: %+v", step, n, r)
			}
		}
	}
	if r := nodeResult(done, 1, "node-2"); r != nil && r.Status != api.StepSkipped {
		t.Errorf("step 1 ran on the dead node: %+v", r)
	}
}

// SIGTERM drains an agent: it takes no new command, lets its running task
// finish and reports it, and deregisters (offline), so the job completes.
func TestAgentDrainsOnSIGTERM(t *testing.T) {
	needChaos(t)
	dir := t.TempDir()
	_, _, cl, agents := oneController(t, dir, nil, "node-1")
	j, err := cl.SubmitJob(context.Background(), &api.JobSpec{
		Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks:  []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, j.ID, 0, []string{"node-1"}, api.StepRunning)
	agents["node-1"].signal(syscall.SIGTERM)
	done := waitJob(t, cl, j.ID, 20*time.Second)
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", done.Status, describeFailures(done))
	}
	if !agents["node-1"].wait(20 * time.Second) {
		t.Fatal("agent still running 20s after SIGTERM")
	}
	if code := agents["node-1"].exitCode(); code != 0 {
		t.Errorf("agent exited %d after SIGTERM", code)
	}
	n, err := cl.GetNode(context.Background(), "node-1")
	if err != nil || n.Status != api.NodeOffline {
		t.Fatalf("node after drain: %+v %v", n, err)
	}
}

// A lone controller killed with SIGKILL and restarted on the same data dir
// and ports resumes its running job; no step runs twice on a node.
func TestControllerRestartMidJob(t *testing.T) {
	needChaos(t)
	dir := t.TempDir()
	nodes := []string{"node-1", "node-2"}
	spec, ctl, cl, agents := oneController(t, dir, nil, nodes...)
	var tasks []api.Phase
	for range 6 {
		tasks = append(tasks, api.Phase{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "600ms"}})
	}
	j, err := cl.SubmitJob(context.Background(), &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, j.ID, 2, nodes, api.StepRunning)
	ctl.kill9()
	down := time.Now()
	ctl.start()
	waitReady(t, spec, 60*time.Second)
	t.Logf("controller back %s after the kill", time.Since(down).Round(time.Millisecond))
	done := waitJob(t, cl, j.ID, 60*time.Second)
	t.Logf("job %s %s, %s after the kill (restart included)", done.ID, done.Status, time.Since(down).Round(time.Millisecond))
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", done.Status, describeFailures(done))
	}
	_, perStep := taskRuns(t, []*proc{agents["node-1"], agents["node-2"]})
	for _, n := range nodes {
		for step := range tasks {
			if got := perStep[taskKey{job: j.ID, step: step, node: n}]; got != 1 {
				t.Errorf("step %d ran %d times on %s", step, got, n)
			}
		}
	}
}
