package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"short", "short"},
		{"  pad  ", "pad"},
		{"first\nsecond", "first…"},
		{"abcdefghij", "abcd…"},
		{"ünïcödé!!", "ünïc…"},
	} {
		if got := truncate(tc.in, 5); got != tc.want {
			t.Errorf("truncate(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestProgressLines(t *testing.T) {
	p := 40
	j := &api.Job{ID: "j1", Status: api.JobRunning, Step: 1, Expected: []string{"a", "b"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}, {Tasks: []api.Phase{{Backend: "ping", Action: "sleep"}, {Backend: "test", Action: "fail"}}}},
		Results: api.JobResults{
			0: {"a": {Status: api.StepSuccess}, "b": {Status: api.StepSuccess}},
			1: {"a": {Status: api.StepRunning, Progress: &p}},
		}}
	lines := progressLines(j, 1500*time.Millisecond)
	if len(lines) != 4 {
		t.Fatalf("lines %q", lines)
	}
	for i, want := range []string{"job j1 running  step 2/3  nodes 2", "ok 2", "a:running 40% b:pending", "test.fail"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}

	// A long job shows a window around the current step.
	var many []api.Phase
	for range 100 {
		many = append(many, api.Phase{Backend: "ping", Action: "echo"})
	}
	j = &api.Job{ID: "j2", Status: api.JobRunning, Step: 50, Tasks: many}
	lines = progressLines(j, time.Second)
	if len(lines) != maxProgressSteps+3 || !strings.Contains(lines[1], "48 earlier") || !strings.Contains(lines[2], "[48]") {
		t.Fatalf("window: %q", lines)
	}
}

func TestJobTableNotRun(t *testing.T) {
	j := &api.Job{ID: "j", Status: api.JobFailed, Error: "fail-fast", Target: api.Target{Scope: api.ScopeAll},
		Tasks:   []api.Phase{{Backend: "test", Action: "fail"}, {Backend: "ping", Action: "echo"}},
		Results: api.JobResults{0: {"n": {Status: api.StepFailed, Error: "failed on purpose"}}}}
	var b bytes.Buffer
	if err := writeJobTable(&b, j, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status:    failed", "error:     fail-fast", "error: failed on purpose", "1     ping.echo  -     not run"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A job held back by a rate limit says so in the table and the progress
// view, and each waiting node says why.
func TestJobTableRateLimited(t *testing.T) {
	const jobReason = "rate limited: apt.install 20 per 1m: 80 node starts waiting, next slot in 12s (at 10:00:12Z)"
	const nodeReason = "rate limited: apt.install 20 per 1m: next slot in 12s (at 10:00:12Z)"
	j := &api.Job{ID: "j", Status: api.JobRunning, Target: api.Target{Scope: api.ScopeAll}, StatusReason: jobReason,
		Tasks: []api.Phase{{Backend: "apt", Action: "install"}}, Expected: []string{"a", "b"},
		Results: api.JobResults{0: {"a": {Status: api.StepSuccess}, "b": {Status: api.StepPending, StatusReason: nodeReason}}}}
	var b bytes.Buffer
	if err := writeJobTable(&b, j, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"waiting:   " + jobReason, "b     pending  -         no       " + truncate(nodeReason, 60)} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	lines := progressLines(j, time.Second)
	if last := lines[len(lines)-1]; !strings.Contains(last, jobReason) {
		t.Errorf("progress view %q lacks the reason", lines)
	}
}

// Text that reached the controller before it refused control characters
// (or through a record written by an older version) is printed escaped:
// it cannot drive the operator's terminal.
func TestNodeOutputEscapesControlCharacters(t *testing.T) {
	n := api.NodeInfo{ID: "node-1", Status: api.NodeOnline, Hostname: "web\x1b[2J\x1b]0;owned\x07", Version: "1.0\r\nX",
		Groups: []string{"web"}, Backends: []string{"ping"}, LastSeen: time.Now()}
	var list, one bytes.Buffer
	if err := printNodeList(&list, []api.NodeInfo{n}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := printNode(&one, &n, time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"node list": list.String(), "node info": one.String()} {
		if strings.ContainsAny(out, "\x1b\x07\r") {
			t.Errorf("%s prints raw control characters: %q", name, out)
		}
		if !strings.Contains(out, `web\x1b[2J`) || !strings.Contains(out, `1.0\r\nX`) {
			t.Errorf("%s does not show the escaped text: %q", name, out)
		}
	}
}

// A job whose nodes are in several sites names each node's site in its
// results and counts its nodes by site; a job of the default site alone
// reads as before.
func TestJobTableSites(t *testing.T) {
	j := &api.Job{ID: "j", Status: api.JobPartialFailure, Target: api.Target{Scope: api.ScopeGroup, Value: "web"},
		Tasks:       []api.Phase{{Backend: "ping", Action: "echo"}},
		Expected:    []string{"hub-1", "par-1"},
		Unreachable: []string{"par-2"},
		NodeSites:   map[string]string{"par-1": "paris", "par-2": "paris"},
		Results:     api.JobResults{0: {"hub-1": {Status: api.StepSuccess}, "par-1": {Status: api.StepFailed, Error: "boom"}}}}
	var b bytes.Buffer
	if err := writeJobTable(&b, j, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"sites:        default 1, paris 2", "unreachable:  par-2@paris (offline", "ping.echo  hub-1 ", "ping.echo  par-1@paris  failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	j.NodeSites = nil
	b.Reset()
	if err := writeJobTable(&b, j, time.Now()); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "sites:") || strings.Contains(out, "@") {
		t.Errorf("a job of the default site names sites:\n%s", out)
	}
}
