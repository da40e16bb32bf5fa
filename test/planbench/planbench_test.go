// Package planbench measures what a Terraform user waits for: terraform plan
// of one grid_job over a thousand nodes, with their results in state, run by
// the real terraform binary against the provider built as users build it.
package planbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestPlanWithThousandNodesInState applies one grid_job over every node of
// a fleet, then times terraform plan (refresh included) a few times and
// prints the figures and the state's size. GRID_PLAN_BENCH=1 runs it;
// GRID_PLAN_BENCH_AGENTS sets the fleet's size (default 1000).
func TestPlanWithThousandNodesInState(t *testing.T) {
	if os.Getenv("GRID_PLAN_BENCH") == "" {
		t.Skip("benchmark: set GRID_PLAN_BENCH=1 to time terraform plan over a 1,000-node job (make bench-plan)")
	}
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform is not on PATH")
	}
	agents := 1000
	if s := os.Getenv("GRID_PLAN_BENCH_AGENTS"); s != "" {
		if agents, err = strconv.Atoi(s); err != nil || agents < 1 {
			t.Fatalf("GRID_PLAN_BENCH_AGENTS=%q is not a count", s)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-grid"), ".")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build provider: %v\n%s", err, out)
	}
	tfrc := filepath.Join(dir, "dev.tfrc")
	writeFile(t, tfrc, fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"gridfleet/grid\" = %q\n  }\n  direct {}\n}\n", bin))

	start := time.Now()
	f := fleettest.Start(t, fleet.Options{Agents: agents})
	t.Logf("fleet of %d agents online in %s", agents, time.Since(start).Round(time.Millisecond))

	detail := "summary"
	if d := os.Getenv("GRID_PLAN_BENCH_DETAIL"); d != "" {
		detail = d
	}
	work := filepath.Join(dir, "work")
	writeFile(t, filepath.Join(work, "main.tf"), fmt.Sprintf(`terraform {
  required_providers {
    grid = { source = "gridfleet/grid" }
  }
}

provider "grid" {
  address = %q
  token   = %q
  ca_file = %q
}

resource "grid_job" "all" {
  target         = { scope = "all" }
  results_detail = %q
  tasks = [
    { backend = "ping", action = "echo", params = { message = "one" } },
    { backend = "ping", action = "echo", params = { message = "two" } },
  ]
}
`, f.APIURL(), f.AdminToken(), f.CAFile(), detail))
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+tfrc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	// cpu sums the CPU time of the terraform runs timed (with the provider
	// processes they waited for): on a shared machine the steadier figure.
	var cpu []time.Duration
	run := func(args ...string) (time.Duration, string) {
		cmd := exec.CommandContext(context.Background(), tf, args...)
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if err != nil {
			t.Fatalf("terraform %v: %v\n%s", args, err, out.String())
		}
		cpu = append(cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		return d, out.String()
	}
	d, _ := run("apply", "-auto-approve", "-input=false", "-no-color")
	t.Logf("apply: %s", d.Round(time.Millisecond))
	st, err := os.Stat(filepath.Join(work, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("GRID_PLAN_BENCH_KEEP"); keep != "" {
		cp := exec.Command("cp", "-r", dir, keep)
		if out, err := cp.CombinedOutput(); err != nil {
			t.Fatalf("keep %s: %v\n%s", dir, err, out)
		}
	}
	var plans, noRefresh, planCPU []time.Duration
	for range 3 {
		d, out := run("plan", "-input=false", "-no-color")
		planCPU = append(planCPU, cpu[len(cpu)-1])
		if !bytes.Contains([]byte(out), []byte("No changes")) {
			t.Fatalf("plan after apply is not empty:\n%s", out)
		}
		plans = append(plans, d)
		d, _ = run("plan", "-input=false", "-no-color", "-refresh=false")
		noRefresh = append(noRefresh, d)
	}
	fmt.Printf("plan-bench: %d nodes, results_detail %s, state %d KB, apply %s, plan %s (median of %d: %v; CPU %s), plan -refresh=false %s (%v)\n",
		agents, detail, st.Size()/1024, d.Round(time.Millisecond), median(plans), len(plans), plans, median(planCPU), median(noRefresh), noRefresh)
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2].Round(time.Millisecond)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
