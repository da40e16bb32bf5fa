package bench

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func soakSamples() []SoakSample {
	return []SoakSample{
		{Minutes: 0, CtlRSSMiB: 60, CtlLiveHeapMiB: 10, CtlHeapMiB: 18, CtlLimitMiB: 280, CtlGoroutines: 390, CtlOpenFDs: 130,
			JobsStoreBytes: 1000, ResultsBytes: 2000, JobsDiskBytes: 500, ResultsDiskBytes: 800, AgentRSSMiB: 11.5, AgentOpenFDs: 10},
		{Minutes: 1, Jobs: 60, JobsTotal: 60, P50Ms: 90, P99Ms: 300, CtlRSSMiB: 120, CtlLiveHeapMiB: 40, CtlHeapMiB: 75, CtlLimitMiB: 280,
			CtlGoroutines: 392, CtlOpenFDs: 131, JobsStoreBytes: 1000 + 60*100*350, ResultsBytes: 2000 + 60*100*400,
			JobsDiskBytes: 500 + 60*100*120, ResultsDiskBytes: 800 + 60*100*150, AgentRSSMiB: 11.6, AgentOpenFDs: 10},
		{Minutes: 2, Jobs: 59, Failed: 1, Skipped: 2, JobsTotal: 119, P50Ms: 95, P99Ms: 320, CtlRSSMiB: 121, CtlLiveHeapMiB: 41, CtlHeapMiB: 70,
			CtlLimitMiB: 280, CtlGoroutines: 391, CtlOpenFDs: 131, JobsStoreBytes: 1000 + 119*100*350, ResultsBytes: 2000 + 119*100*400,
			JobsDiskBytes: 500 + 119*100*120, ResultsDiskBytes: 800 + 119*100*150, AgentRSSMiB: 11.6, AgentOpenFDs: 10,
			Errors: []string{"job: job x ended failed: boom"}},
	}
}

// The report's storage per job and node is the stores' growth over the
// completed jobs and the nodes; the table has a row per sample and names
// the errors.
func TestSoakReport(t *testing.T) {
	r := NewSoakReport(100, 1, 1, 60, soakSamples())
	if r.JobsBytesPerNode != 350 || r.ResultsBytesPerNode != 400 || r.JobsDiskPerNode != 120 || r.ResultsDiskPerNode != 150 || r.Minutes != 2 {
		t.Errorf("report: %+v", r)
	}
	var b bytes.Buffer
	r.Table(&b)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Title, header, three samples, storage, one error.
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), out)
	}
	for _, want := range []string{"100 agents (1 processes)", "ctl RSS MiB", "live heap", "agent fds", "KV_jobs 350 bytes (120 on disk)",
		"results 400 bytes (150 on disk)", "at 2.0 min: job: job x ended failed: boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if f := strings.Fields(lines[4]); len(f) != 19 || f[0] != "2.00" || f[1] != "59" || f[2] != "1" || f[3] != "2" || f[6] != "121.0" {
		t.Errorf("last sample's row: %q", lines[4])
	}
	// No completed job: no storage per job, not a division by zero.
	if r := NewSoakReport(100, 1, 1, 60, soakSamples()[:1]); r.JobsBytesPerNode != 0 || r.ResultsBytesPerNode != 0 {
		t.Errorf("no jobs: %+v", r)
	}
}

// The plot is a PNG image of a readable size; fewer than two samples is
// an error, not an empty picture.
func TestSoakPlot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "soak.png")
	if err := NewSoakReport(100, 1, 1, 60, soakSamples()).WritePNG(file); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 800 {
		t.Errorf("image %dx%d, want at least 600x800", b.Dx(), b.Dy())
	}
	if err := NewSoakReport(100, 1, 1, 60, soakSamples()[:1]).WritePNG(filepath.Join(dir, "one.png")); err == nil {
		t.Error("one sample: no error")
	}
}

// The agent's live heap and goroutines are read from a real profiler (this
// test process's); a profiler that is not there is an error, not zeros.
func TestAgentGoStats(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	heap, n, err := agentGoStats(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if heap == 0 || n < 2 {
		t.Errorf("live heap %d bytes, %d goroutines; want both read", heap, n)
	}
	if _, _, err := agentGoStats(context.Background(), srv.URL+"/nothing"); err == nil {
		t.Error("no profiler: no error")
	}
}
