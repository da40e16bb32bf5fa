package pkg

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

var (
	repoOnce sync.Once
	repoDir  string
	repoErr  error
	tmpRoot  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		_ = os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// needDnf skips a test unless host tests are asked for (it builds RPMs and
// runs dnf transactions: tens of seconds) and the host has the programs
// the dnf path runs.
func needDnf(t *testing.T) {
	t.Helper()
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("dnf test: set GRID_HOST_TESTS=1 (or run make host-test) to install RPMs with dnf into a throwaway --installroot")
	}
	for _, p := range []string{"dnf", "rpm", "createrepo_c", "go"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("dnf tests need %s on PATH (on Debian: apt-get install dnf rpm createrepo-c dnf-plugins-core)", p)
		}
	}
}

// rpmRepo builds, once per test binary, a local RPM repository holding
// gridtest-hello 1.0.0 and 2.0.0 (made with nfpm, the packager the
// project's own .rpm comes from) and returns its directory.
func rpmRepo(t *testing.T) string {
	t.Helper()
	repoOnce.Do(func() {
		tmpRoot, repoErr = os.MkdirTemp("", "grid-pkg-test-")
		if repoErr != nil {
			return
		}
		repoDir = filepath.Join(tmpRoot, "repo")
		payload := filepath.Join(tmpRoot, "hello.txt")
		if repoErr = os.WriteFile(payload, []byte("hello\n"), 0o644); repoErr != nil {
			return
		}
		if repoErr = os.Mkdir(repoDir, 0o755); repoErr != nil {
			return
		}
		for _, v := range []string{"1.0.0", "2.0.0"} {
			conf := filepath.Join(tmpRoot, "nfpm-"+v+".yaml")
			y := fmt.Sprintf("name: gridtest-hello\narch: noarch\nplatform: linux\nversion: %s\nrelease: 1\n"+
				"maintainer: GRID tests <tests@example.com>\ndescription: GRID package backend test package\nlicense: MIT\n"+
				"contents:\n  - src: %s\n    dst: /opt/gridtest/hello.txt\n", v, payload)
			if repoErr = os.WriteFile(conf, []byte(y), 0o644); repoErr != nil {
				return
			}
			cmd := exec.Command("go", "tool", "nfpm", "pkg", "--packager", "rpm", "--config", conf, "--target", repoDir+"/")
			if out, err := cmd.CombinedOutput(); err != nil {
				repoErr = fmt.Errorf("nfpm %s: %w\n%s", v, err, out)
				return
			}
		}
		if out, err := exec.Command("createrepo_c", "-q", repoDir).CombinedOutput(); err != nil {
			repoErr = fmt.Errorf("createrepo_c: %w\n%s", err, out)
		}
	})
	if repoErr != nil {
		t.Fatal(repoErr)
	}
	return repoDir
}

// dnfRoot makes an empty system image for dnf --installroot with its own
// dnf.conf (the host's repositories and plugins left out), the repository
// at baseurl, and the versionlock plugin enabled unless noLock.
func dnfRoot(t *testing.T, baseurl string, noLock bool) Options {
	t.Helper()
	root := t.TempDir()
	etc := filepath.Join(root, "etc", "dnf")
	for _, d := range []string{filepath.Join(etc, "plugins"), filepath.Join(root, "etc", "yum.repos.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf("[main]\ngpgcheck=0\nreposdir=%s\npluginconfpath=%s\n",
		filepath.Join(root, "etc", "yum.repos.d"), filepath.Join(etc, "plugins"))
	if noLock {
		// No plugin directory at all: dnf loads no plugin.
		conf += "pluginpath=" + filepath.Join(root, "no-plugins") + "\n"
	}
	files := map[string]string{
		filepath.Join(etc, "dnf.conf"):                      conf,
		filepath.Join(root, "etc", "yum.repos.d", "t.repo"): "[gridtest]\nname=gridtest\nbaseurl=" + baseurl + "\ngpgcheck=0\nmetadata_expire=0\n",
		filepath.Join(etc, "plugins", "versionlock.conf"):   "[main]\nenabled=1\nlocklist=" + filepath.Join(etc, "plugins", "versionlock.list") + "\n",
		filepath.Join(etc, "plugins", "versionlock.list"):   "",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Options{Manager: "dnf", DnfInstallRoot: root, DnfConfig: filepath.Join(etc, "dnf.conf")}
}

func registry(t *testing.T, b *Backend) *backends.Registry {
	t.Helper()
	r := backends.NewRegistry()
	allow, err := backends.ParseAllowlist([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetAllowlist(allow)
	if err := r.Register(b); err != nil {
		t.Fatal(err)
	}
	return r
}

func samples() map[string]api.Params {
	return map[string]api.Params{
		"install": {"name": "gridtest-hello", "version": "1.0.0"},
		"remove":  {"name": "gridtest-hello"},
		"info":    {"name": "gridtest-hello"},
		"search":  {"query": "hello"},
		"hold":    {"name": "gridtest-hello"},
		"unhold":  {"name": "gridtest-hello"},
	}
}

func TestConformance(t *testing.T) {
	suite := conformance.Suite{Samples: samples()}
	if _, err := exec.LookPath("dnf"); err == nil {
		// A repository that never answers: dnf blocks reading its
		// metadata until the task is cancelled.
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		t.Cleanup(hang.Close)
		suite.Backend = New(dnfRoot(t, hang.URL, false))
		suite.Blocking = func(*testing.T) *backends.Request {
			return &backends.Request{Action: "search", Params: api.Params{"query": "hello"}}
		}
	} else {
		// Without dnf the suite still checks the schema and params; no
		// action of the host's manager can be made to block here.
		suite.Backend = New(Options{})
	}
	conformance.Run(t, suite)
}

func TestSchemaPatterns(t *testing.T) {
	r := registry(t, New(Options{Manager: "dnf"}))
	for _, tc := range []struct {
		action string
		params api.Params
		ok     bool
	}{
		{"install", api.Params{"name": "nginx"}, true},
		{"install", api.Params{"name": "perl-Data-Dumper", "version": "2:2.183-1.fc39"}, true},
		{"install", api.Params{"name": "libc6:amd64", "version": "2.36-9+deb12u4"}, true},
		{"install", api.Params{"name": "python3_x.x86_64"}, true},
		{"install", api.Params{"name": "-y"}, false},
		{"install", api.Params{"name": "nginx", "version": "-1"}, false},
		{"install", api.Params{"name": "nginx", "version": "latest"}, false},
		{"install", api.Params{"name": "a b"}, false},
		{"install", api.Params{"name": "nginx*"}, false},
		{"list", api.Params{"filter": "ngi"}, true},
		{"list", api.Params{"filter": "--all"}, false},
		{"search", api.Params{"query": "*"}, false},
		{"upgrade", api.Params{}, true},
		{"list", api.Params{"limit": "0"}, false},
		{"list", api.Params{"limit": "100000"}, false},
		{"search", api.Params{"query": "lib", "limit": "20"}, true},
	} {
		_, err := r.Prepare("package", &backends.Request{Action: tc.action, Params: tc.params})
		if (err == nil) != tc.ok {
			t.Errorf("%s %v: err %v, want ok=%v", tc.action, tc.params, err, tc.ok)
		}
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		installed, want string
		ok              bool
	}{
		{"1.0.0-1", "1.0.0-1", true},
		{"1.0.0-1", "1.0.0", true},
		{"2:1.0.0-1", "1.0.0", true},
		{"2:1.0.0-1", "2:1.0.0-1", true},
		{"2:1.0.0-1", "1.0.0-1", true},
		{"1.0.0-1", "1.0.0-2", false},
		{"1.0.0-1", "1.0", false},
		{"1.0.0-1", "2.0.0", false},
	} {
		if got := matches(tc.installed, tc.want); got != tc.ok {
			t.Errorf("matches(%q, %q) = %v", tc.installed, tc.want, got)
		}
	}
}

func TestNoManager(t *testing.T) {
	b := New(Options{AptGetPath: "/nonexistent/apt-get", DnfPath: "/nonexistent/dnf"})
	if b.Manager() != "" {
		t.Fatalf("manager %q on a host without one", b.Manager())
	}
	_, err := registry(t, b).Run(context.Background(), "package", &backends.Request{Action: "list"})
	if !errors.Is(err, ErrNoManager) {
		t.Fatalf("list without a manager: %v", err)
	}
	if b := New(Options{Manager: "yum"}); b.Manager() != "" {
		t.Fatalf("unknown manager accepted")
	}
}

// errAny in a step accepts any error.
var errAny = errors.New("any error")

// step is one action of a scenario and what it must report.
type step struct {
	action  string
	params  api.Params
	check   bool
	changed bool
	version string // installed version of gridtest-hello afterwards; "-" for not installed
	errIs   error  // the run must fail with this
	facts   map[string]any
}

func runSteps(t *testing.T, b *Backend, steps []step) {
	t.Helper()
	r := registry(t, b)
	for i, s := range steps {
		name := fmt.Sprintf("%d %s %v check=%v", i, s.action, s.params, s.check)
		res, err := r.Run(context.Background(), "package", &backends.Request{Action: s.action, Params: s.params, CheckMode: s.check})
		if s.errIs != nil {
			if err == nil || (s.errIs != errAny && !errors.Is(err, s.errIs)) {
				t.Fatalf("%s: err %v, want %v", name, err, s.errIs)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, res.Output)
		}
		if res.Changed != s.changed {
			t.Fatalf("%s: changed %v, want %v\n%s", name, res.Changed, s.changed, res.Output)
		}
		for k, want := range s.facts {
			if got := fmt.Sprint(res.Facts[k]); got != fmt.Sprint(want) {
				t.Fatalf("%s: fact %s = %s, want %v (facts %v)", name, k, got, want, res.Facts)
			}
		}
		if s.version != "" {
			v, err := b.d.installed(context.Background(), "gridtest-hello")
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(s.version, "-"); v != want {
				t.Fatalf("%s: installed %q afterwards, want %q", name, v, want)
			}
		}
	}
}

// TestDnf drives real dnf and rpm against a local repository, installing
// into a throwaway --installroot so the host is untouched.
func TestDnf(t *testing.T) {
	needDnf(t)
	repo := rpmRepo(t)
	b := New(dnfRoot(t, "file://"+repo, false))
	hello := api.Params{"name": "gridtest-hello"}
	pin1 := api.Params{"name": "gridtest-hello", "version": "1.0.0"}
	runSteps(t, b, []step{
		{action: "info", params: hello, version: "-", facts: map[string]any{"installed": false, "candidate": "2.0.0-1", "manager": "dnf"}},
		{action: "install", params: hello, check: true, changed: true, version: "-", facts: map[string]any{"would_install": []string{"gridtest-hello-2.0.0-1"}}},
		{action: "install", params: hello, changed: true, version: "2.0.0-1"},
		{action: "install", params: hello, changed: false, version: "2.0.0-1"},
		{action: "install", params: hello, check: true, changed: false, version: "2.0.0-1"},
		// A pin below the installed version downgrades.
		{action: "install", params: pin1, check: true, changed: true, version: "2.0.0-1"},
		{action: "install", params: pin1, changed: true, version: "1.0.0-1"},
		{action: "install", params: pin1, changed: false, version: "1.0.0-1"},
		{action: "install", params: api.Params{"name": "gridtest-hello", "version": "9.9"}, check: true, errIs: errAny},
		{action: "list", params: api.Params{"filter": "gridtest"}, facts: map[string]any{"count": 1, "truncated": false, "packages": map[string]any{"gridtest-hello": "1.0.0-1"}}},
		{action: "list", params: api.Params{"filter": "nothing-like-it"}, facts: map[string]any{"count": 0}},
		{action: "search", params: api.Params{"query": "hello"}, facts: map[string]any{"count": 1, "packages": map[string]any{"gridtest-hello": "GRID package backend test package"}}},
		{action: "hold", params: hello, check: true, changed: true, facts: map[string]any{"held": true}},
		{action: "hold", params: hello, changed: true, facts: map[string]any{"held": true}},
		{action: "hold", params: hello, changed: false, facts: map[string]any{"held": true}},
		// Held: upgrades leave it.
		{action: "upgrade", params: hello, check: true, changed: false, version: "1.0.0-1"},
		{action: "upgrade", params: api.Params{}, changed: false, version: "1.0.0-1"},
		{action: "unhold", params: hello, changed: true, facts: map[string]any{"held": false}},
		{action: "unhold", params: hello, changed: false, facts: map[string]any{"held": false}},
		{action: "upgrade", params: hello, check: true, changed: true, version: "1.0.0-1", facts: map[string]any{"would_install": []string{"gridtest-hello-2.0.0-1"}}},
		{action: "upgrade", params: hello, changed: true, version: "2.0.0-1"},
		{action: "upgrade", params: api.Params{}, changed: false, version: "2.0.0-1"},
		{action: "remove", params: hello, check: true, changed: true, version: "2.0.0-1"},
		{action: "remove", params: hello, changed: true, version: "-"},
		{action: "remove", params: hello, changed: false, version: "-"},
		{action: "hold", params: hello, errIs: errAny},
	})
	if _, err := os.Stat(filepath.Join(b.d.(*dnfDriver).root, "opt", "gridtest", "hello.txt")); !os.IsNotExist(err) {
		t.Fatalf("package file left behind after remove: %v", err)
	}
}

// TestDnfWithoutVersionlock: a dnf without the plugin says hold is not
// supported here, and changes nothing.
func TestDnfWithoutVersionlock(t *testing.T) {
	needDnf(t)
	repo := rpmRepo(t)
	b := New(dnfRoot(t, "file://"+repo, true))
	runSteps(t, b, []step{
		{action: "install", params: api.Params{"name": "gridtest-hello"}, changed: true, version: "2.0.0-1"},
		{action: "hold", params: api.Params{"name": "gridtest-hello"}, errIs: ErrUnsupported},
		{action: "unhold", params: api.Params{"name": "gridtest-hello"}, check: true, errIs: ErrUnsupported},
	})
}

// TestAptReadOnly runs the apt driver against the host's own dpkg and apt
// lists, with actions that read or only simulate: nothing on the host
// changes.
func TestAptReadOnly(t *testing.T) {
	for _, p := range []string{"apt-get", "dpkg-query", "apt-cache", "apt-mark"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("apt driver tests need %s (a Debian or Ubuntu host)", p)
		}
	}
	b := New(Options{Manager: "apt"})
	d := b.d.(*aptDriver)
	v, err := d.installed(context.Background(), "dpkg")
	if err != nil || v == "" {
		t.Skipf("dpkg is not an installed package here (%q, %v)", v, err)
	}
	held, err := d.held(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(held, "dpkg") {
		t.Skip("dpkg is held on this host")
	}
	dpkg := api.Params{"name": "dpkg"}
	runApt := func(action string, params api.Params, check bool) *backends.Result {
		t.Helper()
		res, err := registry(t, b).Run(context.Background(), "package", &backends.Request{Action: action, Params: params, CheckMode: check})
		if err != nil {
			t.Fatalf("%s %v: %v", action, params, err)
		}
		return res
	}
	if res := runApt("install", dpkg, true); res.Changed || res.Facts["version"] != v || res.Facts["name"] != "dpkg" {
		t.Errorf("install of installed dpkg, check mode: changed %v facts %v", res.Changed, res.Facts)
	}
	info := runApt("info", dpkg, false)
	if info.Facts["version"] != v || info.Facts["manager"] != "apt" {
		t.Errorf("info dpkg: facts %v", info.Facts)
	}
	// Search reads apt's package lists, which a host (an image) may not
	// have; the candidate says whether it does.
	if info.Facts["candidate"] != "" {
		res := runApt("search", api.Params{"query": "dpkg", "limit": "2"}, false)
		if n := len(res.Facts["packages"].(map[string]any)); n != 2 || res.Facts["truncated"] != true {
			t.Errorf("search dpkg limit 2: %d packages, facts %v", n, res.Facts)
		}
	}
	res := runApt("list", api.Params{"filter": "dpkg"}, false)
	if !strings.Contains(res.Output, "dpkg "+v+"\n") {
		t.Errorf("list dpkg: %q lacks dpkg %s", res.Output, v)
	}
	for name := range res.Facts["packages"].(map[string]any) {
		if !strings.Contains(name, "dpkg") {
			t.Errorf("list filter dpkg returned %s", name)
		}
	}
	// Everything installed, cut at the limit.
	res = runApt("list", api.Params{"limit": "3"}, false)
	if n := len(res.Facts["packages"].(map[string]any)); n != 3 || res.Facts["truncated"] != true || res.Facts["count"].(int) <= 3 {
		t.Errorf("list limit 3: %d packages, facts count %v truncated %v", n, res.Facts["count"], res.Facts["truncated"])
	}
	if lines := strings.Count(res.Output, "\n"); lines != 3 {
		t.Errorf("list limit 3: %d lines of output", lines)
	}
	if res := runApt("hold", dpkg, true); !res.Changed || res.Facts["held"] != true {
		t.Errorf("hold check mode: changed %v facts %v", res.Changed, res.Facts)
	}
	if res := runApt("unhold", dpkg, true); res.Changed {
		t.Errorf("unhold of a package not held: changed")
	}
	after, err := d.held(context.Background())
	if err != nil || slices.Contains(after, "dpkg") {
		t.Fatalf("check mode held dpkg: %v %v", after, err)
	}
	// RPM-style names pass the package backend's schema but not Debian's.
	_, err = registry(t, b).Run(context.Background(), "package", &backends.Request{Action: "install", Params: api.Params{"name": "Perl_X"}, CheckMode: true})
	if !errors.Is(err, backends.ErrInvalidParams) {
		t.Errorf("install Perl_X on apt: %v, want ErrInvalidParams", err)
	}
}
