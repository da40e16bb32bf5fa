package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// ControllerProc is a `grid controller` process the soak starts and
// samples: its memory is its own, not mixed with the agents' or the bench's.
type ControllerProc struct {
	// APIAddr is its API (host:port), NATSURL where agents connect.
	APIAddr string
	NATSURL string
	// DataDir holds its CA, join token and admin token.
	DataDir string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// PID is the controller's process id.
func (c *ControllerProc) PID() int { return c.cmd.Process.Pid }

// Token is the controller's first admin token, from its data dir.
func (c *ControllerProc) Token() (string, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "admin-token"))
	if err != nil {
		return "", fmt.Errorf("controller admin token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Stop sends SIGTERM and waits up to 30 s before killing it.
func (c *ControllerProc) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process may take it before the controller binds it; the controller then
// fails to start and says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeLocalAddr is 127.0.0.1 and a free port (see freePort): a debug_addr
// for the sampled agent process.
func FreeLocalAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// StartControllerProc runs bin as "grid controller" with a data dir under
// dir, its API and NATS on free ports of 127.0.0.1, logging to
// dir/controller.log, plus extra arguments (--memory-limit=0, ...), and
// returns once its API accepts connections and its admin token is written.
func StartControllerProc(ctx context.Context, bin, dir string, extra []string) (*ControllerProc, error) {
	apiPort, err := freePort()
	if err != nil {
		return nil, err
	}
	natsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &ControllerProc{APIAddr: "127.0.0.1:" + strconv.Itoa(apiPort), NATSURL: "nats://127.0.0.1:" + strconv.Itoa(natsPort),
		DataDir: filepath.Join(dir, "controller"), exited: make(chan struct{})}
	args := append([]string{"controller", "--data-dir", c.DataDir, "--api-addr", c.APIAddr,
		"--nats-addr", "127.0.0.1:" + strconv.Itoa(natsPort), "--log-level", "warn"}, extra...)
	logFile := filepath.Join(dir, "controller.log")
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // the child holds its own copy
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	// A bench that dies takes the controller along.
	c.cmd.SysProcAttr = childProcAttr()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start controller %s: %w", bin, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	deadline := time.After(60 * time.Second)
	for {
		_, terr := os.Stat(filepath.Join(c.DataDir, "admin-token"))
		if terr == nil {
			if conn, err := net.DialTimeout("tcp", c.APIAddr, time.Second); err == nil {
				_ = conn.Close()
				return c, nil
			}
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("controller exited at start (%s); see %s", c.cmd.ProcessState, logFile)
		case <-ctx.Done():
			c.Stop()
			return nil, ctx.Err()
		case <-deadline:
			c.Stop()
			return nil, fmt.Errorf("controller not ready after 60s; see %s", logFile)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SoakOptions say how hard and how long a soak runs.
type SoakOptions struct {
	// Rate is the fan-out jobs submitted per second, each to every agent.
	Rate float64
	// Duration is how long jobs are submitted.
	Duration time.Duration
	// Interval is how often the figures are sampled.
	Interval time.Duration
	// MaxInFlight bounds the jobs submitted and not yet completed; a tick
	// that finds that many waiting submits nothing and counts as skipped
	// (the controller cannot keep up with Rate).
	MaxInFlight int
	// ControllerPID is the controller's process (its RSS from /proc).
	ControllerPID int
	// StoreDir, when set, is the controller's JetStream store on this
	// machine (its data dir): the streams' size on disk is read there.
	StoreDir string
	// OnSample, when set, receives each sample as it is taken.
	OnSample func(SoakSample)
}

// SoakSample is what one interval of a soak saw, and the state at its end.
type SoakSample struct {
	// Minutes is the time since the first job, at the sample.
	Minutes float64 `json:"minutes"`
	// Jobs completed in the interval, JobsTotal since the start; Failed
	// ended otherwise (or could not be submitted) and Skipped ticks found
	// MaxInFlight jobs waiting, in the interval.
	Jobs      int `json:"jobs"`
	JobsTotal int `json:"jobs_total"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
	// P50Ms and P99Ms are the submit-to-completed times of the interval's
	// jobs.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// The controller process: RSS (/proc/<pid>/status), the live heap the
	// last collection marked, heap in use (live and garbage), the soft
	// memory limit in force (0: none), goroutines and open files (its
	// /metrics).
	CtlRSSMiB      float64 `json:"controller_rss_mib"`
	CtlLiveHeapMiB float64 `json:"controller_live_heap_mib"`
	CtlHeapMiB     float64 `json:"controller_heap_inuse_mib"`
	CtlLimitMiB    float64 `json:"controller_memory_limit_mib"`
	CtlGoroutines  int     `json:"controller_goroutines"`
	CtlOpenFDs     int     `json:"controller_open_fds"`
	// JobsStoreMiB and ResultsMiB are what the jobs bucket (KV_jobs) and
	// the results stream hold on disk.
	JobsStoreBytes uint64 `json:"kv_jobs_bytes"`
	ResultsBytes   uint64 `json:"results_bytes"`
	// JobsDiskBytes and ResultsDiskBytes are their files' size on disk
	// (compressed blocks; 0 without SoakOptions.StoreDir).
	JobsDiskBytes    uint64 `json:"kv_jobs_disk_bytes"`
	ResultsDiskBytes uint64 `json:"results_disk_bytes"`
	// One agent process: RSS, the part of it that is anonymous memory
	// (heap, stacks, the runtime's own; the rest is the binary's pages
	// read in) and open files.
	AgentRSSMiB  float64 `json:"agent_rss_mib"`
	AgentAnonMiB float64 `json:"agent_rss_anon_mib"`
	AgentOpenFDs int     `json:"agent_open_fds"`
	// With Options.SampledAgentDebugAddr, from the agent's profiler: its
	// live heap (HeapAlloc right after a collection the read asks for) and
	// goroutines.
	AgentLiveHeapMiB float64 `json:"agent_live_heap_mib,omitempty"`
	AgentGoroutines  int     `json:"agent_goroutines,omitempty"`
	// Errors says which figures could not be read (they are 0).
	Errors []string `json:"errors,omitempty"`
}

// soakWindow collects the jobs of one interval.
type soakWindow struct {
	mu      sync.Mutex
	lat     []time.Duration
	failed  int
	skipped int
	total   int
	errs    []error
}

func (w *soakWindow) done(d time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed++
		if len(w.errs) < 5 {
			w.errs = append(w.errs, err)
		}
		return
	}
	w.lat = append(w.lat, d)
	w.total++
}

// take returns the interval's figures and starts the next.
func (w *soakWindow) take() (lat []time.Duration, failed, skipped, total int, errs []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lat, failed, skipped, total, errs = w.lat, w.failed, w.skipped, w.total, w.errs
	w.lat, w.failed, w.skipped, w.errs = nil, 0, 0, nil
	return
}

// Soak submits fan-out jobs (FanoutJob: one ping echo to every agent of the
// run) at opts.Rate for opts.Duration, each waited for with the long poll,
// and samples the controller, one agent process and the stores every
// opts.Interval, the first sample before any job. It returns the samples;
// jobs that fail are counted, and their first errors reported, but do not
// stop the run.
func (e *Env) Soak(ctx context.Context, opts SoakOptions) ([]SoakSample, error) {
	if opts.Rate <= 0 || opts.Duration <= 0 || opts.Interval <= 0 {
		return nil, errors.New("soak: rate, duration and interval must be positive")
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 64
	}
	var (
		w        soakWindow
		inFlight atomic.Int64
		wg       sync.WaitGroup
		samples  []SoakSample
	)
	start := time.Now()
	sample := func() {
		lat, failed, skipped, total, errs := w.take()
		s := e.soakSample(ctx, opts.ControllerPID, opts.StoreDir)
		s.Minutes = time.Since(start).Minutes()
		s.Jobs, s.Failed, s.Skipped, s.JobsTotal = len(lat), failed, skipped, total
		s.P50Ms, s.P99Ms = ms(Percentile(lat, 50)), ms(Percentile(lat, 99))
		for _, err := range errs {
			s.Errors = append(s.Errors, "job: "+err.Error())
		}
		samples = append(samples, s)
		if opts.OnSample != nil {
			opts.OnSample(s)
		}
	}
	sample()
	submit := time.NewTicker(time.Duration(float64(time.Second) / opts.Rate))
	defer submit.Stop()
	every := time.NewTicker(opts.Interval)
	defer every.Stop()
	end := time.After(opts.Duration)
	jobCtx, cancelJobs := context.WithCancel(ctx)
	defer cancelJobs()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-every.C:
			sample()
		case <-submit.C:
			if inFlight.Load() >= int64(opts.MaxInFlight) {
				w.mu.Lock()
				w.skipped++
				w.mu.Unlock()
				continue
			}
			inFlight.Add(1)
			wg.Go(func() {
				defer inFlight.Add(-1)
				t0 := time.Now()
				j, err := e.client.SubmitJob(jobCtx, e.FanoutJob())
				if err == nil {
					j, err = e.client.WaitJob(jobCtx, j.ID)
				}
				if err == nil && j.Status != api.JobCompleted {
					err = fmt.Errorf("job %s ended %s: %s", j.ID, j.Status, j.Error)
				}
				if jobCtx.Err() != nil {
					return // the run ended, not the job
				}
				w.done(time.Since(t0), err)
			})
		}
	}
	// The jobs still running finish (up to a minute) and are counted in
	// the last sample.
	waited := make(chan struct{})
	go func() {
		wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		cancelJobs()
		<-waited
	case <-ctx.Done():
		cancelJobs()
		<-waited
	}
	if ctx.Err() != nil {
		return samples, ctx.Err()
	}
	sample()
	return samples, nil
}

// soakSample reads the state figures of a sample; what cannot be read is
// named in Errors and left 0.
func (e *Env) soakSample(ctx context.Context, ctlPID int, storeDir string) SoakSample {
	var s SoakSample
	fail := func(what string, err error) { s.Errors = append(s.Errors, what+": "+err.Error()) }
	if ctlPID > 0 {
		if rss, err := ProcessRSS(strconv.Itoa(ctlPID)); err == nil {
			s.CtlRSSMiB = mib(rss)
		} else {
			fail("controller RSS", err)
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	vals, err := scrapeMetrics(mctx, e.hc, e.apiURL+"/metrics", e.opts.Token, "go_gc_heap_live_bytes", "go_memstats_heap_inuse_bytes",
		"go_gc_gomemlimit_bytes", "go_goroutines", "process_open_fds")
	cancel()
	if err == nil {
		s.CtlLiveHeapMiB = mib(uint64(vals["go_gc_heap_live_bytes"]))
		s.CtlHeapMiB = mib(uint64(vals["go_memstats_heap_inuse_bytes"]))
		if l := vals["go_gc_gomemlimit_bytes"]; l < 1<<62 {
			s.CtlLimitMiB = mib(uint64(l))
		}
		s.CtlGoroutines, s.CtlOpenFDs = int(vals["go_goroutines"]), int(vals["process_open_fds"])
	} else {
		fail("controller metrics", err)
	}
	if b, err := e.streamBytes(ctx, bus.KVStream(api.BucketJobs)); err == nil {
		s.JobsStoreBytes = b
	} else {
		fail("KV_jobs", err)
	}
	if b, err := e.streamBytes(ctx, api.StreamResults); err == nil {
		s.ResultsBytes = b
	} else {
		fail("results", err)
	}
	if storeDir != "" {
		var err error
		if s.JobsDiskBytes, err = streamDiskBytes(storeDir, bus.KVStream(api.BucketJobs)); err != nil {
			fail("KV_jobs on disk", err)
		}
		if s.ResultsDiskBytes, err = streamDiskBytes(storeDir, api.StreamResults); err != nil {
			fail("results on disk", err)
		}
	}
	e.mu.Lock()
	var agentPID int
	if len(e.procs) > 0 {
		agentPID = e.procs[0].cmd.Process.Pid
	}
	e.mu.Unlock()
	if agentPID > 0 {
		if v, err := procStatus(strconv.Itoa(agentPID), "VmRSS", "RssAnon"); err == nil {
			s.AgentRSSMiB, s.AgentAnonMiB = mib(v["VmRSS"]), mib(v["RssAnon"])
		} else {
			fail("agent RSS", err)
		}
		if addr := e.opts.SampledAgentDebugAddr; addr != "" && e.opts.AgentDebugPort == 0 {
			if heap, n, err := agentGoStats(ctx, "http://"+addr); err == nil {
				s.AgentLiveHeapMiB, s.AgentGoroutines = mib(heap), n
			} else {
				fail("agent heap", err)
			}
		}
		if n, err := OpenFDs(agentPID); err == nil {
			s.AgentOpenFDs = n
		} else {
			fail("agent open files", err)
		}
	}
	return s
}

// streamBytes is what a stream holds, from JetStream's stream info.
func (e *Env) streamBytes(ctx context.Context, name string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	js, err := jetstream.New(e.nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Bytes, nil
}

// OpenFDs counts a process's open file descriptors (/proc/<pid>/fd).
func OpenFDs(pid int) (int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}

// streamDiskBytes sums the sizes of a stream's files in a JetStream store
// (<store>/jetstream/<account>/streams/<name>/..., the store being the
// data dir or, for the controller's embedded server, its jetstream
// subdirectory).
func streamDiskBytes(dir, name string) (uint64, error) {
	var dirs []string
	for _, pattern := range []string{filepath.Join(dir, "jetstream", "*", "streams", name), filepath.Join(dir, "jetstream", "jetstream", "*", "streams", name)} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return 0, err
		}
		dirs = append(dirs, m...)
	}
	if len(dirs) == 0 {
		return 0, fmt.Errorf("no stream %s under %s", name, dir)
	}
	var n uint64
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(_ string, de os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.Type().IsRegular() {
				fi, err := de.Info()
				if err != nil {
					return err
				}
				n += uint64(fi.Size())
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// agentGoStats reads an agent's live heap and goroutine count from its
// profiler (debug_addr): HeapAlloc of the runtime.MemStats the heap profile
// ends with, read right after the collection gc=1 asks for (one extra
// collection per sample), and the goroutine profile's total. Its
// connections are closed after each read, so the agent's open files count
// only the profiler's listener on top of its own.
func agentGoStats(ctx context.Context, base string) (heap uint64, goroutines int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path, prefix string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", path, resp.Status)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				return strings.TrimSpace(v), nil
			}
		}
		if err := sc.Err(); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return "", fmt.Errorf("%s: no %q line", path, prefix)
	}
	v, err := get("/debug/pprof/heap?debug=1&gc=1", "# HeapAlloc = ")
	if err != nil {
		return 0, 0, err
	}
	if heap, err = strconv.ParseUint(v, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("heap profile: HeapAlloc %q: %w", v, err)
	}
	if v, err = get("/debug/pprof/goroutine?debug=1", "goroutine profile: total "); err != nil {
		return 0, 0, err
	}
	if goroutines, err = strconv.Atoi(v); err != nil {
		return 0, 0, fmt.Errorf("goroutine profile: total %q: %w", v, err)
	}
	return heap, goroutines, nil
}
