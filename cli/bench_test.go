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

// TestBenchSitesSmoke runs bench sites small, relays in this process: a
// broadcast to one site's agents crosses its link as one command, and
// each agent's result comes back over it; the fan-out through the relays
// and the direct one are verified rounds.
func TestBenchSitesSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a controller, 2 relays and 20 agents")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	// Heartbeats every 20s: none falls in the measured window of this
	// short run (they would cross the link both ways, a request and its
	// answer, as the relay's roster requests do).
	code := run(ctx, "test", []string{"bench", "sites", "--sites", "2", "--agents", "5", "--rounds", "2", "--heartbeat", "20s",
		"--relays-in-process", "-o", "json"}, &out, &errb)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r struct {
		Link struct {
			Agents int   `json:"agents"`
			Out    int64 `json:"job_msgs_to_site"`
			In     int64 `json:"job_msgs_from_site"`
		} `json:"link"`
		Via    struct{ Agents, Verified int } `json:"via_sites"`
		Direct struct{ Agents, Verified int } `json:"direct"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	t.Logf("site link during a broadcast to its %d agents: %d messages to the site, %d from it", r.Link.Agents, r.Link.Out, r.Link.In)
	// To the site: one command and the answers to its agents' results;
	// from it: the results. A command per agent would make the difference
	// the number of agents.
	if r.Link.Agents != 5 || r.Link.In < 5 || r.Link.Out-r.Link.In != 1 {
		t.Errorf("site link during a broadcast to its %d agents: %d messages to the site, %d from it; want the results and one more to it",
			r.Link.Agents, r.Link.Out, r.Link.In)
	}
	if r.Via.Agents != 10 || r.Via.Verified != 2 || r.Direct.Agents != 10 || r.Direct.Verified != 2 {
		t.Errorf("fan-out: %+v %+v\n%s", r.Via, r.Direct, out.String())
	}
}
