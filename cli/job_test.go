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
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
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
		{target: "site:paris", want: api.Target{Scope: api.ScopeSite, Value: "paris"}},
		{target: "group:web@paris", want: api.Target{Scope: api.ScopeGroup, Value: "web", Site: "paris"}},
		{target: "node:web-01@paris", want: api.Target{Scope: api.ScopeNode, Value: "web-01", Site: "paris"}},
		{target: "any@paris", want: api.Target{Scope: api.ScopeAny, Site: "paris"}},
		{target: "all@paris", want: api.Target{Scope: api.ScopeSite, Value: "paris"}},
		{target: "site:paris@lyon", wantErr: true},
		{target: "group:web@pa.ris", wantErr: true},
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

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), "test", args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestJobRunAgainstAFleet drives grid job run and status against a real
// controller and two agents: what the CLI sends is what the controller
// stores, and the tables, JSON and exit codes follow the real results.
func TestJobRunAgainstAFleet(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	conn := []string{"--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile()}
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, conn...)...)
	}
	ctx := context.Background()

	code, out, errOut := grid("job", "run", "--target", "group:web", "ping", "echo", "--message", "hi")
	id := strings.TrimSpace(out)
	if code != ExitOK || !strings.HasPrefix(id, "job-") {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	got, err := f.Client().GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Target.String() != "group:web" || got.Tasks[0].Params["message"] != "hi" {
		t.Fatalf("controller stored %+v", got)
	}

	code, out, errOut = grid("job", "run", "--target", "all", "ping", "echo", "--message", "hello", "--wait")
	if code != ExitOK {
		t.Fatalf("completed job: code %d err %q", code, errOut)
	}
	for _, want := range []string{"completed", "node-1", "node-2", "success", "hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	// A step that fails everywhere, tried twice, with a two-line error.
	file := filepath.Join(t.TempDir(), "fail.yaml")
	if err := os.WriteFile(file, []byte(`target: {scope: all}
strategy: continue
tasks:
  - {backend: ping, action: echo}
  - {backend: test, action: fail, max_retries: 1, params: {message: "boom\nsecond line"}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = grid("job", "run", "-f", file, "--wait")
	if code != ExitFailed {
		t.Fatalf("failing job: code %d out %q err %q", code, out, errOut)
	}
	for _, want := range []string{"failed (2 attempts)", "error: boom…"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = grid("job", "run", "-f", file, "--wait", "-o", "json")
	var j api.Job
	if err := json.Unmarshal([]byte(out), &j); code != ExitFailed || err != nil || j.Status == api.JobCompleted {
		t.Fatalf("json: code %d out %q err %q (%v)", code, out, errOut, err)
	}
	if r := j.Results.Node(1, "node-2"); r == nil || r.Status != api.StepFailed || r.Attempts != 2 || r.Error != "boom\nsecond line" {
		t.Fatalf("json results of step 1 on node-2: %+v", r)
	}
	if !strings.Contains(errOut, string(j.Status)) {
		t.Fatalf("stderr %q does not name the status %s", errOut, j.Status)
	}

	// The controller's refusal is a usage error that names what is wrong.
	code, _, errOut = grid("job", "run", "--target", "all", "nope", "x")
	if code != ExitUsage || !strings.Contains(errOut, `"nope"`) {
		t.Fatalf("rejected job: code %d err %q", code, errOut)
	}
	code, _, errOut = grid("job", "status", "job-does-not-exist")
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

// TestParamFlagAndHelp: a parameter given as -p NAME=VALUE and one given
// as --NAME VALUE both reach the controller.
func TestParamFlagAndHelp(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	code, out, errOut := runCLI(t, "job", "run", "--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile(),
		"--target", "all", "ping", "sleep", "-p", "duration=1s", "--timeout", "30s")
	if code != ExitOK {
		t.Fatalf("code %d err %q", code, errOut)
	}
	j, err := f.Client().GetJob(context.Background(), strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	if p := j.Tasks[0].Params; p["duration"] != "1s" || j.Timeout != "30s" {
		t.Fatalf("params %v, timeout %q", p, j.Timeout)
	}
	code, out, errOut = runCLI(t, "job", "run", "--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile(),
		"--target", "all", "ping", "echo", "--message", "by-flag")
	if code != ExitOK {
		t.Fatalf("code %d err %q", code, errOut)
	}
	if j, err = f.Client().GetJob(context.Background(), strings.TrimSpace(out)); err != nil || j.Tasks[0].Params["message"] != "by-flag" {
		t.Fatalf("job %+v: %v", j, err)
	}
	code, out, _ = runCLI(t, "job", "run", "--help")
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
