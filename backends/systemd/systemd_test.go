package systemd

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

// fake is a fake systemctl with its state directory.
type fake struct {
	dir string
	b   *Backend
}

func newFake(t *testing.T, units map[string]string) *fake {
	t.Helper()
	bin := testbin.Build(t, "testdata/fakesystemctl")
	dir := t.TempDir()
	t.Setenv("FAKE_SYSTEMCTL_DIR", dir)
	if err := os.Mkdir(filepath.Join(dir, "units"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fake{dir: dir, b: New(Options{SystemctlPath: bin})}
	for u, st := range units {
		f.set(t, u, st)
	}
	return f
}

func (f *fake) set(t *testing.T, unit, state string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "units", unit), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fake) state(t *testing.T, unit string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "units", unit))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// calls returns every argv systemctl saw.
func (f *fake) calls(t *testing.T) [][]string {
	t.Helper()
	file, err := os.Open(filepath.Join(f.dir, "argv.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
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

// changes returns the argv of calls other than show.
func (f *fake) changes(t *testing.T) [][]string {
	var out [][]string
	for _, c := range f.calls(t) {
		if !slices.Contains(c, "show") {
			out = append(out, c)
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	f := newFake(t, map[string]string{"web.service": "inactive dead disabled", "block.service": "inactive dead disabled"})
	samples := map[string]api.Params{}
	for _, a := range f.b.Schema().Actions {
		samples[a.Name] = api.Params{"unit": "web.service"}
	}
	conformance.Run(t, conformance.Suite{
		Backend: f.b,
		Samples: samples,
		Blocking: func(*testing.T) *backends.Request {
			return &backends.Request{Action: "start", Params: api.Params{"unit": "block.service"}}
		},
	})
}

func TestActions(t *testing.T) {
	for _, tc := range []struct {
		action, before string
		check          bool
		wantChanged    bool
		wantVerb       string // the state-changing verb systemctl must see, "" for none
		after          string
	}{
		{"start", "inactive dead disabled", false, true, "start", "active running disabled"},
		{"start", "active running disabled", false, false, "", "active running disabled"},
		{"start", "inactive dead disabled", true, true, "", "inactive dead disabled"},
		{"start", "failed failed enabled", false, true, "start", "active running enabled"},
		{"stop", "active running enabled", false, true, "stop", "inactive dead enabled"},
		{"stop", "inactive dead enabled", false, false, "", "inactive dead enabled"},
		{"stop", "failed failed enabled", true, false, "", "failed failed enabled"},
		{"restart", "active running enabled", false, true, "restart", "active running enabled"},
		{"restart", "inactive dead enabled", true, true, "", "inactive dead enabled"},
		{"reload", "active running enabled", false, true, "reload", "active running enabled"},
		{"enable", "inactive dead disabled", false, true, "enable", "inactive dead enabled"},
		{"enable", "inactive dead enabled", false, false, "", "inactive dead enabled"},
		{"enable", "inactive dead static", false, false, "", "inactive dead static"},
		{"enable", "inactive dead disabled", true, true, "", "inactive dead disabled"},
		{"disable", "inactive dead enabled", false, true, "disable", "inactive dead disabled"},
		{"disable", "inactive dead disabled", false, false, "", "inactive dead disabled"},
	} {
		name := tc.action + "/" + strings.ReplaceAll(tc.before, " ", "_")
		if tc.check {
			name += "/check"
		}
		t.Run(name, func(t *testing.T) {
			f := newFake(t, map[string]string{"web.service": tc.before})
			res, err := f.b.Run(context.Background(), &backends.Request{Action: tc.action, CheckMode: tc.check,
				Params: api.Params{"unit": "web.service"}})
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if res.Changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v (%s)", res.Changed, tc.wantChanged, res.Output)
			}
			var want [][]string
			if tc.wantVerb != "" {
				want = [][]string{{"--no-ask-password", tc.wantVerb, "--", "web.service"}}
			}
			if got := f.changes(t); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("systemctl calls = %q, want %q", got, want)
			}
			if got := f.state(t, "web.service"); got != tc.after {
				t.Errorf("state after = %q, want %q", got, tc.after)
			}
			if st := strings.Fields(tc.after); !tc.check && (res.Facts["active_state"] != st[0] || res.Facts["enabled"] != st[2]) {
				t.Errorf("facts = %v, want state %q", res.Facts, tc.after)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	f := newFake(t, map[string]string{"web.service": "active running enabled"})
	res, err := f.b.Run(context.Background(), &backends.Request{Action: "status", Params: api.Params{"unit": "web.service"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"unit": "web.service", "load_state": "loaded", "active_state": "active", "sub_state": "running", "enabled": "enabled"}
	for k, v := range want {
		if res.Facts[k] != v {
			t.Errorf("facts[%s] = %v, want %v", k, res.Facts[k], v)
		}
	}
	if res.Changed {
		t.Errorf("status reported a change")
	}
	wantArgv := []string{"show", "--property=LoadState,ActiveState,SubState,UnitFileState", "--", "web.service"}
	if calls := f.calls(t); len(calls) != 1 || !slices.Equal(calls[0], wantArgv) {
		t.Errorf("argv = %q, want %q", calls, wantArgv)
	}
}

func TestErrors(t *testing.T) {
	f := newFake(t, map[string]string{"web.service": "inactive dead enabled"})
	for _, tc := range []struct{ action, unit, want string }{
		{"start", "missing.service", "not found"},
		{"status", "missing.service", "not found"},
		{"reload", "web.service", "cannot reload"},
	} {
		_, err := f.b.Run(context.Background(), &backends.Request{Action: tc.action, Params: api.Params{"unit": tc.unit}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err %v, want %q", tc.action, tc.unit, err, tc.want)
		}
	}
	if got := f.changes(t); len(got) != 0 {
		t.Errorf("failed actions still ran %q", got)
	}
}

func TestMissingSystemctl(t *testing.T) {
	b := New(Options{SystemctlPath: filepath.Join(t.TempDir(), "no-systemctl")})
	_, err := b.Run(context.Background(), &backends.Request{Action: "status", Params: api.Params{"unit": "web.service"}})
	if err == nil || !strings.Contains(err.Error(), "no-systemctl") {
		t.Errorf("err = %v, want one naming the missing binary", err)
	}
}
