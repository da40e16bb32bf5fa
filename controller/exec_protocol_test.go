package controller_test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// buildProcessor compiles the exec backend's test program.
func buildProcessor(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "processor")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join("..", "backends", "exec", "testdata", "processor")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build processor: %v\n%s", err, b)
	}
	return out
}

// TestExecProgramSeesJobAndProgressMessage: an exec program receives the
// real job id, step and node, and its progress message (not only the
// percentage) is in the job's results while it runs and after it ends.
func TestExecProgramSeesJobAndProgressMessage(t *testing.T) {
	bin := buildProcessor(t)
	f := fleettest.Start(t, fleet.Options{Agents: 1, Agent: func(_ int, c *agent.Config) {
		c.Backends.Programs = map[string]agent.ProgramConfig{"proc": {Path: bin, Mode: "oneshot", Timeout: agent.Duration(10 * time.Second)}}
	}})
	j := submit(t, f, `
target: {scope: node, value: node-1}
tasks:
  - {backend: ping, action: echo}
  - {backend: exec, action: run, params: {program: proc, input: '{"echo": "hi"}'}}
  - {backend: exec, action: run, params: {program: proc, input: '{"slow_progress": "frame 12/27"}'}}
`)
	var seen bool
	waitFor(t, 20*time.Second, "the progress message while the step runs", func() bool {
		cur, err := f.Client().GetJob(t.Context(), j.ID)
		if err != nil {
			return false
		}
		r := cur.Results.Node(2, "node-1")
		seen = r != nil && r.ProgressMessage == "frame 12/27" && r.Progress != nil && *r.Progress == 50
		return seen || cur.Status.Terminal()
	})
	if !seen {
		t.Fatal("the progress message never showed in the running job")
	}
	j = wait(t, f, j.ID)
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Status, j.Error)
	}
	facts := j.Results.Node(1, "node-1").Facts
	if facts["job_id"] != j.ID || facts["step"] != float64(1) || facts["node"] != "node-1" {
		t.Fatalf("program saw job_id %v step %v node %v; want %s 1 node-1", facts["job_id"], facts["step"], facts["node"], j.ID)
	}
	if r := j.Results.Node(2, "node-1"); r.ProgressMessage != "frame 12/27" || r.Output != "finished" {
		t.Fatalf("finished step: progress message %q output %q", r.ProgressMessage, r.Output)
	}
}
