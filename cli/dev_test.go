package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// syncBuffer lets the test read what a command running in another
// goroutine has printed so far.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeApt builds backends/apt's fake apt-get and dpkg-query into a
// directory for PATH; every call is logged to dir/argv.log, and an install
// that really runs creates dir/installed/<pkg>.
func fakeApt(t *testing.T) (binDir, dir string) {
	t.Helper()
	dir = t.TempDir()
	binDir = filepath.Join(dir, "bin")
	for _, d := range []string{"installed", "avail", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "avail", "cowsay"), []byte("3.03"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "fakeapt")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/fakeapt")
	cmd.Dir = "../backends/apt"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fakeapt: %v\n%s", err, out)
	}
	for _, n := range []string{"apt-get", "dpkg-query"} {
		if err := os.Symlink(bin, filepath.Join(binDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return binDir, dir
}

// TestDevFleetEndToEnd runs the README's quick start as written: its
// "grid dev" (on a free port), then its client commands with what the
// export line grid dev prints sets, which is all a client needs; then
// more client commands against the same fleet.
func TestDevFleetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	qs := quickStartFromReadme(t)
	// apt-get and dpkg-query on PATH are fakes that log every call, so the
	// test sees whether grid dev would have changed the host.
	aptBin, aptDir := fakeApt(t)
	t.Setenv("PATH", aptBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_APT_DIR", aptDir)
	t.Setenv("GRID_ADDR", "")
	t.Setenv("GRID_TOKEN", "")
	t.Setenv("GRID_CACERT", "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var devOut, devErr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "test", append(slices.Clone(qs.dev.args), "--api-addr", "127.0.0.1:0"), &devOut, &devErr)
	}()

	// The line grid dev prints sets what the README's export line sets.
	exportPattern := "export"
	for _, name := range qs.exportVars {
		exportPattern += " " + regexp.QuoteMeta(name) + `=(\S+)`
	}
	exportRE := regexp.MustCompile(exportPattern)
	exported := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for len(exported) == 0 {
		if m := exportRE.FindStringSubmatch(devOut.String()); m != nil {
			for i, name := range qs.exportVars {
				exported[name] = m[i+1]
			}
			break
		}
		select {
		case code := <-done:
			t.Fatalf("grid dev exited with %d: %s", code, devErr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("grid dev printed no export line like %s:%d's (%s): %q %q", readmeFile, qs.dev.line, exportRE, devOut.String(), devErr.String())
		}
	}
	addr, tok, caFile := exported["GRID_ADDR"], exported["GRID_TOKEN"], exported["GRID_CACERT"]
	if !strings.HasPrefix(addr, "https://") || tok == "" || caFile == "" {
		t.Fatalf("the export line grid dev printed lacks GRID_ADDR, GRID_TOKEN or GRID_CACERT: %v", exported)
	}

	// The dashboard's address is printed, and it serves the dashboard to
	// a client that trusts the printed CA.
	if !strings.Contains(devOut.String(), "UI:     "+addr+"/ui/") || !strings.Contains(devOut.String(), "import "+caFile) {
		t.Errorf("grid dev does not print the dashboard's URL and the CA to trust: %q", devOut.String())
	}
	if ui := fetchWithCA(t, caFile, addr+"/ui/"); !strings.Contains(ui, "<html") {
		t.Errorf("the printed dashboard URL serves %q", ui)
	}

	// Without the CA the certificate is refused, and the error says what
	// to set.
	code, _, errOut := runCLI(t, "--addr", addr, "--token", tok, "node", "list")
	if code != ExitFailed || !strings.Contains(errOut, "GRID_CACERT") || !strings.Contains(errOut, "DATA_DIR/ca.pem") {
		t.Fatalf("node list without the CA: code %d err %q", code, errOut)
	}
	// --cacert works as GRID_CACERT does.
	if code, out, errOut := runCLI(t, "--addr", addr, "--token", tok, "--cacert", caFile, "node", "list"); code != ExitOK || !strings.Contains(out, "node-1") {
		t.Fatalf("node list with --cacert: code %d out %q err %q", code, out, errOut)
	}
	t.Setenv("GRID_CACERT", caFile)
	// Without the token the API refuses, and says what to do.
	code, _, errOut = runCLI(t, "--addr", addr, "node", "list")
	if code != ExitFailed || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "GRID_TOKEN") {
		t.Fatalf("node list without a token: code %d err %q", code, errOut)
	}
	for name, v := range exported {
		t.Setenv(name, v)
	}

	// The quick start's commands, from the repository's root as the
	// README runs them.
	t.Chdir(filepath.Dir(readmePath))
	jobs := 0
	for _, c := range qs.clients {
		code, out, errOut := runCLI(t, c.args...)
		if code != ExitOK {
			t.Fatalf("%v: code %d out %q err %q", c, code, out, errOut)
		}
		switch {
		case c.args[0] == "node" && c.args[1] == "list":
			if !strings.Contains(out, "node-1") || !strings.Contains(out, "node-2") {
				t.Errorf("%v: %q", c, out)
			}
		case c.args[0] == "backends" && len(c.args) > 1:
			if !strings.Contains(out, c.args[1]) {
				t.Errorf("%v: %q", c, out)
			}
		case c.args[0] == "job" && c.args[1] == "run":
			jobs++
			if slices.Contains(c.args, "--wait") && !strings.Contains(out, "completed") {
				t.Errorf("%v: %q", c, out)
			}
			if i := slices.Index(c.args, "--message"); i > 0 && i+1 < len(c.args) && !strings.Contains(out, c.args[i+1]) {
				t.Errorf("%v: the output lacks the message: %q", c, out)
			}
		}
	}

	code, out, errOut := runCLI(t, "job", "run", "-f", "examples/jobs/fail-fast-rollback.yaml", "--wait")
	if code != ExitFailed || !strings.Contains(out, "skipped") || !strings.Contains(out, "rolled back") {
		t.Fatalf("fail-fast job: code %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "job", "run", "--target", "all", "ping", "echo", "--bogus", "x")
	if code != ExitUsage {
		t.Fatalf("unknown param: code %d err %q", code, errOut)
	}
	jobs++
	code, out, _ = runCLI(t, "-o", "json", "job", "list")
	if code != ExitOK || strings.Count(out, `"id"`) != jobs {
		t.Fatalf("job list: code %d out %q", code, out)
	}

	// grid dev's agents offer the read-only backends, and run them: a
	// passing health check completes, a failing one fails the job.
	code, out, errOut = runCLI(t, "backends")
	for _, b := range []string{"health", "cert", "proc", "dns", "journald"} {
		if code != ExitOK || !strings.Contains(out, b) {
			t.Errorf("grid backends on grid dev lacks %s: code %d out %q err %q", b, code, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, "job", "run", "--target", "node:node-1", "health", "memory", "--max_used_pct", "100", "--wait")
	if code != ExitOK || !strings.Contains(out, "completed") {
		t.Errorf("health.memory on grid dev: code %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "job", "run", "--target", "node:node-1", "proc", "count", "--name", "no-such-process", "--wait")
	if code != ExitFailed || !strings.Contains(out, "0 processes match name no-such-process") {
		t.Errorf("a failing proc.count on grid dev: code %d out %q err %q", code, out, errOut)
	}

	// The attack: apt install from grid dev must not touch the host.
	code, out, errOut = runCLI(t, "job", "run", "--target", "node:node-1", "apt", "install", "--package", "cowsay", "--wait")
	if code != ExitOK || !strings.Contains(out, "check mode only") {
		t.Fatalf("apt install in grid dev: code %d out %q err %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(aptDir, "installed", "cowsay")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("apt install from grid dev installed the package on the host (err %v)", err)
	}
	log, _ := os.ReadFile(filepath.Join(aptDir, "argv.log"))
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if strings.Contains(line, `"apt-get"`) && !strings.Contains(line, `"-s"`) {
			t.Errorf("apt-get ran without -s (simulate) in grid dev: %s", line)
		}
	}
	// user is check mode only too: the host gets no account. (getent sees
	// the host's users as the backend does.)
	code, out, errOut = runCLI(t, "job", "run", "--target", "node:node-1", "user", "present", "--name", "grid-dev-probe", "--wait")
	if code != ExitOK || !strings.Contains(out, "check mode only") {
		t.Fatalf("user present in grid dev: code %d out %q err %q", code, out, errOut)
	}
	if out, err := exec.Command("getent", "passwd", "grid-dev-probe").CombinedOutput(); err == nil {
		t.Fatalf("user present from grid dev made a user on the host: %s", out)
	}
	// Dangerous actions are not offered at all.
	code, _, errOut = runCLI(t, "job", "run", "--target", "node:node-1", "apt", "remove", "--package", "bash", "--wait")
	if code != ExitUsage || !strings.Contains(errOut, "remove") {
		t.Fatalf("apt remove in grid dev: code %d err %q", code, errOut)
	}

	// Tokens: a read token made with the CLI can look but not submit, and
	// once revoked it is refused.
	code, out, errOut = runCLI(t, "token", "create", "--name", "ci", "--role", "read")
	readTok := strings.TrimSpace(out)
	if code != ExitOK || !strings.HasPrefix(readTok, "grid_") || !strings.Contains(errOut, "not shown again") {
		t.Fatalf("token create: code %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "token", "list")
	if code != ExitOK || !strings.Contains(out, "ci") || !strings.Contains(out, "read") || strings.Contains(out, readTok) {
		t.Fatalf("token list: code %d out %q err %q", code, out, errOut)
	}
	if code, out, errOut = runCLI(t, "--token", readTok, "node", "list"); code != ExitOK {
		t.Fatalf("node list with a read token: code %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "--token", readTok, "job", "run", "--target", "all", "ping", "echo")
	if code != ExitFailed || !strings.Contains(errOut, "403") || !strings.Contains(errOut, `"ci" has role read`) {
		t.Fatalf("submit with a read token: code %d err %q", code, errOut)
	}
	if code, out, errOut = runCLI(t, "token", "revoke", "ci"); code != ExitOK || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke: code %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "--token", readTok, "node", "list")
	if code != ExitFailed || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "revoked") {
		t.Fatalf("node list with a revoked token: code %d err %q", code, errOut)
	}

	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("grid dev exited with %d: %s", code, devErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("grid dev did not stop")
	}
}

// A client flag given to a command that serves is refused, not ignored.
func TestServerCommandsRefuseClientFlags(t *testing.T) {
	for _, args := range [][]string{
		{"controller", "--token", "x"},
		{"controller", "--addr", "http://h:1"},
		{"agent", "--token", "x"},
		{"dev", "--token", "x"},
		{"provider", "--token", "x"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != ExitUsage || !strings.Contains(errOut, "--"+strings.TrimPrefix(args[1], "--")+" is") {
			t.Errorf("%v: code %d err %q", args, code, errOut)
		}
	}
}

// fetchWithCA GETs url trusting only the CA in caFile and returns the body.
func fetchWithCA(t *testing.T, caFile, url string) string {
	t.Helper()
	tc, err := api.ClientConfig{CAFile: caFile}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}
