package sysinfo

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

func TestConformance(t *testing.T) {
	b := New()
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Literal: func(t *testing.T, action, param, value string) {
			t.Errorf("%s.%s accepted %q", action, param, value)
		},
	})
}

// Every query against the real machine: facts present and plausible, one
// line of output, no change.
func TestQueries(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New())
	host, _ := os.Hostname()
	for _, tc := range []struct {
		action string
		params api.Params
		check  func(t *testing.T, f map[string]any)
	}{
		{"hostname", nil, func(t *testing.T, f map[string]any) {
			if f["hostname"] != host {
				t.Errorf("hostname = %v, want %s", f["hostname"], host)
			}
		}},
		{"uptime", nil, func(t *testing.T, f map[string]any) {
			if s, _ := f["seconds"].(float64); s <= 0 {
				t.Errorf("uptime %v", f["seconds"])
			}
		}},
		{"os", nil, func(t *testing.T, f map[string]any) {
			if f["id"] == "" || f["kernel"] == "" || f["arch"] == "" {
				t.Errorf("os facts %v", f)
			}
		}},
		{"disk", api.Params{"path": t.TempDir()}, func(t *testing.T, f map[string]any) {
			total, _ := f["total_bytes"].(uint64)
			avail, _ := f["available_bytes"].(uint64)
			if total == 0 || avail > total {
				t.Errorf("disk facts %v", f)
			}
		}},
		{"memory", nil, func(t *testing.T, f map[string]any) {
			total, _ := f["total_bytes"].(uint64)
			avail, _ := f["available_bytes"].(uint64)
			if total < 1<<20 || avail > total {
				t.Errorf("memory facts %v", f)
			}
		}},
		{"load", nil, func(t *testing.T, f map[string]any) {
			if p, _ := f["processes"].(int); p < 1 {
				t.Errorf("load facts %v", f)
			}
		}},
		{"cpu", nil, func(t *testing.T, f map[string]any) {
			if n, _ := f["logical"].(int); n < runtime.NumCPU() {
				t.Errorf("logical %v, the Go runtime sees %d", f["logical"], runtime.NumCPU())
			}
			if b, ok := f["since_boot_pct"].(map[string]any); !ok || b["idle"].(float64) < 0 {
				t.Errorf("cpu facts %v", f)
			}
		}},
		{"status", nil, func(t *testing.T, f map[string]any) {
			for _, k := range []string{"hostname", "os", "uptime", "load", "memory", "disk"} {
				if _, ok := f[k].(map[string]any); !ok {
					t.Errorf("status lacks %s: %v", k, f)
				}
			}
			if d := f["disk"].(map[string]any); d["path"] != "/" {
				t.Errorf("status disk path = %v", d["path"])
			}
		}},
	} {
		t.Run(tc.action, func(t *testing.T) {
			res, err := r.Run(context.Background(), "sysinfo", &backends.Request{Action: tc.action, Params: tc.params, CheckMode: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed {
				t.Errorf("read-only query reported a change")
			}
			if res.Output == "" || strings.Contains(res.Output, "\n") {
				t.Errorf("output %q is not one line", res.Output)
			}
			tc.check(t, res.Facts)
		})
	}
}

func TestDiskMissingPath(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New())
	_, err := r.Run(context.Background(), "sysinfo", &backends.Request{Action: "disk", Params: api.Params{"path": "/no/such/dir"}})
	if err == nil || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("err = %v", err)
	}
}

func TestParsers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f, _, err := osRelease(write("os-release", "# c\nNAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID='12'\nPRETTY_NAME=\"Debian 12\"\n"))
	if err != nil || f["id"] != "debian" || f["version_id"] != "12" || f["name"] != "Debian GNU/Linux" {
		t.Errorf("osRelease = %v, %v", f, err)
	}
	f, _, err = memory(write("meminfo", "MemTotal:  2048 kB\nMemFree: 512 kB\nMemAvailable: 1024 kB\nSwapTotal: 0 kB\n"))
	if err != nil || f["total_bytes"] != uint64(2048*1024) || f["available_bytes"] != uint64(1024*1024) || f["used_pct"] != 50.0 {
		t.Errorf("memory = %v, %v", f, err)
	}
	x86 := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\ncpu MHz\t\t: 2100.004\nphysical id\t: 0\ncore id\t\t: 0\n\n" +
		"processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\ncpu MHz\t\t: 2100.004\nphysical id\t: 0\ncore id\t\t: 0\n\n" +
		"processor\t: 2\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon X\nphysical id\t: 1\ncore id\t\t: 0\n\n"
	stat := write("stat", "cpu  60 10 20 800 50 5 5 50 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n")
	f, _, err = cpu(write("cpuinfo", x86), stat)
	b, _ := f["since_boot_pct"].(map[string]any)
	if err != nil || f["logical"] != 3 || f["sockets"] != 2 || f["cores"] != 2 || f["model"] != "Xeon X" || f["mhz"] != 2100.0 ||
		b["user"] != 7.0 || b["system"] != 3.0 || b["idle"] != 80.0 || b["iowait"] != 5.0 || b["steal"] != 5.0 {
		t.Errorf("cpu x86 = %v, %v", f, err)
	}
	f, _, err = cpu(write("cpuinfo-arm", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\nprocessor\t: 1\nCPU implementer\t: 0x41\n"), stat)
	if err != nil || f["logical"] != 2 || f["cores"] != 2 || f["sockets"] != 0 || f["vendor"] != "0x41" {
		t.Errorf("cpu arm = %v, %v", f, err)
	}
	if _, _, err := cpu(write("cpuinfo-empty", ""), stat); err == nil {
		t.Errorf("empty cpuinfo accepted")
	}
	f, _, err = load(write("loadavg", "0.50 1.25 2.00 3/456 789\n"))
	if err != nil || f["load1"] != 0.5 || f["load15"] != 2.0 || f["running"] != 3 || f["processes"] != 456 {
		t.Errorf("load = %v, %v", f, err)
	}
	if _, _, err := load(write("bad", "x\n")); err == nil {
		t.Errorf("bad loadavg accepted")
	}
	if h := human(1536); h != "1.5 KiB" {
		t.Errorf("human = %q", h)
	}
}
