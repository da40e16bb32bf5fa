package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

func registry(t *testing.T) *backends.Registry {
	t.Helper()
	r := backends.NewRegistry().MustRegister(New(Options{}))
	allow, err := backends.ParseAllowlist([]string{"proc"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetAllowlist(allow)
	return r
}

func run(t *testing.T, action string, p api.Params) (*backends.Result, error) {
	t.Helper()
	return registry(t).Run(context.Background(), "proc", &backends.Request{Action: action, Params: p})
}

// sleeper starts a copy of sleep(1) under a name no other process has, so
// that finding and signalling by name touch only it; the test's end kills
// what is left.
func sleeper(t *testing.T, n int) (name string, cmds []*exec.Cmd) {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) on this host")
	}
	name = fmt.Sprintf("gsleep%d", os.Getpid()%100000)
	bin := filepath.Join(t.TempDir(), name)
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	for range n {
		c := exec.Command(bin, "300")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		cmds = append(cmds, c)
	}
	return name, cmds
}

func TestConformance(t *testing.T) {
	b := New(Options{})
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{"signal": {"pid": "999999999"}},
		Blocking: func(t *testing.T) *backends.Request {
			return &backends.Request{Action: "top", Params: api.Params{"interval": "50s"}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			// A name or pattern is only ever compared with /proc's
			// contents: here it matches nothing and says what it looked for.
			p := api.Params{param: value}
			if action == "signal" {
				p["signal"] = "USR1"
			}
			res, err := registry(t).Run(context.Background(), "proc", &backends.Request{Action: action, Params: p, CheckMode: true})
			switch {
			case action == "signal":
				if err == nil || res.Facts != nil {
					t.Errorf("signal to %q: %v %v", value, res.Facts, err)
				}
			case param == "pattern" && !compiles(value):
				if err == nil || !strings.Contains(err.Error(), "pattern") {
					t.Errorf("invalid pattern %q: %v", value, err)
				}
			case action == "find" && err == nil && res.Facts["match"] == param+" "+value:
			case action == "count" && res.Facts != nil && res.Facts["match"] == param+" "+value:
			default:
				t.Errorf("%s.%s %q: %v %v", action, param, value, res.Facts, err)
			}
		},
	})
}

func TestFindAndCount(t *testing.T) {
	name, cmds := sleeper(t, 2)
	pids := []int{cmds[0].Process.Pid, cmds[1].Process.Pid}
	slices.Sort(pids)
	res, err := run(t, "find", api.Params{"name": name})
	if err != nil || res.Facts["count"] != 2 {
		t.Fatalf("find %s: %v %v", name, res.Facts, err)
	}
	var found []int
	for _, f := range res.Facts["processes"].([]any) {
		m := f.(map[string]any)
		found = append(found, m["pid"].(int))
		if m["command"] != filepath.Join(filepath.Dir(cmds[0].Path), name)+" 300" {
			t.Errorf("command %v", m["command"])
		}
	}
	if !slices.Equal(found, pids) {
		t.Errorf("found %v, want %v", found, pids)
	}
	res, err = run(t, "find", api.Params{"pattern": regexp.QuoteMeta(name) + ` 300$`, "limit": "1"})
	if err != nil || res.Facts["count"] != 2 || res.Facts["truncated"] != true || len(res.Facts["processes"].([]any)) != 1 {
		t.Errorf("find by pattern, limit 1: %v %v", res.Facts, err)
	}
	for _, tc := range []struct {
		params api.Params
		ok     bool
	}{
		{api.Params{"name": name}, true},
		{api.Params{"name": name, "min": "2", "max": "2"}, true},
		{api.Params{"name": name, "min": "3"}, false},
		{api.Params{"name": name, "max": "1", "min": "0"}, false},
		{api.Params{"name": "no-such-proc"}, false},
		{api.Params{"name": "no-such-proc", "min": "0", "max": "0"}, true},
	} {
		res, err := run(t, "count", tc.params)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrOutOfRange)) {
			t.Errorf("count %v: %v %v", tc.params, res.Facts, err)
		}
	}
	for _, p := range []api.Params{{}, {"name": name, "pattern": "x"}, {"pattern": "("}} {
		if _, err := run(t, "find", p); err == nil {
			t.Errorf("find %v: no error", p)
		}
	}
}

func TestListAndTop(t *testing.T) {
	res, err := run(t, "list", api.Params{"limit": "9999"})
	if err != nil {
		t.Fatal(err)
	}
	var self map[string]any
	for _, f := range res.Facts["processes"].([]any) {
		if m := f.(map[string]any); m["pid"] == os.Getpid() {
			self = m
		}
	}
	if self == nil || self["ppid"] != os.Getppid() || self["uid"] != os.Getuid() {
		t.Errorf("this process in the list: %v", self)
	}
	// The default limit keeps the list (and its facts) short.
	res, err = run(t, "list", nil)
	if err != nil || len(res.Facts["processes"].([]any)) > 100 || (res.Facts["count"].(int) > 100) != res.Facts["truncated"] {
		t.Errorf("list with the default limit: %d processes of %v, truncated %v (%v)", len(res.Facts["processes"].([]any)), res.Facts["count"], res.Facts["truncated"], err)
	}
	// A busy child tops the CPU ranking: it spins while top samples.
	busy := exec.Command(os.Args[0], "-test.run=^TestSpin$")
	busy.Env = append(os.Environ(), "PROC_TEST_SPIN=1")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	res, err = run(t, "top", api.Params{"interval": "500ms", "limit": "50"})
	if err != nil {
		t.Fatal(err)
	}
	var spun float64 = -1
	for _, f := range res.Facts["processes"].([]any) {
		if m := f.(map[string]any); m["pid"] == busy.Process.Pid {
			spun = m["cpu_pct"].(float64)
		}
	}
	// On a loaded host the spinner may share its CPU; it still shows.
	if spun < 5 {
		t.Errorf("the spinning child is at %.1f%% CPU in the top 50 (-1: absent): %v", spun, res.Output)
	}
	res, err = run(t, "top", api.Params{"by": "memory", "limit": "5"})
	if err != nil {
		t.Fatal(err)
	}
	ps := res.Facts["processes"].([]any)
	for i := 1; i < len(ps); i++ {
		if ps[i-1].(map[string]any)["rss_bytes"].(uint64) < ps[i].(map[string]any)["rss_bytes"].(uint64) {
			t.Errorf("top by memory not in order: %v", res.Output)
		}
	}
	if _, err := run(t, "top", api.Params{"interval": "2m"}); err == nil {
		t.Errorf("interval 2m accepted")
	}
}

// TestSpin is the busy child of TestListAndTop.
func TestSpin(t *testing.T) {
	if os.Getenv("PROC_TEST_SPIN") != "1" {
		t.Skip("the busy child of TestListAndTop")
	}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
	}
}

func TestSignal(t *testing.T) {
	// Off by default: signal is dangerous.
	r := backends.NewRegistry().MustRegister(New(Options{}))
	if _, err := r.Run(context.Background(), "proc", &backends.Request{Action: "signal", Params: api.Params{"pid": "1"}}); !errors.Is(err, backends.ErrNotAllowed) {
		t.Errorf("signal without an allow list: %v", err)
	}
	name, cmds := sleeper(t, 2)
	// Check mode names the targets and sends nothing.
	res, err := registry(t).Run(context.Background(), "proc", &backends.Request{Action: "signal", Params: api.Params{"name": name}, CheckMode: true})
	if err != nil || !res.Changed || len(res.Facts["pids"].([]int)) != 2 {
		t.Fatalf("check mode: %v %v", res, err)
	}
	for _, c := range cmds {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("check mode signalled %d: %v", c.Process.Pid, err)
		}
	}
	// By pid: only that one.
	res, err = run(t, "signal", api.Params{"pid": strconv.Itoa(cmds[0].Process.Pid), "signal": "KILL"})
	if err != nil || !res.Changed {
		t.Fatalf("signal by pid: %v %v", res, err)
	}
	if st := waitSignal(t, cmds[0]); st != syscall.SIGKILL {
		t.Errorf("first sleeper ended by %v", st)
	}
	// By name: the rest.
	if _, err := run(t, "signal", api.Params{"name": name}); err != nil {
		t.Fatal(err)
	}
	if st := waitSignal(t, cmds[1]); st != syscall.SIGTERM {
		t.Errorf("second sleeper ended by %v", st)
	}
	for _, p := range []api.Params{{"pid": "1"}, {"pid": strconv.Itoa(os.Getpid())}, {}, {"name": "no-such-proc"}, {"pid": "999999999"}} {
		if res, err := run(t, "signal", p); err == nil {
			t.Errorf("signal %v: %v", p, res)
		}
	}
}

func compiles(re string) bool { _, err := regexp.Compile(re); return err == nil }

func waitSignal(t *testing.T, c *exec.Cmd) syscall.Signal {
	t.Helper()
	err := c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("wait: %v", err)
	}
	return ee.Sys().(syscall.WaitStatus).Signal()
}
