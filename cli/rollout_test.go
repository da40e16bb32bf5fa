package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Exit codes against a real controller and agents: 3 when an offline node
// of the group alone kept the job from completing (job run --wait and job
// status alike), 1 when a rollout stopped at --max-errors.
func TestJobExitCodesRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	f := fleettest.Start(t, fleet.Options{Agents: 3, Groups: func(int) []string { return []string{"web"} }})
	if err := f.StopAgent("node-3"); err != nil {
		t.Fatal(err)
	}
	addr := f.APIURL()

	code, out, errOut := runCLI(t, "job", "run", "--addr", addr, "--token", f.AdminToken(), "--cacert", f.CAFile(), "--target", "group:web", "ping", "echo", "--wait")
	if code != ExitUnreachable {
		t.Fatalf("job with an offline node: code %d, want %d; out %q err %q", code, ExitUnreachable, out, errOut)
	}
	for _, want := range []string{"unreachable:", "node-3", "3 targeted, 2 reached, 2 succeeded, 0 failed, 1 unreachable"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	id := regexp.MustCompile(`job:\s+(\S+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no job id in %q", out)
	}
	if code, out, _ := runCLI(t, "job", "status", "--addr", addr, "--token", f.AdminToken(), "--cacert", f.CAFile(), id[1]); code != ExitUnreachable {
		t.Fatalf("job status: code %d, want %d: %s", code, ExitUnreachable, out)
	}

	code, out, errOut = runCLI(t, "job", "run", "--addr", addr, "--token", f.AdminToken(), "--cacert", f.CAFile(), "--target", "group:web", "--max-concurrency", "1", "--max-errors", "0",
		"test", "fail", "--wait")
	if code != ExitFailed || !strings.Contains(out, "not_started") || !strings.Contains(out, "max errors:") {
		t.Fatalf("rollout stopped by max_errors: code %d out %q err %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "job", "run", "--addr", addr, "--token", f.AdminToken(), "--cacert", f.CAFile(), "--target", "all", "--max-errors", "lots", "ping", "echo"); code != ExitUsage || !strings.Contains(errOut, "--max-errors") {
		t.Fatalf("bad --max-errors: code %d err %q", code, errOut)
	}
}
