package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 10; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5 * time.Millisecond}, {90, 9 * time.Millisecond}, {99, 10 * time.Millisecond}, {100, 10 * time.Millisecond}, {1, time.Millisecond}} {
		if got := Percentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 10*time.Millisecond {
		t.Error("Percentile sorted its input")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("no samples should give 0")
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("one sample: %v", got)
	}
}

func TestFanoutReport(t *testing.T) {
	jobs := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	floor := []time.Duration{4 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond}
	r := NewFanoutReport(1000, jobs, floor, 3, 36*time.Millisecond)
	if r.P50Ms != 20 || r.P99Ms != 30 || r.FloorP50Ms != 5 || r.RatioP50 != 4 || r.Rounds != 3 || r.CPUMsPerRound != 12 {
		t.Fatalf("report: %+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"agents", "rounds", "p50_ms", "p90_ms", "p99_ms", "floor_p50_ms", "ratio_p50", "cpu_ms_per_round"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	var out bytes.Buffer
	r.Table(&out)
	if !strings.Contains(out.String(), "ratio p50") || !strings.Contains(out.String(), "4.00") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestThroughputReport(t *testing.T) {
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i+1) * time.Millisecond
	}
	r := NewThroughputReport(10, 8, 2*time.Second, lat, 1, 150*time.Millisecond)
	if r.Jobs != 100 || r.JobsPerS != 50 || r.P50Ms != 50 || r.P99Ms != 99 || r.Seconds != 2 || r.CPUMsPerJob != 1.5 {
		t.Fatalf("report: %+v", r)
	}
	b, _ := json.Marshal(r)
	for _, k := range []string{`"jobs"`, `"seconds"`, `"jobs_per_s"`, `"p50_ms"`, `"p99_ms"`, `"cpu_ms_per_job"`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
}

func TestRegisterReport(t *testing.T) {
	r := RegisterReport{Agents: 10000, Seconds: 12.5, ProcessRSSMiB: 1400, HeapInuseMiB: 1000,
		ControllerRSSMiB: 299.5, ControllerHeapMiB: 150, ControllerStacksMiB: 110.2, ControllerCPUPercent: 27.5, SettledSeconds: 60}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"controller_rss_mib":299.5`, `"controller_stacks_mib":110.2`, `"controller_cpu_percent":27.5`, `"settled_seconds":60`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	var out bytes.Buffer
	r.Table(&out)
	for _, want := range []string{"controller stacks MiB", "controller CPU %", "110.2", "27.5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	r = RegisterReport{Agents: 100, Embedded: true}
	out.Reset()
	r.Table(&out)
	if !strings.Contains(out.String(), "embedded") {
		t.Errorf("embedded table:\n%s", out.String())
	}
}

func TestProcFanoutReport(t *testing.T) {
	res := FanoutResult{
		Spans:     []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond},
		Latencies: []time.Duration{35 * time.Millisecond, 15 * time.Millisecond, 25 * time.Millisecond},
		Verified:  3,
	}
	floor := []time.Duration{4 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond}
	// 100 agents, 3 rounds: 300 commands for 90 ms of agent CPU.
	r := NewProcFanoutReport(100, res, floor, 200*time.Microsecond, 90*time.Millisecond, 50*time.Millisecond, 2*time.Second)
	if r.P50Ms != 20 || r.SubmitP50Ms != 25 || r.FloorP50Ms != 5 || r.RatioP50 != 4 || r.Rounds != 3 ||
		r.AgentCPUMsPerCommand != 0.3 || r.FloorCPUMsPerMessage != 0.2 || r.AgentIdleCPUMsPerS != 25 || r.Verified != 3 {
		t.Fatalf("report: %+v", r)
	}
	var b bytes.Buffer
	r.Table(&b)
	if !strings.Contains(b.String(), "agent cpu ms/cmd") || !strings.Contains(b.String(), "0.300") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestProcCPU(t *testing.T) {
	// Use some CPU first, as getrusage counts it; /proc/<pid>/stat must
	// show it too.
	for x := 0; CPUTime() < 50*time.Millisecond; x++ {
		_ = strings.Repeat("x", x%4096)
	}
	d, err := procCPU(os.Getpid())
	if err != nil || d <= 0 {
		t.Fatalf("procCPU(self) = %v, %v", d, err)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU of no process: no error")
	}
}

func TestSitesReport(t *testing.T) {
	via := NewFanoutSide(300, FanoutResult{
		Latencies: []time.Duration{40 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
		Spans:     []time.Duration{35 * time.Millisecond, 15 * time.Millisecond, 25 * time.Millisecond}, Verified: 3})
	direct := NewFanoutSide(300, FanoutResult{
		Latencies: []time.Duration{20 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond}, Verified: 3})
	link := LinkResult{Agents: 100, Window: 120 * time.Millisecond,
		Job:  LinkCounters{ID: 7, OutMsgs: 101, InMsgs: 100, OutBytes: 500, InBytes: 24000},
		Idle: LinkCounters{ID: 7, InMsgs: 2, InBytes: 300}}
	r := NewSitesReport(3, 100, true, link, via, direct)
	if r.ViaSites.P50Ms != 30 || r.ViaSites.SpanP50Ms != 25 || r.Direct.P50Ms != 15 || r.RatioP50 != 2 ||
		r.Link.JobMsgsOut != 101 || r.Link.JobMsgsIn != 100 || r.Link.IdleMsgsIn != 2 || r.Link.WindowMs != 120 {
		t.Fatalf("report: %+v", r)
	}
	var b bytes.Buffer
	r.Table(&b)
	for _, want := range []string{"msgs to site", "3 sites × 100", "24000", "ratio p50 (sites / direct): 2.00"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if got := (LinkCounters{InMsgs: 5, OutBytes: 9}).sub(LinkCounters{InMsgs: 2, OutBytes: 4}); got.InMsgs != 3 || got.OutBytes != 5 {
		t.Errorf("sub: %+v", got)
	}
}
