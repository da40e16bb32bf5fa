package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// TestScheduleCommands drives grid schedule create|list|show|pause|resume|
// delete against a real controller and agent: the schedule fires a job
// that names it, and job status shows the link.
func TestScheduleCommands(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	conn := []string{"--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile()}
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, conn...)...)
	}
	jobFile := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(jobFile, []byte("target: {scope: all}\ntasks:\n  - {backend: ping, action: echo}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := grid("schedule", "create", "every-sec", "--cron", "* * * * * *", "--overlap", "allow", "-f", jobFile, "-o", "json")
	if code != ExitOK {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	var s api.Schedule
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.ID != "every-sec" || s.NextRun == nil || s.Overlap != api.OverlapAllow {
		t.Fatalf("create output %q: %v", out, err)
	}
	code, out, errOut = grid("schedule", "create", "nightly", "--cron", "0 3 * * *", "--time-zone", "Europe/Berlin",
		"--catch-up", "run_once", "--paused", "--target", "all", "ping", "echo", "--message", "hi")
	if code != ExitOK || !strings.Contains(out, "Europe/Berlin") || !strings.Contains(out, "paused") || !strings.Contains(out, "run_once") {
		t.Fatalf("create from flags: %d %q %q", code, out, errOut)
	}

	var jobID string
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "the schedule to fire", func() bool {
		s, err := f.Client().GetSchedule(context.Background(), "every-sec")
		jobID = ""
		if err == nil {
			jobID = s.LastJobID
		}
		return jobID != ""
	})
	if code, out, _ := grid("job", "status", jobID); code != ExitOK || !strings.Contains(out, "schedule:") || !strings.Contains(out, "every-sec") {
		t.Fatalf("job status %s: %d %q", jobID, code, out)
	}
	// A plain job is not among the schedule's.
	if _, err := f.Client().SubmitJob(context.Background(), &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = grid("job", "list", "--schedule", "every-sec", "-o", "json")
	var listed []api.Job
	if err := json.Unmarshal([]byte(out), &listed); code != ExitOK || err != nil || len(listed) == 0 {
		t.Fatalf("job list --schedule: %d %q %q", code, out, errOut)
	}
	for _, j := range listed {
		if j.ScheduleID != "every-sec" {
			t.Fatalf("job list --schedule every-sec lists %s of schedule %q", j.ID, j.ScheduleID)
		}
	}
	code, out, _ = grid("schedule", "list")
	if code != ExitOK || !strings.Contains(out, "every-sec") || !strings.Contains(out, "nightly") || !strings.Contains(out, "NEXT RUN") {
		t.Fatalf("list: %d %q", code, out)
	}
	if code, out, _ := grid("schedule", "show", "every-sec"); code != ExitOK || !strings.Contains(out, "last job:") || !strings.Contains(out, "ping.echo on all") {
		t.Fatalf("show: %d %q", code, out)
	}
	if code, out, _ := grid("schedule", "pause", "every-sec"); code != ExitOK || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %d %q", code, out)
	}
	// update replaces the definition and keeps the paused state.
	code, out, errOut = grid("schedule", "update", "every-sec", "--cron", "@every 10m", "--target", "all", "ping", "echo", "--message", "later", "-o", "json")
	var upd api.Schedule
	if err := json.Unmarshal([]byte(out), &upd); code != ExitOK || err != nil {
		t.Fatalf("update: %d %q %q", code, out, errOut)
	}
	if upd.Cron != "@every 10m" || !upd.Paused || upd.Job.Tasks[0].Params["message"] != "later" || upd.Fired == 0 {
		t.Fatalf("update gave %+v: want the new cron and job, still paused, its counters kept", upd)
	}
	if code, _, errOut := grid("schedule", "update", "no-such", "--cron", "@hourly", "-f", jobFile); code == ExitOK || !strings.Contains(errOut, "not found") {
		t.Fatalf("update of a missing schedule: %d %q", code, errOut)
	}
	if code, out, _ := grid("schedule", "resume", "nightly"); code != ExitOK || !strings.Contains(out, "active") {
		t.Fatalf("resume: %d %q", code, out)
	}
	if code, out, _ := grid("schedule", "delete", "nightly"); code != ExitOK || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %d %q", code, out)
	}
	if code, _, errOut := grid("schedule", "show", "nightly"); code == ExitOK || !strings.Contains(errOut, "not found") {
		t.Fatalf("show deleted: %d %q", code, errOut)
	}

	// Mistakes are usage errors (exit 2) naming what is wrong, before any
	// request; the controller's 400s name the field.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"schedule", "create", "x", "-f", jobFile}, ExitUsage, "--cron"},
		{[]string{"schedule", "create", "--cron", "@daily", "-f", jobFile}, ExitUsage, "NAME"},
		{[]string{"schedule", "create", "x", "--cron", "bad", "-f", jobFile}, ExitUsage, "cron:"},
		{[]string{"schedule", "create", "x", "--cron", "@daily", "--time-zone", "Nowhere/Land", "-f", jobFile}, ExitUsage, "time_zone:"},
		{[]string{"schedule", "create", "x", "--cron", "@daily", "--catch-up", "all", "-f", jobFile}, ExitUsage, "catch_up:"},
		{[]string{"schedule", "frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
	} {
		code, out, errOut := grid(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: code %d, out %q, err %q; want %d naming %s", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	code, _, errOut = grid("schedule", "create", "x", "--cron", "@daily", "--target", "all", "nope", "echo")
	if code == ExitOK || !strings.Contains(errOut, "job.tasks[0]") {
		t.Fatalf("unknown backend: %d %q", code, errOut)
	}
}
