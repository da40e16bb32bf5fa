package rke2

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

const (
	v1 = "v1.30.4+rke2r1"
	v2 = "v1.31.1+rke2r2"
)

// entry is one tarball member; a zero typ is a regular file.
type entry struct {
	name, body string
	mode       int64
	typ        byte
	link       string
}

func tarball(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: e.typ, Linkname: e.link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// release is a fake RKE2 release laid out as the real one is: the binary,
// the units, a share directory.
func release(t *testing.T, version string, extra ...entry) []byte {
	return tarball(t, append([]entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/rke2", body: "rke2 " + version, mode: 0o755},
		{name: "lib/systemd/system/rke2-server.service", body: "[Service]\nExecStart=/usr/local/bin/rke2 server\n"},
		{name: "lib/systemd/system/rke2-agent.service", body: "[Service]\nExecStart=/usr/local/bin/rke2 agent\n"},
		{name: "./share/rke2/rke2-cis-sysctl.conf", body: "vm.overcommit_memory=1\n"},
	}, extra...))
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// mirror serves releases under /mirror/<version>/ as an artifact mirror
// would, with a checksum file per release; sums overrides a published sum.
type mirror struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte // path → body
	requests []string          // RequestURIs, as sent
}

func newMirror(t *testing.T) *mirror {
	m := &mirror{files: map[string][]byte{}}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.requests = append(m.requests, r.RequestURI)
		body, ok := m.files[r.URL.Path]
		m.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if string(body) == "hang" {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(m.Close)
	return m
}

// publish serves a release tarball and a checksum file giving published
// (the tarball's real sum when empty) for it.
func (m *mirror) publish(version string, tgz []byte, published string) {
	if published == "" {
		published = sum(tgz)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files["/mirror/"+version+"/rke2.linux-amd64.tar.gz"] = tgz
	m.files["/mirror/"+version+"/sha256sum-amd64.txt"] = []byte(
		strings.Repeat("0", 64) + "  rke2-images.linux-amd64.tar.zst\n" +
			published + "  rke2.linux-amd64.tar.gz\n")
}

func (m *mirror) fetched(file string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.requests {
		if strings.HasSuffix(r, "/"+file) {
			n++
		}
	}
	return n
}

// fakeSystemctl is the systemd backend's test systemctl: a real program
// that logs its argv and keeps unit states in files.
type fakeSystemctl struct{ dir, bin string }

func newSystemctl(t *testing.T) *fakeSystemctl {
	t.Helper()
	f := &fakeSystemctl{dir: t.TempDir(), bin: testbin.Build(t, "../systemd/testdata/fakesystemctl")}
	t.Setenv("FAKE_SYSTEMCTL_DIR", f.dir)
	if err := os.Mkdir(filepath.Join(f.dir, "units"), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// load makes the fake know a unit, as systemd does once its file is on
// disk and daemon-reload ran.
func (f *fakeSystemctl) load(t *testing.T, unit, state string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "units", unit), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeSystemctl) calls(t *testing.T) [][]string {
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

func (f *fakeSystemctl) verbs(t *testing.T) []string {
	var v []string
	for _, c := range f.calls(t) {
		if !slices.Contains(c, "show") {
			v = append(v, strings.Join(c, " "))
		}
	}
	return v
}

func setup(t *testing.T) (*mirror, *fakeSystemctl, *Backend, *backends.Registry) {
	t.Helper()
	m := newMirror(t)
	sc := newSystemctl(t)
	b := New(Options{ArtifactURL: m.URL + "/mirror", InstallRoot: filepath.Join(t.TempDir(), "usr-local"), Arch: "amd64", SystemctlPath: sc.bin})
	r := backends.NewRegistry()
	allow, err := backends.ParseAllowlist([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetAllowlist(allow)
	if err := r.Register(b); err != nil {
		t.Fatal(err)
	}
	return m, sc, b, r
}

func run(t *testing.T, r *backends.Registry, action string, p api.Params, check bool) (*backends.Result, error) {
	t.Helper()
	return r.Run(context.Background(), "rke2", &backends.Request{Action: action, Params: p, CheckMode: check})
}

func mustRun(t *testing.T, r *backends.Registry, action string, p api.Params, check, changed bool) *backends.Result {
	t.Helper()
	res, err := run(t, r, action, p, check)
	if err != nil {
		t.Fatalf("%s %v check=%v: %v", action, p, check, err)
	}
	if res.Changed != changed {
		t.Fatalf("%s %v check=%v: changed %v, want %v\n%s", action, p, check, res.Changed, changed, res.Output)
	}
	return res
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConformance(t *testing.T) {
	m, _, b, _ := setup(t)
	m.mu.Lock()
	m.files["/mirror/"+v1+"/sha256sum-amd64.txt"] = []byte(strings.Repeat("a", 64) + "  rke2.linux-amd64.tar.gz\n")
	m.files["/mirror/"+v1+"/rke2.linux-amd64.tar.gz"] = []byte("hang")
	m.mu.Unlock()
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{"install": {"version": v1}},
		// The mirror never finishes sending the tarball.
		Blocking: func(*testing.T) *backends.Request {
			return &backends.Request{Action: "install", Params: api.Params{"version": v1}}
		},
	})
}

func TestInstallLifecycle(t *testing.T) {
	m, sc, b, r := setup(t)
	root := b.root
	m.publish(v1, release(t, v1, entry{name: "share/rke2/only-in-v1", body: "x"}), "")
	m.publish(v2, release(t, v2), "")
	ver := api.Params{"version": v1}

	res := mustRun(t, r, "install", ver, true, true)
	if res.Facts["version"] != v1 || res.Facts["installed"] != false {
		t.Errorf("check mode facts %v", res.Facts)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("check mode touched the install root: %v", err)
	}
	if n := m.fetched("rke2.linux-amd64.tar.gz"); n != 0 {
		t.Fatalf("check mode fetched the tarball %d times", n)
	}
	if res := mustRun(t, r, "status", api.Params{}, false, false); res.Facts["installed"] != false {
		t.Errorf("status before install: %v", res.Facts)
	}
	if _, err := run(t, r, "start", api.Params{}, false); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("start before install: %v", err)
	}

	res = mustRun(t, r, "install", ver, false, true)
	if res.Facts["sha256"] != sum(m.files["/mirror/"+v1+"/rke2.linux-amd64.tar.gz"]) || res.Facts["files"] != 5 {
		t.Errorf("install facts %v", res.Facts)
	}
	if got := readFile(t, filepath.Join(root, "bin", "rke2")); got != "rke2 "+v1 {
		t.Errorf("bin/rke2 = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "bin", "rke2")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/rke2 mode: %v %v", fi.Mode(), err)
	}
	if !strings.Contains(readFile(t, filepath.Join(root, "lib/systemd/system/rke2-server.service")), "rke2 server") {
		t.Errorf("unit not installed")
	}
	if v := sc.verbs(t); !slices.Equal(v, []string{"--no-ask-password daemon-reload"}) {
		t.Errorf("systemctl calls after install: %q", v)
	}
	// The '+' of the tag reaches the mirror escaped, as in GitHub's links.
	if !slices.ContainsFunc(m.requests, func(u string) bool { return u == "/mirror/v1.30.4%2Brke2r1/rke2.linux-amd64.tar.gz" }) {
		t.Errorf("requests %q", m.requests)
	}

	mustRun(t, r, "install", ver, false, false)
	mustRun(t, r, "install", ver, true, false)
	if n := m.fetched("rke2.linux-amd64.tar.gz"); n != 1 {
		t.Errorf("tarball fetched %d times, want once", n)
	}

	// systemd now has the unit files.
	sc.load(t, "rke2-server.service", "inactive dead disabled")
	sc.load(t, "rke2-agent.service", "inactive dead disabled")
	if res := mustRun(t, r, "status", api.Params{}, false, false); res.Facts["version"] != v1 || res.Facts["active_state"] != "inactive" {
		t.Errorf("status facts %v", res.Facts)
	}
	mustRun(t, r, "start", api.Params{"mode": "server"}, true, true)
	mustRun(t, r, "start", api.Params{"mode": "server"}, false, true)
	mustRun(t, r, "start", api.Params{"mode": "server"}, false, false)
	mustRun(t, r, "restart", api.Params{"mode": "server"}, false, true)
	mustRun(t, r, "stop", api.Params{"mode": "agent"}, false, false)

	// An upgrade replaces the files and drops the ones v2 no longer has.
	res = mustRun(t, r, "install", api.Params{"version": v2}, false, true)
	if res.Facts["previous_version"] != v1 {
		t.Errorf("upgrade facts %v", res.Facts)
	}
	if got := readFile(t, filepath.Join(root, "bin", "rke2")); got != "rke2 "+v2 {
		t.Errorf("bin/rke2 after upgrade = %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "share/rke2/only-in-v1")); !os.IsNotExist(err) {
		t.Errorf("file of v1 left after upgrade: %v", err)
	}

	// Something of the host's own shares bin: it must survive uninstall.
	if err := os.WriteFile(filepath.Join(root, "bin", "other-tool"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, r, "uninstall", nil, true, true)
	if _, err := os.Stat(filepath.Join(root, "bin", "rke2")); err != nil {
		t.Fatalf("check mode uninstall removed files: %v", err)
	}
	before := len(sc.verbs(t))
	mustRun(t, r, "uninstall", nil, false, true)
	if v := sc.verbs(t)[before:]; !slices.Equal(v, []string{"--no-ask-password stop -- rke2-server.service", "--no-ask-password daemon-reload"}) {
		t.Errorf("systemctl calls on uninstall: %q", v)
	}
	for _, gone := range []string{"bin/rke2", "lib/systemd/system/rke2-server.service", "share/rke2", manifestPath} {
		if _, err := os.Stat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s left after uninstall: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "other-tool")); err != nil {
		t.Errorf("uninstall removed a file it did not install: %v", err)
	}
	mustRun(t, r, "uninstall", nil, false, false)
}

// TestInstallRefuses: a release that does not match what the mirror
// publishes, or that would write outside the install root, installs
// nothing.
func TestInstallRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tgz       func(t *testing.T) []byte
		published string // "" publishes the real sum; "-" publishes nothing
		want      string
	}{
		{"wrong checksum", func(t *testing.T) []byte { return release(t, v1) }, strings.Repeat("ab", 32), "refusing to install"},
		{"malformed checksum", func(t *testing.T) []byte { return release(t, v1) }, "xyz", "is not a sha256"},
		{"not in the checksum file", func(t *testing.T) []byte { return release(t, v1) }, "-", "lists no rke2.linux-amd64.tar.gz"},
		{"parent path", func(t *testing.T) []byte { return tarball(t, []entry{{name: "../escape", body: "x"}}) }, "", "leaves the install root"},
		{"absolute path", func(t *testing.T) []byte { return tarball(t, []entry{{name: "/etc/escape", body: "x"}}) }, "", "leaves the install root"},
		{"symlink", func(t *testing.T) []byte {
			return tarball(t, []entry{{name: "bin", typ: tar.TypeSymlink, link: "/etc"}})
		}, "", "neither a file nor a directory"},
		{"not gzip", func(*testing.T) []byte { return []byte("not a tarball") }, "", "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, b, r := setup(t)
			tgz := tc.tgz(t)
			m.publish(v1, tgz, tc.published)
			if tc.published == "-" {
				m.files["/mirror/"+v1+"/sha256sum-amd64.txt"] = []byte(sum(tgz) + "  rke2.linux-arm64.tar.gz\n")
			}
			_, err := run(t, r, "install", api.Params{"version": v1}, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("install: %v, want an error containing %q", err, tc.want)
			}
			if mf, _ := b.Installed(); mf != nil {
				t.Fatalf("install recorded after a refusal: %+v", mf)
			}
			if _, err := os.Stat(filepath.Join(b.root, "bin", "rke2")); !os.IsNotExist(err) {
				t.Fatalf("bin/rke2 written: %v", err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(b.root), "escape")); !os.IsNotExist(err) {
				t.Fatalf("wrote outside the root: %v", err)
			}
		})
	}
}

func TestArtifactURLConfig(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "no rke2 artifact URL is configured"},
		{"ftp://mirror/rke2", "want an http(s) URL"},
		{"/just/a/path", "want an http(s) URL"},
	} {
		b := New(Options{ArtifactURL: tc.url, InstallRoot: t.TempDir()})
		_, err := b.Run(context.Background(), &backends.Request{Action: "install", Params: api.Params{"version": v1}, Progress: func(int, string) {}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("artifact URL %q: %v, want %q", tc.url, err, tc.want)
		}
	}
	m := newMirror(t)
	b := New(Options{ArtifactURL: m.URL + "/mirror", InstallRoot: t.TempDir(), Arch: "amd64"})
	_, err := b.Run(context.Background(), &backends.Request{Action: "install", Params: api.Params{"version": v1}, Progress: func(int, string) {}})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("release missing on the mirror: %v", err)
	}
	for base, want := range map[string]string{
		m.URL + "/mirror":                           m.URL + "/mirror/v1.2.3%2Brke2r1/x.txt",
		"https://m.example":                         "https://m.example/v1.2.3%2Brke2r1/x.txt",
		"https://m.example/":                        "https://m.example/v1.2.3%2Brke2r1/x.txt",
		"https://m.example/a%20b/releases/download": "https://m.example/a%20b/releases/download/v1.2.3%2Brke2r1/x.txt",
	} {
		if got := New(Options{ArtifactURL: base}).artifact("v1.2.3+rke2r1", "x.txt"); got != want {
			t.Errorf("artifact URL under %s: %s, want %s", base, got, want)
		}
	}
}
