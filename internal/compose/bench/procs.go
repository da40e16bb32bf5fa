package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTicks = 100

// proc is a child process of the bench: an agent or a floor responder.
type proc struct {
	name string
	cmd  *exec.Cmd
	// exited closes once Wait returned.
	exited chan struct{}
}

func (e *Env) startProc(bin, name, logFile string, env []string, args ...string) (*proc, io.ReadCloser, error) {
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// A bench that dies takes its children along (Linux only, as /proc is).
	cmd.SysProcAttr = childProcAttr()
	var out io.ReadCloser
	if logFile != "" {
		f, err := os.Create(logFile)
		if err != nil {
			return nil, nil, err
		}
		defer func() { _ = f.Close() }() // the child holds its own copy
		cmd.Stdout, cmd.Stderr = f, f
	} else {
		var err error
		if out, err = cmd.StdoutPipe(); err != nil {
			return nil, nil, err
		}
		// What it says on stderr is why it failed.
		cmd.Stderr = e.progress
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, out, nil
}

// stopProcs sends SIGTERM to every process and waits up to grace for them
// to exit, then kills what is left.
func stopProcs(ps []*proc, grace time.Duration) {
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// procCPU is the CPU time (user and system, all threads) a process has
// used, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis are plain. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// AgentProcsCPU is the CPU time the agent processes have used in all.
func (e *Env) AgentProcsCPU() (time.Duration, error) {
	e.mu.Lock()
	ps := e.procs
	e.mu.Unlock()
	return procsCPU(ps)
}

// AgentProcs counts the running agent processes.
func (e *Env) AgentProcs() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.procs)
}

// ctlDataDir is the controller's data dir on this machine (its CA, join
// token and controller certificate), "" for an insecure one.
func (e *Env) ctlDataDir() string {
	if e.fleet != nil {
		if e.opts.Insecure {
			return ""
		}
		return filepath.Dir(e.fleet.CAFile())
	}
	return e.opts.ControllerDataDir
}

// agentProcConfig is the YAML an agent process reads (agent.Config's keys).
type agentProcConfig struct {
	Name              string   `yaml:"name"`
	Groups            []string `yaml:"groups"`
	NATS              []string `yaml:"nats"`
	DataDir           string   `yaml:"data_dir"`
	CAFile            string   `yaml:"ca_file,omitempty"`
	JoinTokenFile     string   `yaml:"join_token_file,omitempty"`
	HeartbeatInterval string   `yaml:"heartbeat_interval"`
	ShutdownGrace     string   `yaml:"shutdown_grace"`
	DebugAddr         string   `yaml:"debug_addr,omitempty"`
}

// StartAgentProcs starts n `grid agent` processes (Options.AgentBin) with
// a config file each, secure like a deployed agent (the controller's CA and
// join token) unless the controller is insecure, and returns once the
// controller counts them all online, with the time that took. Their logs
// (the default level, as deployed) go to a file each in the bench's data
// dir.
func (e *Env) StartAgentProcs(ctx context.Context, n int) (time.Duration, error) {
	return e.StartAgentProcsAt(ctx, n, e.natsURL)
}

// StartAgentProcsAt is StartAgentProcs with the agents connected to
// natsURL (a site's relay, say).
func (e *Env) StartAgentProcsAt(ctx context.Context, n int, natsURL string) (time.Duration, error) {
	if e.opts.AgentBin == "" {
		return 0, errors.New("no agent binary to start")
	}
	base, err := e.onlineCount(ctx)
	if err != nil {
		return 0, err
	}
	ctl := e.ctlDataDir()
	start := time.Now()
	e.mu.Lock()
	first := e.retired + len(e.procs)
	e.mu.Unlock()
	for i := first; i < first+n; i++ {
		name := fmt.Sprintf("bench-%s-p%d", e.runID, i+1)
		dir := filepath.Join(e.dir, "agents", name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return 0, err
		}
		cfg := agentProcConfig{Name: name, Groups: []string{e.Group()}, NATS: []string{natsURL},
			DataDir: dir, HeartbeatInterval: e.heartbeat().String(), ShutdownGrace: "5s"}
		if ctl != "" {
			cfg.CAFile, cfg.JoinTokenFile = filepath.Join(ctl, pki.CAFile), filepath.Join(ctl, pki.JoinTokenFile)
		}
		if e.opts.AgentDebugPort > 0 {
			cfg.DebugAddr = "127.0.0.1:" + strconv.Itoa(e.opts.AgentDebugPort+i-first)
		} else if i == 0 {
			cfg.DebugAddr = e.opts.SampledAgentDebugAddr
		}
		data, err := yaml.Marshal(cfg)
		if err != nil {
			return 0, err
		}
		file := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return 0, err
		}
		p, _, err := e.startProc(e.opts.AgentBin, name, filepath.Join(dir, "agent.log"), e.opts.AgentEnv, e.agentArgs(file)...)
		if err != nil {
			return 0, err
		}
		e.mu.Lock()
		e.procs = append(e.procs, p)
		e.names = append(e.names, name)
		e.mu.Unlock()
	}
	want := base + n
	stopProgress := e.every(time.Second, func() {
		got, _ := e.onlineCount(ctx)
		e.printf("  agents online %d/%d (%.1fs)", got-base, n, time.Since(start).Seconds())
	})
	defer stopProgress()
	deadline := time.After(time.Duration(n)*time.Second + time.Minute)
	for {
		got, err := e.onlineCount(ctx)
		if err == nil && got >= want {
			return time.Since(start), nil
		}
		if p := e.exitedProc(); p != nil {
			return 0, fmt.Errorf("agent process %s exited (%s); see its log in %s", p.name, p.cmd.ProcessState, filepath.Join(e.dir, "agents", p.name))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline:
			return 0, fmt.Errorf("waiting for %d agent processes online: the controller counts %d", n, got-base)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// agentArgs runs an agent with the config file: "grid agent --config F",
// or "grid-agent --config F" for the slim agent binary.
func (e *Env) agentArgs(file string) []string {
	args := []string{"--config", file, "--log-level", e.opts.AgentLogLevel}
	if strings.HasPrefix(filepath.Base(e.opts.AgentBin), "grid-agent") {
		return args
	}
	return append([]string{"agent"}, args...)
}

func (e *Env) exitedProc() *proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		select {
		case <-p.exited:
			return p
		default:
		}
	}
	return nil
}

func (e *Env) heartbeat() time.Duration {
	if e.opts.Heartbeat > 0 {
		return e.opts.Heartbeat
	}
	return 10 * time.Second
}

// stopAgentProcs stops the agent processes gracefully (they mark their
// nodes offline), killing what has not exited after their grace.
func (e *Env) stopAgentProcs() {
	e.mu.Lock()
	ps := e.procs
	e.procs = nil
	e.mu.Unlock()
	stopProcs(ps, 30*time.Second)
}

// FloorProcs measures the fan-out floor with real processes: n responder
// processes (this binary's `grid bench responder`), one NATS connection each, reply to
// one core message; a round is publish to the n-th reply. One warm-up
// round is not counted. The responders are stopped before it returns.
func (e *Env) FloorProcs(ctx context.Context, n, rounds int) ([]time.Duration, error) {
	subject := "bench.floor." + e.runID
	// The responders are this binary's hidden "bench responder".
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("floor responders: %w", err)
	}
	args := []string{"bench", "responder", "--nats", e.natsURL, "--subject", subject}
	if d := e.ctlDataDir(); d != "" {
		args = append(args, "--ca-file", filepath.Join(d, pki.CAFile),
			"--cert", filepath.Join(d, pki.ControllerCertFile), "--key", filepath.Join(d, pki.ControllerKeyFile))
	}
	var ps []*proc
	defer func() { stopProcs(ps, 10*time.Second) }()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	for i := range n {
		p, out, err := e.startProc(self, fmt.Sprintf("responder-%d", i+1), "", nil, args...)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
		// A responder writes "ready" once its subscription is flushed;
		// whatever follows is drained until it exits.
		wg.Add(1)
		go func() {
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || strings.TrimSpace(line) != "ready" {
				errMu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: not ready (%q): %w", p.name, line, err))
				} else {
					errs = append(errs, fmt.Errorf("%s: not ready (%q)", p.name, line))
				}
				errMu.Unlock()
			}
			wg.Done()
			_, _ = io.Copy(io.Discard, out)
		}()
	}
	ready := make(chan struct{})
	go func() {
		wg.Wait()
		close(ready)
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("floor responders: %w", errors.Join(errs...))
	}
	cpu0, err := procsCPU(ps)
	if err != nil {
		return nil, err
	}
	out, err := e.floorRounds(ctx, subject, n, rounds)
	if err != nil {
		return nil, err
	}
	cpu1, err := procsCPU(ps)
	if err != nil {
		return nil, err
	}
	e.floorCPU = (cpu1 - cpu0) / time.Duration(n*(rounds+1))
	return out, nil
}

// FloorCPUPerMessage is the responder processes' CPU time per message and
// responder over FloorProcs' rounds (the warm-up included): what answering
// one message costs a process that does nothing else, on this machine.
func (e *Env) FloorCPUPerMessage() time.Duration { return e.floorCPU }

func procsCPU(ps []*proc) (time.Duration, error) {
	var sum time.Duration
	for _, p := range ps {
		d, err := procCPU(p.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		sum += d
	}
	return sum, nil
}

// floorRounds publishes one request to subject per round and times the
// n-th reply; one warm-up round first is not counted.
func (e *Env) floorRounds(ctx context.Context, subject string, n, rounds int) ([]time.Duration, error) {
	replies := make(chan *nats.Msg, n)
	inbox := nats.NewInbox()
	sub, err := e.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := e.nc.Flush(); err != nil {
		return nil, err
	}
	var out []time.Duration
	for r := -1; r < rounds; r++ {
		start := time.Now()
		if err := e.nc.PublishRequest(subject, inbox, []byte("ping")); err != nil {
			return nil, err
		}
		timeout := time.After(30 * time.Second)
		for got := 0; got < n; got++ {
			select {
			case <-replies:
			case <-timeout:
				return nil, fmt.Errorf("floor round: %d of %d replies within 30s", got, n)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r >= 0 {
			out = append(out, time.Since(start))
		}
		// Rounds apart, as the jobs are: a reply of one round is never
		// counted in the next.
		time.Sleep(20 * time.Millisecond)
	}
	return out, nil
}

// Respond is the floor's responder process: it connects to natsURL (with
// TLS and a client certificate when caFile is set), answers "ok" to every
// message on subject, writes "ready" to ready once the subscription is
// known to the server, and returns when ctx ends.
func Respond(ctx context.Context, natsURL, subject, caFile, cert, key string, ready io.Writer) error {
	// Hundreds of responders start at once on a busy machine: the TLS
	// handshakes take longer than the client's default 2s.
	opts := []nats.Option{nats.Name("grid-bench-responder"), nats.Timeout(30 * time.Second)}
	if caFile != "" {
		opts = append(opts, nats.RootCAs(caFile))
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", natsURL, err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if _, err := fmt.Fprintln(ready, "ready"); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
