package apt

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
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

// fake is a fake apt-get and dpkg-query over a state directory.
type fake struct {
	dir string
	b   *Backend
}

type call struct {
	Prog     string   `json:"prog"`
	Argv     []string `json:"argv"`
	Frontend string   `json:"frontend"`
}

func newFake(t *testing.T, installed, avail map[string]string) *fake {
	t.Helper()
	bin := testbin.Build(t, "testdata/fakeapt")
	dir := t.TempDir()
	t.Setenv("FAKE_APT_DIR", dir)
	for _, d := range []string{"installed", "avail", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for sub, m := range map[string]map[string]string{"installed": installed, "avail": avail} {
		for p, v := range m {
			if err := os.WriteFile(filepath.Join(dir, sub, p), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One binary, two names: it picks its role from argv[0].
	for _, n := range []string{"apt-get", "dpkg-query"} {
		if err := os.Symlink(bin, filepath.Join(dir, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	return &fake{dir: dir, b: New(Options{
		AptGetPath:    filepath.Join(dir, "bin", "apt-get"),
		DpkgQueryPath: filepath.Join(dir, "bin", "dpkg-query"),
	})}
}

func (f *fake) calls(t *testing.T, prog string) []call {
	t.Helper()
	file, err := os.Open(filepath.Join(f.dir, "argv.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var out []call
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var c call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Prog == prog {
			out = append(out, c)
		}
	}
	return out
}

func (f *fake) installed(t *testing.T, pkg string) string {
	b, err := os.ReadFile(filepath.Join(f.dir, "installed", pkg))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConformance(t *testing.T) {
	f := newFake(t, nil, map[string]string{"curl": "8.0"})
	conformance.Run(t, conformance.Suite{
		Backend: f.b,
		Samples: map[string]api.Params{
			"install": {"package": "curl", "version": "8.0-1"},
			"remove":  {"package": "curl"},
		},
		Blocking: func(*testing.T) *backends.Request {
			return &backends.Request{Action: "install", Params: api.Params{"package": "block"}}
		},
	})
}

func TestAptArgv(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed map[string]string
		req       backends.Request
		changed   bool
		apt       []string // the apt-get argv, after the common options; nil: no call
		after     string   // installed version of the package afterwards
		version   string   // facts["version"]
	}{
		{"install", nil, backends.Request{Action: "install", Params: api.Params{"package": "curl"}},
			true, []string{"--no-remove", "install", "--", "curl"}, "8.0", "8.0"},
		{"install present", map[string]string{"curl": "7.0"}, backends.Request{Action: "install", Params: api.Params{"package": "curl"}},
			false, nil, "7.0", "7.0"},
		{"install version", map[string]string{"curl": "7.0"}, backends.Request{Action: "install", Params: api.Params{"package": "curl", "version": "1:7.5-2"}},
			true, []string{"--no-remove", "--allow-downgrades", "install", "--", "curl=1:7.5-2"}, "1:7.5-2", "1:7.5-2"},
		{"install same version", map[string]string{"curl": "7.0"}, backends.Request{Action: "install", Params: api.Params{"package": "curl", "version": "7.0"}},
			false, nil, "7.0", "7.0"},
		{"install check", nil, backends.Request{Action: "install", CheckMode: true, Params: api.Params{"package": "curl"}},
			true, []string{"-s", "--no-remove", "install", "--", "curl"}, "", ""},
		{"install check present", map[string]string{"curl": "7.0"}, backends.Request{Action: "install", CheckMode: true, Params: api.Params{"package": "curl"}},
			false, nil, "7.0", "7.0"},
		{"remove", map[string]string{"curl": "7.0"}, backends.Request{Action: "remove", Params: api.Params{"package": "curl", "purge": "false"}},
			true, []string{"remove", "--", "curl"}, "", ""},
		{"purge", map[string]string{"curl": "7.0"}, backends.Request{Action: "remove", Params: api.Params{"package": "curl", "purge": "true"}},
			true, []string{"purge", "--", "curl"}, "", ""},
		{"remove absent", nil, backends.Request{Action: "remove", Params: api.Params{"package": "curl"}},
			false, nil, "", ""},
		{"remove check", map[string]string{"curl": "7.0"}, backends.Request{Action: "remove", CheckMode: true, Params: api.Params{"package": "curl"}},
			true, []string{"-s", "remove", "--", "curl"}, "7.0", "7.0"},
		{"upgrade", map[string]string{"curl": "7.0"}, backends.Request{Action: "upgrade", Params: api.Params{"dist": "false"}},
			true, []string{"upgrade"}, "8.0", skip},
		{"upgrade check", map[string]string{"curl": "7.0"}, backends.Request{Action: "upgrade", CheckMode: true, Params: api.Params{"dist": "true"}},
			true, []string{"-s", "dist-upgrade"}, "7.0", skip},
		{"upgrade nothing", map[string]string{"curl": "8.0"}, backends.Request{Action: "upgrade"},
			false, []string{"upgrade"}, "8.0", skip},
		{"update", nil, backends.Request{Action: "update"}, true, []string{"update"}, "", skip},
		{"update check", nil, backends.Request{Action: "update", CheckMode: true}, true, nil, "", skip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.installed, map[string]string{"curl": "8.0"})
			req := tc.req
			req.Progress = func(int, string) {}
			res, err := f.b.Run(context.Background(), &req)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if res.Changed != tc.changed {
				t.Errorf("changed = %v, want %v\n%s", res.Changed, tc.changed, res.Output)
			}
			calls := f.calls(t, "apt-get")
			switch {
			case tc.apt == nil && len(calls) > 0:
				t.Errorf("apt-get ran: %q", calls[0].Argv)
			case tc.apt != nil && len(calls) != 1:
				t.Errorf("apt-get calls = %v, want one", calls)
			case tc.apt != nil:
				want := append(slices.Clone(common), tc.apt...)
				if !slices.Equal(calls[0].Argv, want) {
					t.Errorf("apt-get argv = %q\nwant %q", calls[0].Argv, want)
				}
				if calls[0].Frontend != "noninteractive" {
					t.Errorf("DEBIAN_FRONTEND = %q", calls[0].Frontend)
				}
			}
			if got := f.installed(t, "curl"); got != tc.after {
				t.Errorf("installed curl = %q, want %q", got, tc.after)
			}
			if tc.version != skip && res.Facts["version"] != tc.version {
				t.Errorf("facts = %v, want version %q", res.Facts, tc.version)
			}
			for _, c := range f.calls(t, "dpkg-query") {
				if want := []string{"-W", "-f", `${Status} ${Version}\n`, "--", "curl"}; !slices.Equal(c.Argv, want) {
					t.Errorf("dpkg-query argv = %q, want %q", c.Argv, want)
				}
			}
		})
	}
}

// skip marks a case whose facts carry no version.
const skip = "\x00skip"

func TestUnknownPackage(t *testing.T) {
	f := newFake(t, nil, nil)
	for _, check := range []bool{false, true} {
		_, err := f.b.Run(context.Background(), &backends.Request{Action: "install", CheckMode: check,
			Params: api.Params{"package": "nope"}, Progress: func(int, string) {}})
		if err == nil || !strings.Contains(err.Error(), "Unable to locate package nope") {
			t.Errorf("check=%v: err = %v, want apt-get's message", check, err)
		}
	}
}

func TestPatterns(t *testing.T) {
	s := New(Options{}).Schema()
	install, _ := s.Action("install")
	pkg, _ := install.Param("package")
	ver, _ := install.Param("version")
	for _, tc := range []struct {
		p    api.ParamSchema
		v    string
		good bool
	}{
		{pkg, "nginx", true}, {pkg, "libc6:amd64", true}, {pkg, "g++", true}, {pkg, "python3.11", true},
		{pkg, "x", false}, {pkg, "-y", false}, {pkg, "Nginx", false}, {pkg, "nginx curl", false}, {pkg, "a;b", false}, {pkg, "../x", false},
		{ver, "1.2.3", true}, {ver, "1:2.0~rc1-3+b2", true},
		{ver, "latest", false}, {ver, "-1", false}, {ver, "1 2", false}, {ver, "1$(x)", false},
	} {
		if err := tc.p.CheckValue(tc.v); (err == nil) != tc.good {
			t.Errorf("%s %q: err %v, want valid=%v", tc.p.Name, tc.v, err, tc.good)
		}
	}
}

func TestParse(t *testing.T) {
	if v := parseStatus("deinstall ok config-files 1.0\ninstall ok installed 2.0\n"); v != "2.0" {
		t.Errorf("parseStatus = %q", v)
	}
	if v := parseStatus("deinstall ok config-files 1.0\n"); v != "" {
		t.Errorf("config-files only: parseStatus = %q, want not installed", v)
	}
	if n := parseSummary("3 upgraded, 1 newly installed, 2 to remove and 7 not upgraded."); n != [4]int{3, 1, 2, 7} {
		t.Errorf("parseSummary = %v", n)
	}
}

// The real apt of this machine, in check mode only: simulation needs no
// network and changes nothing.
func TestRealAptCheckMode(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get is not installed on this machine")
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("dpkg-query is not installed on this machine")
	}
	b := New(Options{})
	r := backends.NewRegistry().MustRegister(b)
	// apt.remove is dangerous: off unless the allow list names it.
	allow, _ := backends.ParseAllowlist([]string{"apt"})
	r.SetAllowlist(allow)
	ctx := context.Background()

	// bash is Essential: installed on every Debian system.
	want, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "bash").Output()
	if err != nil {
		t.Fatalf("dpkg-query bash: %v", err)
	}
	res, err := r.Run(ctx, "apt", &backends.Request{Action: "install", CheckMode: true, Params: api.Params{"package": "bash"}})
	if err != nil {
		t.Fatalf("install bash (check): %v", err)
	}
	if res.Changed || res.Facts["version"] != string(want) || res.Facts["package"] != "bash" {
		t.Errorf("install bash (check): changed=%v facts=%v, want no change at version %s", res.Changed, res.Facts, want)
	}

	// apt itself refuses to remove an Essential package, even simulated.
	_, err = r.Run(ctx, "apt", &backends.Request{Action: "remove", CheckMode: true, Params: api.Params{"package": "bash"}})
	if err == nil || !strings.Contains(err.Error(), "Essential") {
		t.Errorf("remove bash (check): err = %v, want apt's refusal to remove an Essential package", err)
	}
	removable := ""
	for _, p := range []string{"less", "curl", "wget", "git", "make", "ca-certificates"} {
		if v, _ := b.Installed(ctx, p); v != "" {
			removable = p
			break
		}
	}
	if removable == "" {
		t.Logf("no removable package installed; skipping the simulated removal")
	} else {
		res, err = r.Run(ctx, "apt", &backends.Request{Action: "remove", CheckMode: true, Params: api.Params{"package": removable}})
		if err != nil {
			t.Fatalf("remove %s (check): %v", removable, err)
		}
		if !res.Changed || !slices.Contains(res.Facts["would_remove"].([]string), removable) {
			t.Errorf("remove %s (check): changed=%v facts=%v, want a simulated removal", removable, res.Changed, res.Facts)
		}
		if v, _ := b.Installed(ctx, removable); v == "" {
			t.Fatalf("%s was removed by a simulation", removable)
		}
	}

	if _, err := r.Run(ctx, "apt", &backends.Request{Action: "upgrade", CheckMode: true}); err != nil {
		t.Errorf("upgrade (check): %v", err)
	}

	_, err = r.Run(ctx, "apt", &backends.Request{Action: "install", CheckMode: true, Params: api.Params{"package": "grid-no-such-package"}})
	if err == nil {
		t.Errorf("install of an unknown package (check) succeeded")
	}

	// A package that is not installed: only decidable when the package
	// lists know it, which needs a past apt-get update.
	if v, _ := b.Installed(ctx, "hello"); v != "" {
		t.Logf("hello is installed; skipping the not-installed case")
		return
	}
	res, err = r.Run(ctx, "apt", &backends.Request{Action: "install", CheckMode: true, Params: api.Params{"package": "hello"}})
	if err != nil && strings.Contains(err.Error(), "Unable to locate") {
		t.Logf("package lists do not know hello (no apt-get update yet); skipping the not-installed case")
		return
	}
	if err != nil || !res.Changed || !slices.Contains(res.Facts["would_install"].([]string), "hello") {
		t.Errorf("install hello (check): %v %+v, want a simulated install", err, res)
	}
}
