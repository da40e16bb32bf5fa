package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

func newBackend(t *testing.T) *Backend {
	t.Helper()
	bin := testbin.Build(t, "testdata/processor")
	b, err := New(Options{Programs: map[string]ProgramSpec{
		"one":  {Path: bin, Args: []string{"-x", "a b"}},
		"dmn":  {Path: bin, Args: []string{"-daemon"}, Mode: Daemon},
		"slow": {Path: bin, Timeout: 500 * time.Millisecond},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func input(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type progressLog struct {
	mu    sync.Mutex
	calls []string
}

func (p *progressLog) report(pct int, msg string) {
	p.mu.Lock()
	p.calls = append(p.calls, fmt.Sprintf("%d %s", pct, msg))
	p.mu.Unlock()
}

func run(ctx context.Context, t *testing.T, b *Backend, program string, in map[string]any, p *progressLog) (*backends.Result, error) {
	t.Helper()
	if p == nil {
		p = &progressLog{}
	}
	r := backends.NewRegistry().MustRegister(b)
	return r.Run(ctx, "exec", &backends.Request{Action: "run", Params: api.Params{"program": program, "input": input(t, in)}, Progress: p.report})
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S …": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitDead(t *testing.T, pidfile string) {
	t.Helper()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(pidfile)
		if pid, _ = strconv.Atoi(string(b)); pid > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatalf("no child pid in %s", pidfile)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the killed program still runs: the process group was not killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	b := newBackend(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{"run": {"program": "one"}},
		Blocking: func(t *testing.T) *backends.Request {
			return &backends.Request{Action: "run", Params: api.Params{"program": "one", "input": input(t, map[string]any{"sleep": pidfile})}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			if param == "secret" {
				// Carried as a JSON string in the request line, never
				// an argument or a shell word: the program gets the
				// request (and answers its empty payload as unknown).
				r := backends.NewRegistry().MustRegister(b)
				if _, err := r.Run(context.Background(), "exec", &backends.Request{Action: "run", Params: api.Params{"program": "one", "secret": value}}); err != nil && !strings.Contains(err.Error(), "unknown payload") {
					t.Errorf("secret %q: %v", value, err)
				}
				return
			}
			if param != "input" {
				t.Errorf("%s.%s accepted %q", action, param, value)
				return
			}
			// Raw, it is no JSON document and never reaches the program.
			r := backends.NewRegistry().MustRegister(b)
			_, err := r.Run(context.Background(), "exec", &backends.Request{Action: "run", Params: api.Params{"program": "one", "input": value}})
			if err == nil || !strings.Contains(err.Error(), "not a JSON document") {
				t.Errorf("input %q: err = %v, want a refusal", value, err)
			}
			// As JSON data, it arrives byte for byte.
			for _, prog := range []string{"one", "dmn"} {
				res, err := run(context.Background(), t, b, prog, map[string]any{"echo": value}, nil)
				if err != nil || res.Facts["echo"] != value {
					t.Errorf("%s echo %q: %v %v", prog, value, err, res.Facts)
				}
			}
		},
	})
	if !t.Failed() {
		waitDead(t, pidfile)
	}
}

func TestSchemaEnum(t *testing.T) {
	a, _ := newBackend(t).Schema().Action("run")
	p, _ := a.Param("program")
	if want := []string{"dmn", "one", "slow"}; !slices.Equal(p.Enum, want) {
		t.Errorf("enum = %v, want %v", p.Enum, want)
	}
	if a.CheckMode || a.ReadOnly || a.Dangerous {
		t.Errorf("run flags = %+v", a)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, spec := range []map[string]ProgramSpec{
		{"x": {Path: "relative/bin"}},
		{"x": {Path: "/bin/true", Mode: "forever"}},
		{"bad name": {Path: "/bin/true"}},
		{"x": {Path: "/bin/true", Timeout: -time.Second}},
	} {
		if _, err := New(Options{Programs: spec}); err == nil {
			t.Errorf("New(%v) accepted", spec)
		}
	}
}

func TestProtocol(t *testing.T) {
	b := newBackend(t)
	for _, prog := range []string{"one", "dmn"} {
		for _, tc := range []struct {
			name     string
			in       map[string]any
			wantErr  []string // substrings of the error
			changed  bool
			output   string
			progress []string
		}{
			{name: "echo", in: map[string]any{"echo": "hi"}, changed: false},
			{name: "progress", in: map[string]any{"progress": true}, changed: true, progress: []string{"10 starting", "60 halfway"}},
			{name: "error", in: map[string]any{"fail": "boom"}, wantErr: []string{"boom", "about to fail"}},
			{name: "exit", in: map[string]any{"exit": 3}, wantErr: []string{"exited without a result", "exiting on purpose"}},
			{name: "noise", in: map[string]any{"noise": true}, changed: true, output: "quiet"},
		} {
			t.Run(prog+"/"+tc.name, func(t *testing.T) {
				p := &progressLog{}
				res, err := run(context.Background(), t, b, prog, tc.in, p)
				if tc.wantErr != nil {
					for _, w := range tc.wantErr {
						if err == nil || !strings.Contains(err.Error(), w) {
							t.Errorf("err = %v, want it to mention %q", err, w)
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if res.Changed != tc.changed {
					t.Errorf("changed = %v, want %v", res.Changed, tc.changed)
				}
				if tc.output != "" && res.Output != tc.output {
					t.Errorf("output = %q, want %q", res.Output, tc.output)
				}
				if !slices.Equal(p.calls, tc.progress) {
					t.Errorf("progress = %q, want %q", p.calls, tc.progress)
				}
			})
		}
	}
}

func TestArgvAndRequest(t *testing.T) {
	b := newBackend(t)
	res, err := run(context.Background(), t, b, "one", map[string]any{"echo": "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := res.Facts["argv"].([]any)
	if len(argv) != 2 || argv[0] != "-x" || argv[1] != "a b" {
		t.Errorf("argv = %v, want the registered args only", res.Facts["argv"])
	}
	if res.Facts["type"] != "one" {
		t.Errorf("type = %v", res.Facts["type"])
	}
}

// Oneshot programs start per request; a daemon serves every request from
// one process, one at a time, and is replaced after it dies.
func TestLifecycle(t *testing.T) {
	b := newBackend(t)
	pid := func(prog string) float64 {
		t.Helper()
		res, err := run(context.Background(), t, b, prog, map[string]any{"echo": 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Facts["pid"].(float64)
	}
	if pid("one") == pid("one") {
		t.Errorf("oneshot reused a process")
	}
	first := pid("dmn")
	var wg sync.WaitGroup
	pids := make(chan float64, 8)
	for range 8 {
		wg.Go(func() {
			res, err := run(context.Background(), t, b, "dmn", map[string]any{"echo": 1}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			pids <- res.Facts["pid"].(float64)
		})
	}
	wg.Wait()
	close(pids)
	for p := range pids {
		if p != first {
			t.Errorf("daemon request served by pid %v, want %v", p, first)
		}
	}
	if _, err := run(context.Background(), t, b, "dmn", map[string]any{"exit": 1}, nil); err == nil {
		t.Fatal("crash reported no error")
	}
	if second := pid("dmn"); second == first {
		t.Errorf("daemon not restarted after dying")
	}
}

func TestDaemonCancel(t *testing.T) {
	b := newBackend(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := run(ctx, t, b, "dmn", map[string]any{"sleep": pidfile}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	waitDead(t, pidfile)
	if res, err := run(context.Background(), t, b, "dmn", map[string]any{"echo": "after"}, nil); err != nil || res.Facts["echo"] != "after" {
		t.Errorf("daemon after cancel: %v %v", err, res)
	}
}

func TestTimeout(t *testing.T) {
	b := newBackend(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	_, err := run(context.Background(), t, b, "slow", map[string]any{"sleep": pidfile}, nil)
	if err == nil || !strings.Contains(err.Error(), "timed out after 500ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the program's timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s", d)
	}
	waitDead(t, pidfile)
}
