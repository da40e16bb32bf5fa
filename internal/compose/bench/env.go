package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/relay"
)

// Options say what to measure against.
type Options struct {
	// APIAddr is an existing controller's API; empty starts an embedded
	// controller in this process.
	APIAddr string
	// NATSURL is where the simulated agents connect when APIAddr is set.
	NATSURL string
	// Token is the API bearer token, if the controller wants one.
	Token string
	// ControllerDataDir, with APIAddr, is the external controller's data
	// dir on this machine: the agents trust its ca.pem and enroll with its
	// join-token; the bench's own connections use its controller
	// certificate. Empty for an insecure controller.
	ControllerDataDir string
	// CAFile is the CA the external controller's HTTPS certificate chains
	// to; empty means ControllerDataDir's ca.pem (when set).
	CAFile string
	// Insecure runs the embedded controller without TLS and authentication
	// on NATS, to measure what they cost.
	Insecure bool
	// Heartbeat is the simulated agents' heartbeat interval (0: the agent
	// default).
	Heartbeat time.Duration
	// StartParallel bounds how many agents register at once (0: 64).
	StartParallel int
	// Progress receives progress lines; nil prints nothing.
	Progress io.Writer
	// Logger receives the components' logs; nil discards them.
	Logger *slog.Logger
	// AgentBin is the binary StartAgentProcs runs agents with
	// (the deployed build: grid, or the slim grid-agent).
	AgentBin string
	// AgentLogLevel is the agent processes' --log-level.
	AgentLogLevel string
	// AgentDebugPort, when positive, gives the agent processes a
	// debug_addr (pprof) each: 127.0.0.1 and this port, the next, ...
	AgentDebugPort int
	// SampledAgentDebugAddr, when AgentDebugPort is 0, is the debug_addr
	// of the first agent process only: the one a soak samples, whose Go
	// heap and goroutines it reads from the profiler.
	SampledAgentDebugAddr string
	// AgentEnv is added to the agent processes' environment (KEY=VALUE).
	AgentEnv []string
	// Sites opens the embedded controller's leaf port, for sites' relays
	// (bench sites).
	Sites bool
}

// Env is a controller to measure and the simulated agents started against
// it.
type Env struct {
	opts     Options
	runID    string
	dir      string
	fleet    *fleet.Fleet
	stopCtl  context.CancelFunc
	client   *api.Client
	hc       *http.Client
	natsURL  string
	apiURL   string
	nc       *nats.Conn
	jobsKV   jetstream.KeyValue
	log      *slog.Logger
	progress io.Writer

	registry     *backends.Registry
	agentsCtx    context.Context
	cancelAgents context.CancelFunc
	mu           sync.Mutex
	agents       []*agent.Agent
	names        []string
	// procs are the agent processes (StartAgentProcs).
	procs []*proc
	// floorCPU is the responders' CPU per message (FloorProcs).
	floorCPU time.Duration
	// groupSuffix tells the agents started from now on apart from the
	// earlier ones (UseGroup).
	groupSuffix string
	// relays are the sites' relay processes, inRelays the relays run in
	// this process (StartSites).
	relays   []*proc
	inRelays []*relay.Relay
	// retired counts the agents StopAgents stopped: the next ones take
	// new names (and keys) after theirs.
	retired int
}

// Setup starts an embedded controller (or checks the given one) and
// connects to its NATS server. No agent runs yet; see StartAgents.
func Setup(ctx context.Context, opts Options) (*Env, error) {
	e := &Env{opts: opts, runID: randomID(), log: opts.Logger, progress: opts.Progress}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "grid-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench data dir: %w", err)
	}
	e.dir = dir
	if opts.APIAddr == "" {
		fctx, stop := context.WithCancel(context.Background())
		f, err := fleet.Start(fctx, fleet.Options{DataDir: filepath.Join(dir, "fleet"), APIAddr: "127.0.0.1:0", Logger: e.log,
			Controller: func(c *controller.Config) {
				c.MaxPending = 100_000
				c.Insecure = opts.Insecure
				if opts.Sites {
					c.LeafAddr = "127.0.0.1:0"
				}
			}})
		if err != nil {
			stop()
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start embedded controller: %w", err)
		}
		e.fleet, e.stopCtl = f, stop
		e.apiURL, e.natsURL = f.APIURL(), f.NATSURL()
		if opts.Token == "" {
			// The embedded controller's own admin token.
			opts.Token = f.AdminToken()
			e.opts.Token = opts.Token
		}
	} else {
		if opts.NATSURL == "" {
			_ = os.RemoveAll(dir)
			return nil, errors.New("an external controller needs its NATS URL too (--nats)")
		}
		e.apiURL, e.natsURL = api.NormalizeAddress(opts.APIAddr), opts.NATSURL
	}
	// Enough idle connections for every job in flight, so that concurrent
	// submissions do not open and close a connection each.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	cc := api.ClientConfig{Address: e.apiURL, Token: opts.Token, Timeout: 60 * time.Second, CAFile: e.caFile()}
	// The metrics scrapes trust the same CA.
	if tc, terr := cc.TLSConfig(); terr != nil {
		err = terr
	} else {
		tr.TLSClientConfig = tc
	}
	e.hc = &http.Client{Transport: tr}
	if err == nil {
		cc.HTTPClient = e.hc
		e.client, err = api.NewClient(cc)
	}
	if err == nil {
		_, err = e.client.Status(ctx)
	}
	if err == nil {
		e.nc, err = nats.Connect(e.natsURL, append(e.natsOpts(), nats.Name("grid-bench"), nats.MaxReconnects(-1))...)
	}
	if err == nil {
		var js jetstream.JetStream
		js, err = jetstream.New(e.nc)
		if err == nil {
			e.jobsKV, err = js.KeyValue(ctx, api.BucketJobs)
		}
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	e.registry, err = builtin.New(builtin.Options{Sandbox: filepath.Join(dir, "sandbox")})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("built-in backends: %w", err)
	}
	e.agentsCtx, e.cancelAgents = context.WithCancel(context.Background())
	return e, nil
}

// caFile is the CA the controller's HTTPS certificate chains to ("" for
// the system's roots, or a plain-HTTP insecure controller).
func (e *Env) caFile() string {
	switch {
	case e.fleet != nil:
		return e.fleet.Controller.CAFile()
	case e.opts.CAFile != "":
		return e.opts.CAFile
	case e.opts.ControllerDataDir != "":
		return filepath.Join(e.opts.ControllerDataDir, pki.CAFile)
	}
	return ""
}

// natsOpts connect the bench's own connections as the embedded controller
// does (nil for an external one or an insecure controller).
func (e *Env) natsOpts() []nats.Option {
	if d := e.opts.ControllerDataDir; e.fleet == nil && d != "" {
		return []nats.Option{nats.RootCAs(filepath.Join(d, pki.CAFile)),
			nats.ClientCert(filepath.Join(d, pki.ControllerCertFile), filepath.Join(d, pki.ControllerKeyFile))}
	}
	if e.fleet == nil {
		return nil
	}
	return e.fleet.NATSOptions()
}

// Embedded reports whether the controller runs in this process.
func (e *Env) Embedded() bool { return e.fleet != nil }

// Client is an API client for the controller.
func (e *Env) Client() *api.Client { return e.client }

// NATSURL is where the agents connect.
func (e *Env) NATSURL() string { return e.natsURL }

// Group is the group every simulated agent of this run is in, so jobs of
// the benchmark reach only them even on a shared deployment.
func (e *Env) Group() string { return "bench-" + e.runID + e.groupSuffix }

// UseGroup puts the agents started from now on in a group of their own
// (Group() + suffix), so that a job to Group() reaches them only.
func (e *Env) UseGroup(suffix string) { e.groupSuffix = suffix }

// Names are the node ids of the running simulated agents.
func (e *Env) Names() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.names...)
}

func (e *Env) printf(format string, args ...any) {
	if e.progress != nil {
		_, _ = fmt.Fprintf(e.progress, format+"\n", args...)
	}
}

// Close stops the agents (they mark themselves offline) and the embedded
// controller, and removes the temporary data.
func (e *Env) Close() {
	e.stopAgentProcs()
	e.stopRelays()
	if e.cancelAgents != nil {
		e.cancelAgents()
		e.mu.Lock()
		agents := e.agents
		e.mu.Unlock()
		deadline := time.After(60 * time.Second)
	wait:
		for _, a := range agents {
			select {
			case <-a.Done():
			case <-deadline:
				break wait
			}
		}
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.fleet != nil {
		e.stopCtl()
		select {
		case <-e.fleet.Done():
		case <-time.After(30 * time.Second):
		}
	}
	_ = os.RemoveAll(e.dir)
}

// StartAgents starts n simulated agents — agent.New and Start, each with its
// own NATS connection — and returns once the controller counts them all
// online, with the time that took from the first start.
func (e *Env) StartAgents(ctx context.Context, n int) (time.Duration, error) {
	return e.StartAgentsAt(ctx, n, e.natsURL)
}

// StartAgentsAt is StartAgents with the agents connected to natsURL (a
// site's relay, say).
func (e *Env) StartAgentsAt(ctx context.Context, n int, natsURL string) (time.Duration, error) {
	base, err := e.onlineCount(ctx)
	if err != nil {
		return 0, err
	}
	par := e.opts.StartParallel
	if par <= 0 {
		par = 64
	}
	e.mu.Lock()
	first := e.retired + len(e.names)
	e.mu.Unlock()
	start := time.Now()
	var (
		next    atomic.Int64
		started atomic.Int64
		wg      sync.WaitGroup
		errMu   sync.Mutex
		errs    []error
	)
	next.Store(int64(first))
	stopProgress := e.every(time.Second, func() {
		e.printf("  agents started %d/%d (%.1fs)", started.Load(), n, time.Since(start).Seconds())
	})
	for range min(par, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= first+n || ctx.Err() != nil {
					return
				}
				a, err := e.startAgent(i, natsURL)
				if err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
				started.Add(1)
				e.mu.Lock()
				e.agents = append(e.agents, a)
				e.names = append(e.names, a.ID())
				e.mu.Unlock()
			}
		})
	}
	wg.Wait()
	stopProgress()
	if len(errs) > 0 {
		return 0, fmt.Errorf("starting agents: %w", errors.Join(errs...))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	want := base + n
	for {
		got, err := e.onlineCount(ctx)
		if err == nil && got >= want {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for %d agents online (controller counts %d): %w", want, got, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *Env) startAgent(i int, natsURL string) (*agent.Agent, error) {
	name := fmt.Sprintf("bench-%s-%d", e.runID, i+1)
	cfg := agent.DefaultConfig()
	cfg.Name = name
	cfg.Groups = []string{e.Group()}
	cfg.NATSURLs = []string{natsURL}
	cfg.DataDir = filepath.Join(e.dir, "agents", name)
	cfg.Sandbox = filepath.Join(cfg.DataDir, "sandbox")
	cfg.Logger = e.log
	switch {
	case e.fleet != nil && e.fleet.NATSOptions() != nil:
		// The embedded controller admits the simulated agents.
		cfg.CAFile, cfg.JoinTokenFile = e.fleet.CAFile(), e.fleet.JoinTokenFile()
	case e.fleet == nil && e.opts.ControllerDataDir != "":
		cfg.CAFile = filepath.Join(e.opts.ControllerDataDir, pki.CAFile)
		cfg.JoinTokenFile = filepath.Join(e.opts.ControllerDataDir, pki.JoinTokenFile)
	}
	// One backend set serves every simulated agent: building the built-in
	// set compiles the schemas' patterns, a per-process cost that would
	// otherwise dominate registering thousands of agents in one process.
	cfg.Registry = e.registry
	cfg.ShutdownGrace = agent.Duration(5 * time.Second)
	if e.opts.Heartbeat > 0 {
		cfg.HeartbeatInterval = agent.Duration(e.opts.Heartbeat)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	// The agent lives until agentsCtx ends (Close).
	if err := a.Start(e.agentsCtx); err != nil {
		return nil, err
	}
	return a, nil
}

// onlineCount is how many nodes the controller counts online.
func (e *Env) onlineCount(ctx context.Context) (int, error) {
	s, err := e.client.Status(ctx)
	if err != nil {
		return 0, err
	}
	return s.Nodes.Online, nil
}

// every runs fn each interval until the returned stop is called.
func (e *Env) every(d time.Duration, fn func()) func() {
	if e.progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done) }
}

// Memory reads this process's RSS and Go heap in use, and the controller's
// own figures from its /metrics when it runs elsewhere.
func (e *Env) Memory(ctx context.Context, r *RegisterReport) {
	r.Embedded = e.Embedded()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuseMiB = mib(ms.HeapInuse)
	if rss, err := ProcessRSS("self"); err == nil {
		r.ProcessRSSMiB = mib(rss)
	}
	if !r.Embedded {
		vals, err := scrapeMetrics(ctx, e.hc, e.apiURL+"/metrics", e.opts.Token,
			"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes")
		if err == nil {
			r.ControllerRSSMiB = mib(uint64(vals["process_resident_memory_bytes"]))
			r.ControllerHeapMiB = mib(uint64(vals["go_memstats_heap_inuse_bytes"]))
			r.ControllerStacksMiB = mib(uint64(vals["go_memstats_stack_inuse_bytes"]))
		} else {
			e.printf("  controller memory unavailable: %v", err)
		}
	}
}

// ControllerCPU reads the CPU time the controller's process has used
// (process_cpu_seconds_total from its /metrics); only for a controller that
// runs elsewhere.
func (e *Env) ControllerCPU(ctx context.Context) (float64, error) {
	if e.Embedded() {
		return 0, errors.New("embedded controller: its CPU is this process's")
	}
	vals, err := scrapeMetrics(ctx, e.hc, e.apiURL+"/metrics", e.opts.Token, "process_cpu_seconds_total")
	if err != nil {
		return 0, err
	}
	return vals["process_cpu_seconds_total"], nil
}

// ProcessRSS reads VmRSS of a process ("self" or a pid) from /proc.
func ProcessRSS(pid string) (uint64, error) {
	v, err := procStatus(pid, "VmRSS")
	return v["VmRSS"], err
}

// procStatus reads fields of a process's /proc/<pid>/status given in kB
// (VmRSS, RssAnon, ...), in bytes; a field it lacks is an error.
func procStatus(pid string, fields ...string) (map[string]uint64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	vals := make(map[string]uint64, len(fields))
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, v, ok := strings.Cut(s.Text(), ":")
		if !ok || !slices.Contains(fields, name) {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%s/status: %s: %w", pid, name, err)
		}
		vals[name] = kb << 10
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	for _, name := range fields {
		if _, ok := vals[name]; !ok {
			return nil, fmt.Errorf("no %s in /proc/%s/status", name, pid)
		}
	}
	return vals, nil
}

func scrapeMetrics(ctx context.Context, hc *http.Client, url, token string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		name, val, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					out[n] = f
				}
			}
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%s has no %s", url, n)
		}
	}
	return out, nil
}

// RaiseFDLimit lifts the soft open-files limit to at least want (two file
// descriptors per in-process agent: its end and the embedded server's),
// raising the hard limit too when the process may. It returns the limit in
// effect.
func RaiseFDLimit(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	if l.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return want, nil
		}
	}
	l.Cur = min(want, l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
