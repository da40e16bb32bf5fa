package controller

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"0": 0, "off": 0, "1048576": 1 << 20, "300MiB": 300 << 20, "1GiB": 1 << 30,
		"64KiB": 64 << 10, "512B": 512, " 2GiB ": 2 << 30, "1TiB": 1 << 40,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "300MB", "1.5GiB", "lots", "9999999TiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", in)
		}
	}
	for b, want := range map[ByteSize]string{0: "0", 300 << 20: "300MiB", 1 << 30: "1GiB", 1536: "1536B", 3 << 10: "3KiB"} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(b), got, want)
		}
	}
}

func TestConfigFileMemoryAndDebug(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(path, []byte("memory_limit: 512MiB\ndebug_addr: 127.0.0.1:6060\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if cfg.MemoryLimit != DefaultMemoryLimit || cfg.DebugAddr != "" {
		t.Fatalf("defaults: memory_limit %s, debug_addr %q", cfg.MemoryLimit, cfg.DebugAddr)
	}
	if err := LoadConfig(path, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.MemoryLimit != 512<<20 || cfg.DebugAddr != "127.0.0.1:6060" {
		t.Errorf("from the file: memory_limit %s, debug_addr %q", cfg.MemoryLimit, cfg.DebugAddr)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("memory_limit: 300MB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = DefaultConfig()
	if err := LoadConfig(bad, &cfg); err == nil || !strings.Contains(err.Error(), "not a size") {
		t.Errorf("300MB (not a GOMEMLIMIT unit): %v", err)
	}
}

func TestValidateMemoryAndDebug(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		bad    string
	}{
		{"no limit", func(c *Config) { c.MemoryLimit = 0 }, ""},
		{"big limit", func(c *Config) { c.MemoryLimit = 4 << 30 }, ""},
		{"tiny limit", func(c *Config) { c.MemoryLimit = 300 }, "memory_limit"},
		{"negative limit", func(c *Config) { c.MemoryLimit = -1 }, "memory_limit"},
		{"debug addr", func(c *Config) { c.DebugAddr = "127.0.0.1:0" }, ""},
		{"debug addr without port", func(c *Config) { c.DebugAddr = "localhost" }, "debug_addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tc.bad == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Errorf("want an error naming %s, got %v", tc.bad, err)
			}
		})
	}
}

func TestMemoryLimitEnvironment(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	cfg := DefaultConfig()
	if got, _ := cfg.memoryLimit(env()); got != DefaultMemoryLimit {
		t.Errorf("default: limit %d, want %d", got, DefaultMemoryLimit)
	}
	for _, kv := range [][]string{{"GOMEMLIMIT", "1GiB"}, {"GOGC", "50"}, {"GOGC", "off"}} {
		if got, why := cfg.memoryLimit(env(kv...)); got != 0 || !strings.Contains(why, kv[0]) {
			t.Errorf("%s=%s: limit %d (%s), want none naming %s", kv[0], kv[1], got, why, kv[0])
		}
	}
	cfg.MemoryLimit = 0
	if got, why := cfg.memoryLimit(env()); got != 0 || !strings.Contains(why, "memory_limit") {
		t.Errorf("memory_limit 0: limit %d (%s)", got, why)
	}

	// RunMemoryLimit really sets it, and puts the test process's back when
	// its context ends.
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	cfg.MemoryLimit = 2 << 30
	ctx, cancel := context.WithCancel(context.Background())
	if got, _ := cfg.RunMemoryLimit(ctx, env(), nil, nil); got != 2<<30 || debug.SetMemoryLimit(-1) != 2<<30 {
		t.Errorf("set %d, runtime has %d", got, debug.SetMemoryLimit(-1))
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for debug.SetMemoryLimit(-1) != prev && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Errorf("after the context ended the runtime has %d, want the previous %d", got, prev)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if got, _ := cfg.RunMemoryLimit(ctx, env("GOMEMLIMIT", "1GiB"), nil, nil); got != 0 || debug.SetMemoryLimit(-1) != prev {
		t.Errorf("with GOMEMLIMIT set: set %d, runtime has %d, want it untouched (%d)", got, debug.SetMemoryLimit(-1), prev)
	}
}

// The limit holds whether or not jobs run. Idle it never falls below twice
// the live heap, so a heap that outgrows the configured figure is collected
// as without a limit, not continuously; busy it never falls below the
// collector's own target plus the memory that target does not count, so a
// fan-out round is not collected back to back either.
func TestEffectiveMemoryLimit(t *testing.T) {
	const MiB = 1 << 20
	most := int64(math.MaxInt64)
	for _, tc := range []struct {
		name               string
		limit, live, other int64
		busy               bool
		want               int64
	}{
		{"idle, empty heap", 300 * MiB, 0, 0, false, 300 * MiB},
		{"idle, 10,000 agents' heap", 300 * MiB, 140 * MiB, 200 * MiB, false, 300 * MiB},
		{"idle, heap at half the limit", 300 * MiB, 150 * MiB, 0, false, 300 * MiB},
		{"idle, heap past half the limit", 300 * MiB, 400 * MiB, 50 * MiB, false, 800 * MiB},
		{"idle, overflow", 300 * MiB, most - 1, 0, false, most},
		{"busy, small heap: the configured limit holds", 300 * MiB, 50 * MiB, 20 * MiB, true, 300 * MiB},
		{"busy, floor at the limit", 300 * MiB, 100 * MiB, 36 * MiB, true, 300 * MiB},
		{"busy, stacks of a big fan-out raise the floor", 280 * MiB, 140 * MiB, 390 * MiB, true, (280 + 390 + 64) * MiB},
		{"busy, large heap", 300 * MiB, 1024 * MiB, 100 * MiB, true, (2048 + 100 + 64) * MiB},
		{"busy, negative figures count as none", 300 * MiB, -1, -1, true, 300 * MiB},
		{"busy, overflow of live", 300 * MiB, most/2 + 1, 0, true, most},
		{"busy, overflow of other", 300 * MiB, 1 * MiB, most - 10*MiB, true, most},
		{"no configured limit, busy: still bounded", 0, 200 * MiB, 30 * MiB, true, (400 + 30 + 64) * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := effectiveMemoryLimit(tc.limit, memStats{live: tc.live, other: tc.other}, tc.busy)
			if got != tc.want {
				t.Errorf("effectiveMemoryLimit(%d, live %d, other %d, busy %v) = %d, want %d", tc.limit, tc.live, tc.other, tc.busy, got, tc.want)
			}
			if got < tc.limit {
				t.Errorf("limit %d below the configured %d", got, tc.limit)
			}
		})
	}
}

// The figures read from the runtime are plausible: a live heap and memory
// outside it (this test's goroutine stacks at least).
func TestReadMemStats(t *testing.T) {
	runtime.GC()
	m, ok := readMemStats(memStatsSamples())
	if !ok {
		t.Fatal("runtime/metrics lacks a sample the limit needs")
	}
	if m.live <= 0 || m.other <= 0 {
		t.Errorf("live %d, other %d: want both positive", m.live, m.other)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if m.other < int64(ms.StackInuse) {
		t.Errorf("other %d is less than the stacks in use %d", m.other, ms.StackInuse)
	}
}

// Replicas unset (0) chooses from the cluster's size; an explicit count is
// kept, 1 in a cluster included.
func TestReplicasChosenFromCluster(t *testing.T) {
	two := []string{"nats://10.0.0.2:6222", "nats://10.0.0.3:6222"}
	for _, tc := range []struct {
		name       string
		cfg        func(*Config)
		want       int
		wantChosen bool
	}{
		{"single server", func(c *Config) {}, 1, true},
		{"cluster of three", func(c *Config) { c.ClusterName, c.Routes = "grid", two }, 3, true},
		{"routes name every server, itself too", func(c *Config) {
			c.ClusterName, c.ClusterAddr = "grid", "10.0.0.1:6222"
			c.Routes = append([]string{"nats://10.0.0.1:6222"}, two...)
		}, 3, true},
		{"same route twice", func(c *Config) { c.ClusterName, c.Routes = "grid", []string{two[0], two[0]} }, 2, true},
		{"cluster of two", func(c *Config) { c.ClusterName, c.Routes = "grid", two[:1] }, 2, true},
		{"cluster of five", func(c *Config) {
			c.ClusterName, c.Routes = "grid", append([]string{"nats://10.0.0.4:6222", "nats://10.0.0.5:6222"}, two...)
		}, 3, true},
		{"cluster name without routes", func(c *Config) { c.ClusterName = "grid" }, 1, true},
		{"external NATS", func(c *Config) { c.NATSURLs, c.NATSCreds = []string{"nats://n1:4222"}, "grid.creds" }, 1, true},
		{"explicit 1 in a cluster", func(c *Config) { c.ClusterName, c.Routes, c.Replicas = "grid", two, 1 }, 1, false},
		{"explicit 5", func(c *Config) { c.ClusterName, c.Routes, c.Replicas = "grid", two, 5 }, 5, false},
		{"explicit 3 on external NATS", func(c *Config) {
			c.NATSURLs, c.NATSCreds, c.Replicas = []string{"nats://n1:4222"}, "grid.creds", 3
		}, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatalf("valid config refused: %v", err)
			}
			if n, chosen := cfg.replicas(); n != tc.want || chosen != tc.wantChosen {
				t.Errorf("replicas() = %d, chosen %v; want %d, chosen %v", n, chosen, tc.want, tc.wantChosen)
			}
		})
	}
}

func TestValidateReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"negative", func(c *Config) { c.Replicas = -1 }},
		{"six", func(c *Config) { c.ClusterName, c.Replicas = "grid", 6 }},
		{"three on a single server", func(c *Config) { c.Replicas = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "replicas") {
				t.Errorf("Validate() = %v, want an error naming replicas", err)
			}
		})
	}
}

// An absent replicas key leaves the count to be chosen; an explicit one is
// kept.
func TestConfigFileReplicas(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"cluster_name: grid\n", 0},
		{"cluster_name: grid\nreplicas: 1\n", 1},
		{"cluster_name: grid\nreplicas: 3\n", 3},
	} {
		path := filepath.Join(t.TempDir(), "controller.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		if err := LoadConfig(path, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Replicas != tc.want {
			t.Errorf("%q: replicas %d, want %d", tc.yaml, cfg.Replicas, tc.want)
		}
	}
}

// The stream and bucket caps: read from the file with units, each at
// least 8MiB (small_buckets_max_bytes may be 0: derived from jobs), and
// the derived cap a sixteenth of jobs_max_bytes, at least 64MiB.
func TestStoreCapsConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("jobs_max_bytes: 4GiB\nresults_max_bytes: 512MiB\nsmall_buckets_max_bytes: 0\naudit_retention: 19200h\naudit_max_bytes: 2GiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := LoadConfig(path, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.JobsMaxBytes != 4<<30 || cfg.ResultsMaxBytes != 512<<20 || cfg.CommandsMaxBytes != 1<<30 {
		t.Errorf("read %s %s %s", cfg.JobsMaxBytes, cfg.ResultsMaxBytes, cfg.CommandsMaxBytes)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.AuditRetention.D() != 800*24*time.Hour || cfg.AuditMaxBytes != 2<<30 || cfg.limits(0)[api.StreamAudit].MaxBytes != 2<<30 {
		t.Errorf("audit: read retention %s, cap %s, stream cap %d", cfg.AuditRetention.D(), cfg.AuditMaxBytes, cfg.limits(0)[api.StreamAudit].MaxBytes)
	}
	if d := DefaultConfig(); d.AuditRetention.D() != 400*24*time.Hour || d.AuditMaxBytes != 1<<30 {
		t.Errorf("audit defaults: retention %s, cap %s; want 400 days, 1GiB", d.AuditRetention.D(), d.AuditMaxBytes)
	}
	if got := cfg.smallBucketsMaxBytes(); got != 256<<20 {
		t.Errorf("derived small bucket cap %d, want 256MiB", got)
	}
	if got := DefaultConfig().smallBucketsMaxBytes(); got != 64<<20 {
		t.Errorf("default small bucket cap %d, want 64MiB", got)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
	}{
		{"jobs_max_bytes", func(c *Config) { c.JobsMaxBytes = 1 << 20 }},
		{"requests_max_bytes", func(c *Config) { c.RequestsMaxBytes = 0 }},
		{"dlq_max_bytes", func(c *Config) { c.DLQMaxBytes = -1 }},
		{"small_buckets_max_bytes", func(c *Config) { c.SmallBucketsMaxBytes = 1 << 20 }},
		{"audit_max_bytes", func(c *Config) { c.AuditMaxBytes = 1 << 20 }},
		{"audit_retention", func(c *Config) { c.AuditRetention = 0 }},
	} {
		cfg := DefaultConfig()
		tc.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s too small: %v", tc.name, err)
		}
	}
}
