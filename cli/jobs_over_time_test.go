package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestUnknownSubcommandIsAUsageError: a mistyped or missing subcommand of a
// command group fails with exit code 2 and names the command, instead of
// printing help and exiting 0.
func TestUnknownSubcommandIsAUsageError(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		unknown string
	}{
		{[]string{"job", "retyr", "j-1"}, "retyr"},
		{[]string{"job", "frobnicate"}, "frobnicate"},
		{[]string{"node", "nope"}, "nope"},
		{[]string{"job", "dlq", "purge"}, "purge"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, `unknown command "`+tc.unknown+`"`) {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want exit 2 naming %q", tc.args, code, out, errOut, tc.unknown)
		}
	}
	// A bare group still shows its help.
	if code, out, _ := runCLI(t, "job"); code != ExitOK || !strings.Contains(out, "Available Commands") {
		t.Errorf("grid job: code %d, out %q", code, out)
	}
}

// TestJobListStatusAndLimit runs "grid job list --status S --limit N"
// against a real controller.
func TestJobListStatusAndLimit(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	var completed []string
	for range 3 {
		j, err := c.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		completed = append(completed, j.ID)
	}
	j, err := c.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "60s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := c.CancelJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	addr := c.Address()
	tok := f.AdminToken()

	list := func(args ...string) []api.Job {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"job", "list", "--addr", addr, "--token", tok, "--cacert", f.CAFile(), "-o", "json"}, args...)...)
		if code != ExitOK {
			t.Fatalf("job list %q: code %d err %q", args, code, errOut)
		}
		var jobs []api.Job
		if err := json.Unmarshal([]byte(out), &jobs); err != nil {
			t.Fatalf("job list %q output %q: %v", args, out, err)
		}
		return jobs
	}
	if got := list("--status", "completed"); len(got) != 3 {
		t.Fatalf("--status completed: %d jobs, want 3", len(got))
	}
	if got := list("--status", "cancelled"); len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("--status cancelled: %+v, want only %s", got, j.ID)
	}
	if got := list("--status", "completed", "--limit", "2"); len(got) != 2 {
		t.Fatalf("--limit 2: %d jobs", len(got))
	}
	if got := list("--limit", "1"); len(got) != 1 {
		t.Fatalf("--limit 1: %d jobs", len(got))
	}
	for _, bad := range [][]string{{"--status", "done"}, {"--limit", "-1"}, {"--limit", "x"}} {
		code, _, errOut := runCLI(t, append([]string{"job", "list", "--addr", addr, "--token", tok}, bad...)...)
		if code != ExitUsage || !strings.Contains(errOut, bad[0]) {
			t.Errorf("job list %q: code %d err %q; want exit 2 naming the flag", bad, code, errOut)
		}
	}

	// retry and delete through the CLI.
	code, out, errOut := runCLI(t, "job", "retry", "--addr", addr, "--token", tok, "--cacert", f.CAFile(), completed[0], "--wait", "-o", "json")
	var retried api.Job
	if err := json.Unmarshal([]byte(out), &retried); err != nil || code != ExitOK || retried.RetryOf != completed[0] || retried.Status != api.JobCompleted {
		t.Fatalf("job retry: code %d out %q err %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "job", "delete", "--addr", addr, "--token", tok, "--cacert", f.CAFile(), j.ID); code != ExitOK || !strings.Contains(out, "deleted") {
		t.Fatalf("job delete: code %d out %q err %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "job", "delete", "--addr", addr, "--token", tok, "--cacert", f.CAFile(), j.ID); code != ExitFailed || !strings.Contains(errOut, "not found") {
		t.Fatalf("second delete: code %d err %q", code, errOut)
	}

	// The dead-letter commands against a controller with none.
	if code, out, errOut := runCLI(t, "job", "dlq", "list", "--addr", addr, "--token", tok, "--cacert", f.CAFile(), "-o", "json"); code != ExitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("dlq list: code %d out %q err %q", code, out, errOut)
	}
	for _, verb := range []string{"replay", "drop"} {
		if code, _, errOut := runCLI(t, "job", "dlq", verb, "--addr", addr, "--token", tok, "--cacert", f.CAFile(), "job-none"); code != ExitFailed || !strings.Contains(errOut, "no dead letter") {
			t.Fatalf("dlq %s of a job without one: code %d err %q", verb, code, errOut)
		}
	}
}
