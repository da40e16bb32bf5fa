package journald

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// t0 is the first entry's time; entries are a minute apart.
var t0 = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)

// fake is a fake journalctl with its journal: web.service logs ten
// entries "request N" (every third at priority err), db.service one whose
// message is not UTF-8 text (journalctl writes it as an array of bytes).
type fake struct {
	dir string
	b   *Backend
}

func newFake(t *testing.T) *fake {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("FAKE_JOURNALCTL_DIR", dir)
	var lines []string
	add := func(e map[string]any) {
		b, _ := json.Marshal(e)
		lines = append(lines, string(b))
	}
	for i := range 10 {
		prio := "6"
		if i%3 == 0 {
			prio = "3"
		}
		add(map[string]any{"__REALTIME_TIMESTAMP": fmt.Sprint(t0.Add(time.Duration(i) * time.Minute).UnixMicro()),
			"_SYSTEMD_UNIT": "web.service", "SYSLOG_IDENTIFIER": "web", "_PID": "42", "PRIORITY": prio,
			"MESSAGE": fmt.Sprintf("request %d", i), "_BOOT_ID": "fedcba9876543210fedcba9876543210"})
	}
	add(map[string]any{"__REALTIME_TIMESTAMP": fmt.Sprint(t0.Add(time.Hour).UnixMicro()), "_SYSTEMD_UNIT": "db.service",
		"SYSLOG_IDENTIFIER": "db", "PRIORITY": "4", "MESSAGE": []int{'o', 'k', 0xff}})
	if err := os.WriteFile(filepath.Join(dir, "entries.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fake{dir: dir, b: New(Options{JournalctlPath: testbin.Build(t, "testdata/fakejournalctl")})}
}

// calls returns every argv journalctl saw, and forgets them.
func (f *fake) calls(t *testing.T) [][]string {
	t.Helper()
	path := filepath.Join(f.dir, "argv.log")
	file, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer file.Close()
	var out [][]string
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var argv []string
		if err := json.Unmarshal(sc.Bytes(), &argv); err != nil {
			t.Fatal(err)
		}
		out = append(out, argv)
	}
	return out
}

func (f *fake) run(t *testing.T, action string, p api.Params) (*backends.Result, error) {
	t.Helper()
	r := backends.NewRegistry().MustRegister(f.b)
	res, err := r.Run(context.Background(), "journald", &backends.Request{Action: action, Params: p, CheckMode: true})
	if res != nil && res.Changed {
		t.Errorf("%s reports a change", action)
	}
	return res, err
}

// factsBytes is the size of request n's facts in JSON, and a newline.
func factsBytes(n int) int {
	prio := 6
	if n%3 == 0 {
		prio = 3
	}
	b, _ := json.Marshal(Entry{Time: t0.Add(time.Duration(n) * time.Minute), Priority: prio, Unit: "web.service", Tag: "web",
		PID: "42", Message: fmt.Sprintf("request %d", n), BootID: "fedcba9876543210fedcba9876543210"}.facts())
	return len(b) + 1
}

func messages(res *backends.Result) []string {
	var out []string
	for _, e := range res.Facts["entries"].([]any) {
		out = append(out, e.(map[string]any)["message"].(string))
	}
	return out
}

func TestConformance(t *testing.T) {
	f := newFake(t)
	conformance.Run(t, conformance.Suite{
		Backend: f.b,
		Blocking: func(t *testing.T) *backends.Request {
			return &backends.Request{Action: "logs", Params: api.Params{"unit": "block.service"}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			if action != "logs" {
				t.Errorf("%s.%s accepted %q", action, param, value)
				return
			}
			f.calls(t)
			res, err := f.run(t, "logs", api.Params{param: value})
			argv := f.calls(t)
			switch param {
			case "grep":
				// The pattern is matched here, in Go, against messages:
				// journalctl never sees it.
				if _, cerr := regexp.Compile(value); cerr != nil {
					if err == nil || !strings.Contains(err.Error(), "grep") || len(argv) != 0 {
						t.Errorf("grep %q: %v, journalctl ran %q", value, err, argv)
					}
					return
				}
				if err != nil || len(argv) != 1 || slices.ContainsFunc(argv[0], func(a string) bool { return strings.Contains(a, value) }) {
					t.Errorf("grep %q: %v, argv %q", value, err, argv)
				}
				_ = res
			case "since", "until":
				// One --since=VALUE argument, whatever the value holds.
				if len(argv) != 1 || !slices.Contains(argv[0], "--"+param+"="+value) {
					t.Errorf("%s %q: argv %q", param, value, argv)
				}
			default:
				t.Errorf("logs.%s accepted %q", param, value)
			}
		},
	})
}

func TestLogs(t *testing.T) {
	f := newFake(t)
	for _, tc := range []struct {
		name   string
		params api.Params
		argv   []string
		want   []string
		trunc  bool
	}{
		{"last lines of a unit", api.Params{"unit": "web.service", "lines": "3"},
			[]string{"--output=json", "--no-pager", "--quiet", "--unit=web.service", "--lines=3"},
			[]string{"request 7", "request 8", "request 9"}, false},
		{"range and priority", api.Params{"unit": "web.service", "since": "-1h", "until": "2026-11-24 09:00:00", "priority": "err", "boot": "0"},
			[]string{"--output=json", "--no-pager", "--quiet", "--unit=web.service", "--since=-1h", "--until=2026-11-24 09:00:00", "--priority=err", "--boot=0", "--lines=100"},
			[]string{"request 0", "request 3", "request 6", "request 9"}, false},
		// grep reads every entry and keeps the last matches.
		{"grep", api.Params{"grep": `request [2-5]$`, "lines": "2"},
			[]string{"--output=json", "--no-pager", "--quiet"},
			[]string{"request 4", "request 5"}, true},
		{"bytes that are not text", api.Params{"unit": "db.service"},
			[]string{"--output=json", "--no-pager", "--quiet", "--unit=db.service", "--lines=100"},
			[]string{"ok\uFFFD"}, false},
		// Each line is "2026-11-24T08:0N:00Z web[42]: request N" (39 bytes
		// and a newline): 100 bytes hold two lines, and no entry's facts.
		{"max_output_bytes", api.Params{"unit": "web.service", "max_output_bytes": "100"},
			[]string{"--output=json", "--no-pager", "--quiet", "--unit=web.service", "--lines=100"},
			nil, true},
		// The facts of the last two entries, exactly.
		{"max_output_bytes for facts", api.Params{"unit": "web.service", "max_output_bytes": strconv.Itoa(factsBytes(8) + factsBytes(9))},
			[]string{"--output=json", "--no-pager", "--quiet", "--unit=web.service", "--lines=100"},
			[]string{"request 8", "request 9"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.calls(t)
			res, err := f.run(t, "logs", tc.params)
			if err != nil {
				t.Fatal(err)
			}
			if argv := f.calls(t); len(argv) != 1 || !slices.Equal(argv[0], tc.argv) {
				t.Errorf("argv %q, want %q", argv, tc.argv)
			}
			if got := messages(res); !slices.Equal(got, tc.want) {
				t.Errorf("messages %q, want %q", got, tc.want)
			}
			if res.Facts["truncated"] != tc.trunc {
				t.Errorf("truncated %v, want %v", res.Facts["truncated"], tc.trunc)
			}
			if len(res.Output) > 0 && strings.Count(res.Output, "\n") != len(tc.want)-1 {
				t.Errorf("output %q", res.Output)
			}
		})
	}
	res, _ := f.run(t, "logs", api.Params{"unit": "web.service", "lines": "1"})
	e := res.Facts["entries"].([]any)[0].(map[string]any)
	if e["time"] != t0.Add(9*time.Minute).Format(time.RFC3339Nano) || e["priority"] != "err" || e["pid"] != "42" || e["identifier"] != "web" {
		t.Errorf("entry facts %v", e)
	}
	if res.Output != "2026-11-24T08:09:00Z web[42]: request 9" {
		t.Errorf("output %q", res.Output)
	}
	if _, err := f.run(t, "logs", api.Params{"unit": "fail.service"}); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("a failing journalctl: %v", err)
	}
	for _, bad := range []api.Params{{"since": "--help"}, {"boot": "x"}, {"priority": "loud"}, {"lines": "0"}, {"unit": "-x"}} {
		if _, err := f.run(t, "logs", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestBootsAndDiskUsage(t *testing.T) {
	f := newFake(t)
	for _, text := range []bool{false, true} {
		if text {
			t.Setenv("FAKE_JOURNALCTL_TEXT", "1")
		}
		res, err := f.run(t, "boots", nil)
		if err != nil {
			t.Fatal(err)
		}
		boots := res.Facts["boots"].([]any)
		if first := boots[0].(map[string]any)["first_entry"]; first != map[bool]string{false: "2026-11-23T08:00:00Z", true: "Mon 2026-11-23 08:00:00 UTC"}[text] {
			t.Errorf("text %v: first entry %v", text, first)
		}
		if len(boots) != 2 || boots[1].(map[string]any)["boot_id"] != "fedcba9876543210fedcba9876543210" || boots[0].(map[string]any)["index"] != -1 {
			t.Errorf("text %v: boots %v", text, boots)
		}
	}
	boots, err := parseBoots(" -1 0123456789abcdef0123456789abcdef Mon 2026-11-23 08:00:00 UTC—Mon 2026-11-23 20:00:00 UTC\n")
	if err != nil || len(boots) != 1 || boots[0].Index != -1 || boots[0].First != "Mon 2026-11-23 08:00:00 UTC" || boots[0].Last != "Mon 2026-11-23 20:00:00 UTC" {
		t.Errorf("boots with a dash: %+v %v", boots, err)
	}
	if _, err := parseBoots("something else"); err == nil {
		t.Errorf("unknown --list-boots output accepted")
	}
	res, err := f.run(t, "disk_usage", nil)
	if err != nil || res.Facts["bytes"] != uint64(24<<20) {
		t.Errorf("disk usage: %v %v", res.Facts, err)
	}
	for in, want := range map[string]uint64{
		"Archived and active journals take up 8.0K in the file system.":    8 << 10,
		"Archived and active journals take up 1.5G in the file system.":    3 << 29,
		"Archived and active journals take up 512B in the file system.":    512,
		"Journals take up 0B on disk.":                                     0,
		"Archived and active journals take up 24.0MiB in the file system.": 24 << 20,
	} {
		got, err := parseDiskUsage(in)
		if err != nil && want != 0 || err == nil && got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
}
