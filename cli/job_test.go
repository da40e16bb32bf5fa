package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// testLookup knows the flags of "job run" plus the global ones.
func testLookup(name string, short bool) (known, isBool bool) {
	if short {
		switch name {
		case "f", "o", "p":
			return true, false
		case "h":
			return true, true
		}
		return false, false
	}
	switch name {
	case "file", "target", "strategy", "timeout", "addr", "output", "token", "param":
		return true, false
	case "wait", "check", "help":
		return true, true
	}
	return false, false
}

func TestParseRunArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    runArgs
		wantErr string
	}{
		{
			name: "space separated param",
			args: []string{"--target", "all", "ping", "echo", "--message", "hi"},
			want: runArgs{flags: []string{"--target", "all"}, positional: []string{"ping", "echo"}, params: api.Params{"message": "hi"}},
		},
		{
			name: "equals param",
			args: []string{"ping", "echo", "--message=hello world", "--target=group:web"},
			want: runArgs{flags: []string{"--target=group:web"}, positional: []string{"ping", "echo"}, params: api.Params{"message": "hello world"}},
		},
		{
			name: "flags anywhere",
			args: []string{"apt", "--package", "curl", "install", "--wait", "--target", "node:web-1", "--check", "-o", "json", "--addr", "http://x:1"},
			want: runArgs{
				flags:      []string{"--wait", "--target", "node:web-1", "--check", "-o", "json", "--addr", "http://x:1"},
				positional: []string{"apt", "install"},
				params:     api.Params{"package": "curl"},
			},
		},
		{
			name: "valueless param before a flag is true",
			args: []string{"apt", "install", "--force", "--wait"},
			want: runArgs{flags: []string{"--wait"}, positional: []string{"apt", "install"}, params: api.Params{"force": "true"}},
		},
		{
			name: "valueless param at the end is true",
			args: []string{"apt", "install", "--force"},
			want: runArgs{positional: []string{"apt", "install"}, params: api.Params{"force": "true"}},
		},
		{
			name: "value may start with a single dash",
			args: []string{"b", "a", "--offset", "-5"},
			want: runArgs{positional: []string{"b", "a"}, params: api.Params{"offset": "-5"}},
		},
		{
			name: "value may start with dashes when given with =",
			args: []string{"b", "a", "--arg=--x"},
			want: runArgs{positional: []string{"b", "a"}, params: api.Params{"arg": "--x"}},
		},
		{
			name: "empty value",
			args: []string{"b", "a", "--message="},
			want: runArgs{positional: []string{"b", "a"}, params: api.Params{"message": ""}},
		},
		{
			name: "after -- flag names are params",
			args: []string{"--target", "all", "ping", "sleep", "--", "--timeout", "5s", "--wait", "x"},
			want: runArgs{flags: []string{"--target", "all"}, positional: []string{"ping", "sleep"}, params: api.Params{"timeout": "5s", "wait": "x"}},
		},
		{
			name: "shorthand with attached value",
			args: []string{"-fjob.yaml", "-ojson"},
			want: runArgs{flags: []string{"-fjob.yaml", "-ojson"}},
		},
		{
			name: "shorthand with separate value",
			args: []string{"-f", "job.yaml", "--wait"},
			want: runArgs{flags: []string{"-f", "job.yaml", "--wait"}},
		},
		{
			name: "bool flag with explicit value",
			args: []string{"--wait=false", "b", "a"},
			want: runArgs{flags: []string{"--wait=false"}, positional: []string{"b", "a"}},
		},
		{
			name: "help",
			args: []string{"-h"},
			want: runArgs{flags: []string{"-h"}},
		},
		{
			name: "known flag at the end without value is left for pflag to reject",
			args: []string{"b", "a", "--target"},
			want: runArgs{flags: []string{"--target"}, positional: []string{"b", "a"}},
		},
		{
			name:    "duplicate param",
			args:    []string{"b", "a", "--x", "1", "--x=2"},
			wantErr: "given twice",
		},
		{
			name:    "unknown shorthand",
			args:    []string{"b", "a", "-x", "1"},
			wantErr: "unknown shorthand",
		},
		{
			name:    "empty param name",
			args:    []string{"b", "a", "--=v"},
			wantErr: "empty parameter name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRunArgs(tt.args, testLookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				if exitCode(err) != ExitUsage {
					t.Fatalf("exit code %d, want %d", exitCode(err), ExitUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestBuildSpecTargets(t *testing.T) {
	tests := []struct {
		target  string
		want    api.Target
		wantErr bool
	}{
		{target: "all", want: api.Target{Scope: api.ScopeAll}},
		{target: "any", want: api.Target{Scope: api.ScopeAny}},
		{target: "group:web", want: api.Target{Scope: api.ScopeGroup, Value: "web"}},
		{target: "group:web.dev.us-east", want: api.Target{Scope: api.ScopeGroup, Value: "web.dev.us-east"}},
		{target: "node:web-01", want: api.Target{Scope: api.ScopeNode, Value: "web-01"}},
		{target: "", wantErr: true},
		{target: "all:x", wantErr: true},
		{target: "group:", wantErr: true},
		{target: "group:web..dev", wantErr: true},
		{target: "group:web*", wantErr: true},
		{target: "node:a.b", wantErr: true},
		{target: "node:", wantErr: true},
		{target: "cluster:x", wantErr: true},
		{target: "GROUP:web", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			o := &runOptions{target: tt.target}
			ra := runArgs{positional: []string{"ping", "echo"}, params: api.Params{"message": "hi"}}
			spec, err := buildSpec(o, ra, func(name string) bool { return name == "target" })
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want an error, got spec %+v", spec)
				}
				if exitCode(err) != ExitUsage {
					t.Fatalf("exit code %d, want %d (%v)", exitCode(err), ExitUsage, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.Target != tt.want {
				t.Fatalf("target %+v, want %+v", spec.Target, tt.want)
			}
			if len(spec.Tasks) != 1 || spec.Tasks[0].Backend != "ping" || spec.Tasks[0].Params["message"] != "hi" {
				t.Fatalf("tasks %+v", spec.Tasks)
			}
		})
	}
}

func TestBuildSpecFileOverrides(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte("target: {scope: group, value: web}\nstrategy: continue\ntasks:\n  - backend: ping\n    action: echo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags not given leave the file alone.
	spec, err := buildSpec(&runOptions{file: file}, runArgs{}, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if spec.Target.String() != "group:web" || spec.Strategy != api.StrategyContinue {
		t.Fatalf("spec %+v", spec)
	}
	// Given flags override it.
	o := &runOptions{file: file, target: "node:n1", strategy: "fail-fast", timeout: "5m", check: true, maxConcurrency: "10%", maxErrors: "1"}
	spec, err = buildSpec(o, runArgs{}, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if spec.Target.String() != "node:n1" || spec.Strategy != api.StrategyFailFast || spec.Timeout != "5m" || !spec.CheckMode {
		t.Fatalf("spec %+v", spec)
	}
	if spec.MaxConcurrency.String() != "10%" || spec.MaxErrors.String() != "1" {
		t.Fatalf("limits %v %v, want 10%% and 1", spec.MaxConcurrency, spec.MaxErrors)
	}
	// Bad overrides and mixing a file with an inline task are rejected.
	for _, tc := range []struct {
		o  *runOptions
		ra runArgs
	}{
		{&runOptions{file: file, timeout: "soon"}, runArgs{}},
		{&runOptions{file: file, strategy: "yolo"}, runArgs{}},
		{&runOptions{file: file, maxConcurrency: "lots"}, runArgs{}},
		{&runOptions{file: file, maxErrors: "-1"}, runArgs{}},
		{&runOptions{file: file}, runArgs{positional: []string{"ping", "echo"}}},
		{&runOptions{file: file}, runArgs{params: api.Params{"a": "b"}}},
		{&runOptions{file: filepath.Join(dir, "missing.yaml")}, runArgs{}},
	} {
		if _, err := buildSpec(tc.o, tc.ra, func(string) bool { return true }); exitCode(err) != ExitUsage {
			t.Errorf("%+v %+v: err %v, want a usage error", tc.o, tc.ra, err)
		}
	}
}

// fakeController is a minimal controller API: it accepts jobs and reports
// them finished with the status the test chose.
type fakeController struct {
	t        *testing.T
	final    api.JobStatus
	mu       sync.Mutex
	received []api.JobSpec
}

func (f *fakeController) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	job := func(status api.JobStatus) api.Job {
		now := time.Now()
		j := api.Job{ID: "job-1", Target: api.Target{Scope: api.ScopeAll}, Status: status, CreatedAt: now.Add(-time.Second), UpdatedAt: now,
			Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}, Expected: []string{"n1", "n2"}}
		if status.Terminal() {
			j.Results = api.JobResults{0: {
				"n1": {Status: api.StepSuccess, Output: "hi", Duration: api.Duration(time.Millisecond)},
				"n2": {Status: api.StepFailed, Error: "boom\nsecond line", Attempts: 2},
			}}
		}
		return j
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/job":
		var spec api.JobSpec
		if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
			f.t.Errorf("decode: %v", err)
		}
		f.mu.Lock()
		f.received = append(f.received, spec)
		f.mu.Unlock()
		if spec.Tasks[0].Backend == "nope" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "tasks[0].backend: no online node has backend \"nope\""})
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(job(api.JobPending))
	case r.Method == http.MethodGet && r.URL.Path == "/job/job-1":
		_ = json.NewEncoder(w).Encode(job(f.final))
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "not found"})
	}
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), "test", args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestJobRunAgainstController(t *testing.T) {
	fc := &fakeController{t: t, final: api.JobCompleted}
	srv := httptest.NewServer(fc)
	defer srv.Close()

	code, out, errOut := runCLI(t, "job", "run", "--addr", srv.URL, "--target", "group:web", "ping", "echo", "--message", "hi")
	if code != ExitOK || strings.TrimSpace(out) != "job-1" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	got := fc.received[0]
	if got.Target.String() != "group:web" || got.Tasks[0].Params["message"] != "hi" {
		t.Fatalf("controller received %+v", got)
	}

	code, out, errOut = runCLI(t, "--addr", srv.URL, "job", "run", "--target", "all", "ping", "echo", "--wait")
	if code != ExitOK {
		t.Fatalf("completed job: code %d err %q", code, errOut)
	}
	for _, want := range []string{"completed", "n1", "success", "hi", "n2", "failed (2 attempts)", "error: boom…"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	fc.final = api.JobPartialFailure
	code, out, errOut = runCLI(t, "job", "run", "--target", "all", "ping", "echo", "--wait", "-o", "json", "--addr", srv.URL)
	if code != ExitFailed {
		t.Fatalf("partial failure: code %d err %q", code, errOut)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Status != api.JobPartialFailure {
		t.Fatalf("json output %q: %v", out, err)
	}
	if !strings.Contains(errOut, "partial_failure") {
		t.Fatalf("stderr %q", errOut)
	}

	code, _, errOut = runCLI(t, "job", "run", "--addr", srv.URL, "--target", "all", "nope", "x")
	if code != ExitUsage || !strings.Contains(errOut, "no online node has backend") {
		t.Fatalf("rejected job: code %d err %q", code, errOut)
	}

	code, _, errOut = runCLI(t, "job", "status", "--addr", srv.URL, "job-2")
	if code != ExitFailed || !strings.Contains(errOut, "not found") {
		t.Fatalf("missing job: code %d err %q", code, errOut)
	}
}

func TestUnreachableController(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	code, _, errOut := runCLI(t, "--addr", addr, "node", "list")
	if code != ExitFailed || !strings.HasPrefix(errOut, "error: cannot reach the GRID controller") {
		t.Fatalf("code %d err %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"jobb"},
		{"node", "list", "--bogus"},
		{"job", "status"},
		{"job", "run"},
		{"job", "run", "ping", "echo"},
		{"job", "run", "--target", "all", "ping"},
		{"job", "run", "--target", "all", "ping", "echo", "-z"},
		{"job", "run", "--target", "all", "ping", "echo", "--param", "novalue"},
		{"job", "run", "--target", "all", "ping", "echo", "--timeout", "-1s"},
		{"job", "run", "--target", "all", "ping", "echo", "--strategy", "maybe"},
		{"job", "run", "--target", "all", "ping", "echo", "--bad.name", "x"},
		{"-o", "yaml", "version"},
	} {
		if code, _, errOut := runCLI(t, args...); code != ExitUsage || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("%q: code %d, stderr %q", args, code, errOut)
		}
	}
}

func TestParamFlagAndHelp(t *testing.T) {
	fc := &fakeController{t: t, final: api.JobCompleted}
	srv := httptest.NewServer(fc)
	defer srv.Close()
	code, _, errOut := runCLI(t, "job", "run", "--addr", srv.URL, "--target", "all", "ping", "sleep", "-p", "timeout=3s", "--duration", "1s")
	if code != ExitOK {
		t.Fatalf("code %d err %q", code, errOut)
	}
	if p := fc.received[0].Tasks[0].Params; p["timeout"] != "3s" || p["duration"] != "1s" {
		t.Fatalf("params %v", p)
	}
	code, out, _ := runCLI(t, "job", "run", "--help")
	if code != ExitOK || !strings.Contains(out, "--PARAM VALUE") {
		t.Fatalf("help: code %d out %q", code, out)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version", "-o", "json")
	var v versionInfo
	if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.Version != "test" {
		t.Fatalf("code %d out %q", code, out)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&api.Error{StatusCode: 400}, ExitUsage},
		{&api.Error{StatusCode: 413}, ExitUsage},
		{&api.Error{StatusCode: 429}, ExitFailed},
		{&api.Error{StatusCode: 500}, ExitFailed},
		{&api.UnreachableError{Address: "x", Err: errors.New("refused")}, ExitFailed},
		{&api.ValidationError{Field: "tasks", Msg: "bad"}, ExitUsage},
		{errors.New("other"), ExitFailed},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
