package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchSoakShort runs grid bench soak end to end for a few seconds: a
// controller process, two agent processes and two agents in the bench,
// three samples at least; the JSON report must hold them with real figures
// and the plot must be a PNG. It builds the grid binary (the controller and
// agent processes run it), so it runs only with GRID_SOAK_TEST=1.
func TestBenchSoakShort(t *testing.T) {
	if os.Getenv("GRID_SOAK_TEST") != "1" {
		t.Skip("soak test: set GRID_SOAK_TEST=1 to build grid and run a 10 s soak with agent processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "grid")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plotFile := filepath.Join(dir, "soak.png")
	cmd := exec.CommandContext(ctx, bin, "bench", "soak", "--agents", "4", "--agent-procs", "2", "--rate", "2",
		"--duration", "10s", "--interval", "3s", "--heartbeat", "1s", "--plot", plotFile, "-o", "json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("grid bench soak: %v\n%s", err, errb.String())
	}
	var r struct {
		Agents     int `json:"agents"`
		AgentProcs int `json:"agent_procs"`
		Samples    []struct {
			Jobs       int      `json:"jobs"`
			JobsTotal  int      `json:"jobs_total"`
			Failed     int      `json:"failed"`
			P50        float64  `json:"p50_ms"`
			CtlRSS     float64  `json:"controller_rss_mib"`
			LiveHeap   float64  `json:"controller_live_heap_mib"`
			Goroutines int      `json:"controller_goroutines"`
			FDs        int      `json:"controller_open_fds"`
			KVJobs     uint64   `json:"kv_jobs_bytes"`
			KVJobsDisk uint64   `json:"kv_jobs_disk_bytes"`
			Results    uint64   `json:"results_bytes"`
			AgentRSS   float64  `json:"agent_rss_mib"`
			AgentFDs   int      `json:"agent_open_fds"`
			Errors     []string `json:"errors"`
		} `json:"samples"`
		JobsPerNode float64 `json:"kv_jobs_bytes_per_job_node"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	// A sample before the first job, three or four on the interval, one
	// after the last job.
	if r.Agents != 4 || r.AgentProcs != 2 || len(r.Samples) < 4 {
		t.Fatalf("report: %+v", r)
	}
	last := r.Samples[len(r.Samples)-1]
	if last.JobsTotal < 5 || r.JobsPerNode <= 0 || last.KVJobs == 0 || last.KVJobsDisk == 0 || last.Results == 0 {
		t.Errorf("jobs and storage: %+v (per node %v)", last, r.JobsPerNode)
	}
	for i, s := range r.Samples {
		if s.Failed != 0 || len(s.Errors) > 0 || s.CtlRSS <= 0 || s.LiveHeap <= 0 || s.Goroutines <= 0 || s.FDs <= 0 || s.AgentRSS <= 0 || s.AgentFDs <= 0 {
			t.Errorf("sample %d: %+v", i, s)
		}
	}
	f, err := os.Open(plotFile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("plot is not a PNG: %v", err)
	}
}

// Bad soak flags are usage errors, found before anything starts.
func TestBenchSoakFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no agent process to sample", []string{"--agents", "5", "--agent-procs", "0"}},
		{"more processes than agents", []string{"--agents", "5", "--agent-procs", "6"}},
		{"no agents", []string{"--agents", "0"}},
		{"rate 0", []string{"--rate", "0"}},
		{"negative rate", []string{"--rate", "-1"}},
		{"interval longer than the run", []string{"--duration", "10s", "--interval", "1m"}},
		{"no duration", []string{"--duration", "0s"}},
		{"no plot file", []string{"--plot", ""}},
		{"no jobs in flight", []string{"--max-in-flight", "0"}},
		{"an existing deployment", []string{"--addr", "127.0.0.1:1", "--nats", "nats://127.0.0.1:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"bench", "soak"}, tc.args...)
			if code := run(context.Background(), "test", args, &out, &errb); code != ExitUsage {
				t.Errorf("exit %d, want %d (usage): %s", code, ExitUsage, errb.String())
			}
		})
	}
}
