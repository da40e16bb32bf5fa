// Package chaos runs real grid processes on loopback and breaks them: kill -9
// of a clustered controller under load, kill -9 of an agent mid-task, a
// controller restart on its data dir, a network cut between an agent and
// NATS. The tests build the grid binary once and only run with GRID_CHAOS=1
// (make chaos).
package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/internal/testport"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// gridBin is the binary under test; empty when the chaos tests are off.
var gridBin string

func TestMain(m *testing.M) {
	if os.Getenv("GRID_CHAOS") != "1" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "grid-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gridBin = filepath.Join(dir, "grid")
	build := exec.Command("go", "build", "-o", gridBin, "github.com/gridfleet/terraform-provider-grid")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build grid:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func needChaos(t *testing.T) {
	t.Helper()
	if gridBin == "" {
		t.Skip("chaos tests start real grid processes and kill them; run them with GRID_CHAOS=1 go test ./test/chaos/ (or make chaos)")
	}
}

// freePort returns a loopback port nobody listens on (see testport).
func freePort(t *testing.T) int { return testport.Port(t) }

// proc is one grid process; its stderr (the logs) goes to a file that a
// restart appends to.
type proc struct {
	t       *testing.T
	name    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, dir, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, logPath: filepath.Join(dir, name+".log")}
	p.start()
	t.Cleanup(func() {
		if p.running() {
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
		}
		if t.Failed() {
			// t.TempDir is removed after the test; keep the logs of a
			// failed run where they can be read.
			keep := filepath.Join(os.TempDir(), "grid-chaos-logs", t.Name())
			if b, err := os.ReadFile(p.logPath); err == nil && os.MkdirAll(keep, 0o755) == nil &&
				os.WriteFile(filepath.Join(keep, name+".log"), b, 0o644) == nil {
				t.Logf("log of %s: %s", name, filepath.Join(keep, name+".log"))
			}
		}
	})
	return p
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(gridBin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill9 kills the process as a crash would and waits until it is gone.
func (p *proc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	if !p.wait(10 * time.Second) {
		p.t.Fatalf("%s survived SIGKILL", p.name)
	}
}

// exitCode is the process's exit code once it has exited.
func (p *proc) exitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.ProcessState.ExitCode()
}

// logLines returns the process's JSON log lines, decoded.
func (p *proc) logLines(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// ctlSpec describes one controller of a test fleet.
type ctlSpec struct {
	name                       string
	apiPort, natsPort, clPort  int
	dataDir                    string
	extra                      map[string]string // more config keys (yaml scalars)
	cluster                    bool
	routes                     []string
	replicas                   int // 0: no replicas key (the controller chooses)
	nodeOffline, staleAfter    string
	heartbeat, grace, flushInt string
}

func (s *ctlSpec) apiURL() string  { return fmt.Sprintf("https://127.0.0.1:%d", s.apiPort) }
func (s *ctlSpec) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.natsPort) }

// writeConfig writes the controller's YAML config and returns its path.
func (s *ctlSpec) writeConfig(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\napi_addr: 127.0.0.1:%d\nnats_addr: 127.0.0.1:%d\ndata_dir: %s\n", s.name, s.apiPort, s.natsPort, s.dataDir)
	fmt.Fprintf(&b, "node_offline_after: %s\ncontroller_stale_after: %s\nheartbeat_interval: %s\nresult_grace: %s\nflush_interval: %s\n",
		or(s.nodeOffline, "5s"), or(s.staleAfter, "3s"), or(s.heartbeat, "500ms"), or(s.grace, "10s"), or(s.flushInt, "50ms"))
	if s.cluster {
		fmt.Fprintf(&b, "cluster_name: chaos\ncluster_addr: 127.0.0.1:%d\n", s.clPort)
		if s.replicas > 0 {
			fmt.Fprintf(&b, "replicas: %d\n", s.replicas)
		}
		b.WriteString("routes:\n")
		for _, r := range s.routes {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
	}
	for k, v := range s.extra {
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	path := filepath.Join(dir, s.name+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// newCtlSpecs returns n controller specs with free ports; with n > 1 they
// form one NATS cluster with the given replicas (0: none in the config).
func newCtlSpecs(t *testing.T, dir string, n, replicas int) []*ctlSpec {
	t.Helper()
	specs := make([]*ctlSpec, n)
	for i := range specs {
		specs[i] = &ctlSpec{name: fmt.Sprintf("ctl-%d", i+1), apiPort: freePort(t), natsPort: freePort(t), clPort: freePort(t),
			dataDir: filepath.Join(dir, fmt.Sprintf("ctl-%d-data", i+1)), replicas: replicas, cluster: n > 1}
	}
	for i, s := range specs {
		for j, o := range specs {
			if i != j {
				s.routes = append(s.routes, fmt.Sprintf("nats://127.0.0.1:%d", o.clPort))
			}
		}
	}
	shareSecurity(t, dir, specs)
	return specs
}

// shareSecurity gives every controller the same CA (certificate and key)
// and join token before their first start, as an operator of a cluster
// does (README, "Security"): routes then authenticate each other, and an
// agent enrolled through one controller is known to all. Agents trust
// securityDir's ca.pem and enroll with its join-token.
func shareSecurity(t *testing.T, dir string, specs []*ctlSpec) {
	t.Helper()
	src := securityDir(dir)
	if _, err := pki.EnsureCA(src); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureToken(filepath.Join(src, pki.JoinTokenFile)); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := os.MkdirAll(s.dataDir, 0o750); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{pki.CAFile, pki.CAKeyFile, pki.JoinTokenFile} {
			b, err := os.ReadFile(filepath.Join(src, name))
			if err == nil {
				err = os.WriteFile(filepath.Join(s.dataDir, name), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// securityDir holds the fleet's shared CA and join token.
func securityDir(dir string) string { return filepath.Join(dir, "security") }

func startController(t *testing.T, dir string, s *ctlSpec) *proc {
	t.Helper()
	cfg := s.writeConfig(t, dir)
	return startProc(t, dir, s.name, "controller", "--config", cfg, "--log-format", "json")
}

// startAgent starts an agent connected to the given NATS URLs.
func startAgent(t *testing.T, dir, name string, groups []string, urls []string, heartbeat string) *proc {
	t.Helper()
	cfg := fmt.Sprintf("name: %s\ngroups: [%s]\nnats: [%s]\ndata_dir: %s\nheartbeat_interval: %s\nshutdown_grace: 20s\nca_file: %s\njoin_token_file: %s\n",
		name, strings.Join(groups, ", "), strings.Join(urls, ", "), filepath.Join(dir, name+"-data"), heartbeat,
		filepath.Join(securityDir(dir), pki.CAFile), filepath.Join(securityDir(dir), pki.JoinTokenFile))
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Debug level: an agent logs "task started", which the tests count, only there.
	return startProc(t, dir, name, "agent", "--config", path, "--log-format", "json", "--log-level", "debug")
}

// client is an API client of the controller s, with the admin token it
// wrote to its data dir at first start.
func client(t *testing.T, s *ctlSpec) *api.Client {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(s.dataDir, controller.AdminTokenFile))
	if err != nil {
		t.Fatalf("admin token of %s: %v", s.name, err)
	}
	cl, err := api.NewClient(api.ClientConfig{Address: s.apiURL(), Token: strings.TrimSpace(string(tok)), Timeout: 10 * time.Second,
		CAFile: filepath.Join(s.dataDir, pki.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitReady waits for a controller's /readyz to answer 200.
func waitReady(t *testing.T, s *ctlSpec, d time.Duration) {
	t.Helper()
	url := s.apiURL()
	waitFor(t, d, "controller "+url+" ready", func() bool {
		// The CA exists once the controller has made it.
		tc, err := api.ClientConfig{CAFile: filepath.Join(s.dataDir, pki.CAFile)}.TLSConfig()
		if err != nil {
			return false
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// waitNodes waits until the named nodes are all online.
func waitNodes(t *testing.T, cl *api.Client, d time.Duration, names ...string) {
	t.Helper()
	waitFor(t, d, fmt.Sprintf("nodes %v online", names), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return false
		}
		online := map[string]bool{}
		for _, n := range nodes {
			online[n.ID] = n.Status == api.NodeOnline
		}
		for _, n := range names {
			if !online[n] {
				return false
			}
		}
		return true
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, d, 100*time.Millisecond, what, cond)
}

// taskKey is one run of one step on one node.
type taskKey struct {
	job, node     string
	step, attempt int
}

// taskRuns counts the "task started" lines of agents' JSON logs per (job,
// step, node, attempt), and the attempts per (job, step, node).
func taskRuns(t *testing.T, agents []*proc) (runs map[taskKey]int, perStep map[taskKey]int) {
	t.Helper()
	runs, perStep = map[taskKey]int{}, map[taskKey]int{}
	for _, a := range agents {
		for _, l := range a.logLines(t) {
			if l["msg"] != "task started" {
				continue
			}
			k := taskKey{job: str(l["job"]), node: str(l["node"]), step: num(l["step"]), attempt: num(l["attempt"])}
			runs[k]++
			perStep[taskKey{job: k.job, node: k.node, step: k.step}]++
		}
	}
	return runs, perStep
}

func str(v any) string { s, _ := v.(string); return s }
func num(v any) int    { f, _ := v.(float64); return int(f) }

func nodeResult(j *api.Job, step int, node string) *api.NodeResult {
	if j == nil {
		return nil
	}
	return j.Results.Node(step, node)
}
