package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchFanoutSmoke runs a small fan-out benchmark end to end: an
// embedded controller, 20 in-process agents, 3 verified rounds.
func TestBenchFanoutSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a controller and 20 agents")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	code := run(ctx, "test", []string{"bench", "fanout", "--agents", "20", "--rounds", "3", "--heartbeat", "1s", "-o", "json",
		"--cpuprofile", cpu, "--memprofile", mem}, &out, &errb)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		Agents   int     `json:"agents"`
		Rounds   int     `json:"rounds"`
		P50      float64 `json:"p50_ms"`
		Floor    float64 `json:"floor_p50_ms"`
		Ratio    float64 `json:"ratio_p50"`
		Verified int     `json:"verified"`
		CPU      float64 `json:"cpu_ms_per_round"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if r.Agents != 20 || r.Rounds != 3 || r.Verified != 3 || r.P50 <= 0 || r.Floor <= 0 || r.Ratio <= 0 || r.CPU <= 0 {
		t.Fatalf("report: %+v", r)
	}
	for _, f := range []string{cpu, mem, mem + ".base"} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v", f, err)
		}
	}
}

func TestBenchFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), "test", []string{"bench", "fanout", "--agents", "0"}, &out, &errb); code != ExitUsage {
		t.Errorf("--agents 0: exit %d", code)
	}
	if code := run(context.Background(), "test", []string{"bench", "fanout", "--nats", "nats://127.0.0.1:1"}, &out, &errb); code != ExitUsage {
		t.Errorf("--nats without --addr: exit %d", code)
	}
}
