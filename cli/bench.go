//go:build !windows

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/internal/compose/bench"
)

// benchFlags are the flags every bench subcommand shares.
type benchFlags struct {
	agents    int
	nats      string
	heartbeat time.Duration
	parallel  int
	cpuProf   string
	memProf   string
	insecure  bool
	ctlDir    string
	logs      logOptions
	// The agent processes of bench fanout --agent-procs.
	agentBin       string
	agentLogLevel  string
	agentDebugPort int
	agentEnv       []string
	// sites opens the embedded controller's leaf port (bench sites).
	sites bool

	cpuFile *os.File
}

func newBenchCommand(g *globals) *cobra.Command {
	bf := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a controller with many simulated agents in this process",
		Long: `Start N simulated agents in this process — the real agent code, each with
its own node id, NATS connection, registration and heartbeat — and measure
a controller with them.

By default the controller is embedded in this process (temporary data dir,
removed at exit). With --addr and --nats the agents join an existing
deployment instead: --addr is its API, --nats the NATS URL agents connect
to. The agents are in a group of their own (bench-<run id>), so benchmark
jobs reach only them.

Progress goes to stderr; the result is a table, or JSON with -o json.`,
		Example: `  grid bench fanout --agents 1000 --rounds 20
  grid bench throughput --agents 100 --jobs 5000 -o json
  grid bench register --agents 10000 --addr 127.0.0.1:8765 --nats nats://127.0.0.1:4222`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&bf.agents, "agents", 100, "number of simulated agents")
	pf.StringVar(&bf.nats, "nats", "", "NATS URL of an existing deployment (with --addr); empty embeds a controller")
	pf.DurationVar(&bf.heartbeat, "heartbeat", 10*time.Second, "the simulated agents' heartbeat interval")
	pf.IntVar(&bf.parallel, "start-parallel", 64, "agents registering at once")
	pf.StringVar(&bf.cpuProf, "cpuprofile", "", "write a CPU profile of the measured part (controller and agents when embedded) to this file")
	pf.StringVar(&bf.memProf, "memprofile", "", "write an allocation profile at the end to this file, and one at the start of the measured part to FILE.base (compare with go tool pprof -diff_base)")
	pf.StringVar(&bf.ctlDir, "controller-data-dir", "", "with --addr: the controller's data dir on this machine (its CA, join token and client certificate); empty for an insecure controller")
	pf.BoolVar(&bf.insecure, "insecure", false, "embedded controller without NATS TLS and authentication (to measure their cost)")
	bf.logs.register(pf, "error")
	cmd.AddCommand(newBenchFanoutCommand(g, bf), newBenchThroughputCommand(g, bf), newBenchRegisterCommand(g, bf), newBenchSoakCommand(g, bf), newBenchSitesCommand(g, bf), newBenchResponderCommand())
	return cmd
}

// benchSetup checks the shared flags, raises the open-files limit and starts
// the environment. The returned context ends on Ctrl-C.
func benchSetup(cmd *cobra.Command, g *globals, bf *benchFlags) (context.Context, *bench.Env, func(), error) {
	if err := g.validate(); err != nil {
		return nil, nil, nil, err
	}
	if bf.agents < 1 {
		return nil, nil, nil, usageErrorf("--agents must be at least 1, got %d", bf.agents)
	}
	if bf.heartbeat <= 0 {
		return nil, nil, nil, usageErrorf("--heartbeat must be positive")
	}
	external := cmd.Flags().Changed("addr")
	if external != (bf.nats != "") {
		return nil, nil, nil, usageErrorf("an existing deployment needs both --addr (API) and --nats (NATS URL)")
	}
	logger, err := bf.logs.logger(g.stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	// Each in-process agent holds a socket, and an embedded server holds
	// the other end; the floor's subscribers hold as many again.
	want := uint64(bf.agents)*3 + 1024
	if got, err := bench.RaiseFDLimit(want); err != nil || got < want {
		_, _ = fmt.Fprintf(g.stderr, "warning: open-files limit is %d, %d agents may need %d (%v)\n", got, bf.agents, want, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	opts := bench.Options{Heartbeat: bf.heartbeat, StartParallel: bf.parallel, Progress: g.stderr, Logger: logger, Token: g.apiToken(), Insecure: bf.insecure, ControllerDataDir: bf.ctlDir, CAFile: g.cacert,
		AgentBin: bf.agentBin, AgentLogLevel: bf.agentLogLevel, AgentDebugPort: bf.agentDebugPort, AgentEnv: bf.agentEnv, Sites: bf.sites}
	if external {
		opts.APIAddr, opts.NATSURL = g.addr, bf.nats
	}
	where := "an embedded controller"
	if external {
		where = g.addr
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: %d agents against %s\n", bf.agents, where)
	env, err := bench.Setup(ctx, opts)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, env, func() {
		bf.stopProfiles(g)
		_, _ = fmt.Fprintln(g.stderr, "bench: stopping agents")
		env.Close()
		stop()
	}, nil
}

// startProfiles starts the CPU profile and takes the base allocation
// profile, at the start of the part a subcommand measures (not the floor or
// the agents' start-up, unless that is what it measures).
func (bf *benchFlags) startProfiles() error {
	if bf.memProf != "" {
		if err := writeAllocs(bf.memProf + ".base"); err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}
	if bf.cpuProf == "" {
		return nil
	}
	f, err := os.Create(bf.cpuProf)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	bf.cpuFile = f
	return nil
}

// stopProfiles ends the CPU profile and writes the allocation profile.
func (bf *benchFlags) stopProfiles(g *globals) {
	if bf.cpuFile != nil {
		pprof.StopCPUProfile()
		_ = bf.cpuFile.Close()
		bf.cpuFile = nil
	}
	if bf.memProf != "" {
		if err := writeAllocs(bf.memProf); err != nil {
			_, _ = fmt.Fprintf(g.stderr, "warning: --memprofile: %v\n", err)
		}
	}
}

func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // up-to-date figures
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func printBench[T interface{ Table(w io.Writer) }](g *globals, r T) error {
	if g.json() {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.Table(g.stdout)
	return nil
}

func newBenchFanoutCommand(g *globals, bf *benchFlags) *cobra.Command {
	var (
		rounds        int
		procs         int
		agentBin      string
		agentLogLevel string
		agentDebug    int
		agentEnv      []string
	)
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "Time a one-step ping echo job to every agent, against the raw NATS fan-out floor",
		Long: `Submit a one-step "ping echo" job to all agents through the HTTP API, rounds
times one after the other, and time each from submit to the long poll
(GET /job/{id}?wait=…) answering completed. Each job's stored results must
hold one successful echo from every agent, or the command fails.

The floor is measured on the same NATS server first: as many plain
subscribers as agents, one connection each, reply to one core message; a
round is publish to last reply. ratio_p50 is p50 over the floor's p50.
One warm-up round of each is not counted.

With --agent-procs N the agents are N real "grid agent" processes of the
deployed build (--agent-bin, default this binary; a grid-agent binary runs as
grid-agent --config FILE), each with a config file,
the controller's CA and join token, logging at --agent-log-level to a file;
the floor is N responder processes ("grid bench responder"), one NATS
connection each. A round is then timed as the controller saw it (the job's
created_at to finished_at), and the agents' CPU per command is their
utime+stime (/proc/<pid>/stat) over the counted rounds divided by N × rounds.`,
		Example: `  grid bench fanout --agents 1000 --rounds 20
  grid bench fanout --agent-procs 300 --rounds 10`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if rounds < 1 {
				return usageErrorf("--rounds must be at least 1, got %d", rounds)
			}
			if procs < 0 {
				return usageErrorf("--agent-procs must not be negative, got %d", procs)
			}
			if procs > 0 {
				if cmd.Flags().Changed("agents") {
					return usageErrorf("--agents and --agent-procs: give one")
				}
				bf.agents = procs
				if agentBin == "" {
					exe, err := os.Executable()
					if err != nil {
						return fmt.Errorf("--agent-bin: %w", err)
					}
					agentBin = exe
				}
				bf.agentBin, bf.agentLogLevel, bf.agentDebugPort, bf.agentEnv = agentBin, agentLogLevel, agentDebug, agentEnv
			}
			ctx, env, done, err := benchSetup(cmd, g, bf)
			if err != nil {
				return err
			}
			defer done()
			if procs > 0 {
				return runProcFanout(ctx, g, bf, env, procs, rounds)
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: floor: %d NATS subscribers\n", bf.agents)
			floor, err := env.Floor(ctx, bf.agents, max(rounds, 10))
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agents\n", bf.agents)
			if _, err := env.StartAgents(ctx, bf.agents); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: %d rounds\n", rounds)
			if err := bf.startProfiles(); err != nil {
				return err
			}
			res, err := env.Fanout(ctx, rounds, nil)
			if err != nil {
				return err
			}
			return printBench(g, bench.NewFanoutReport(bf.agents, res.Latencies, floor, res.Verified, res.CPU))
		}),
	}
	cmd.Flags().IntVar(&rounds, "rounds", 10, "jobs to time")
	cmd.Flags().IntVar(&procs, "agent-procs", 0, "run this many agents as separate grid agent processes (instead of --agents in this process)")
	cmd.Flags().StringVar(&agentBin, "agent-bin", "", "with --agent-procs: the grid binary to run (default: this one)")
	cmd.Flags().StringVar(&agentLogLevel, "agent-log-level", "info", "with --agent-procs: the agent processes' --log-level")
	cmd.Flags().StringArrayVar(&agentEnv, "agent-env", nil, "with --agent-procs: KEY=VALUE added to the agent processes' environment (GOMAXPROCS=1, ...); repeatable")
	cmd.Flags().IntVar(&agentDebug, "agent-debug-port", 0, "with --agent-procs: serve pprof on 127.0.0.1 from this port up, one port per agent (debug_addr)")
	return cmd
}

// idleSample is how long the agent processes' idle CPU is read before the
// rounds.
const idleSample = 2 * time.Second

// runProcFanout is bench fanout with agents and floor as real processes.
func runProcFanout(ctx context.Context, g *globals, bf *benchFlags, env *bench.Env, n, rounds int) error {
	_, _ = fmt.Fprintf(g.stderr, "bench: floor: %d responder processes\n", n)
	floor, err := env.FloorProcs(ctx, n, max(rounds, 10))
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agent processes\n", n)
	took, err := env.StartAgentProcs(ctx, n)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: %d agent processes online after %.1fs; reading their idle CPU for %s\n", n, took.Seconds(), idleSample)
	idle0, err := env.AgentProcsCPU()
	if err != nil {
		return err
	}
	idleStart := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleSample):
	}
	idle1, err := env.AgentProcsCPU()
	if err != nil {
		return err
	}
	idle := time.Since(idleStart)
	_, _ = fmt.Fprintf(g.stderr, "bench: %d rounds\n", rounds)
	if err := bf.startProfiles(); err != nil {
		return err
	}
	var cpu0 time.Duration
	var cpuErr error
	res, err := env.Fanout(ctx, rounds, func() { cpu0, cpuErr = env.AgentProcsCPU() })
	if err != nil {
		return err
	}
	cpu1, err := env.AgentProcsCPU()
	if err = errors.Join(cpuErr, err); err != nil {
		return err
	}
	return printBench(g, bench.NewProcFanoutReport(n, res, floor, env.FloorCPUPerMessage(), cpu1-cpu0, idle1-idle0, idle))
}

func newBenchResponderCommand() *cobra.Command {
	var natsURL, subject, caFile, cert, key string
	cmd := &cobra.Command{
		Use:    "responder",
		Short:  "A plain NATS responder process: the floor of bench fanout --agent-procs",
		Hidden: true,
		Args:   exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if natsURL == "" || subject == "" {
				return usageErrorf("--nats and --subject are required")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.Respond(ctx, natsURL, subject, caFile, cert, key, cmd.OutOrStdout())
		}),
	}
	f := cmd.Flags()
	f.StringVar(&natsURL, "nats", "", "NATS URL")
	f.StringVar(&subject, "subject", "", "subject to answer")
	f.StringVar(&caFile, "ca-file", "", "CA of the server's certificate")
	f.StringVar(&cert, "cert", "", "client certificate")
	f.StringVar(&key, "key", "", "client certificate's key")
	return cmd
}

func newBenchThroughputCommand(g *globals, bf *benchFlags) *cobra.Command {
	var jobs, inFlight int
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Submit many single-node jobs concurrently and report jobs/s",
		Long: `Submit --jobs one-step "ping echo" jobs, each to one agent (round robin), with
at most --in-flight submitted and not yet completed at once; each is waited
for with the long poll. Reports jobs/s over the whole run and the
submit-to-completed latency. Every job is checked in the jobs bucket
afterwards.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if jobs < 1 || inFlight < 1 {
				return usageErrorf("--jobs and --in-flight must be at least 1")
			}
			ctx, env, done, err := benchSetup(cmd, g, bf)
			if err != nil {
				return err
			}
			defer done()
			_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agents\n", bf.agents)
			if _, err := env.StartAgents(ctx, bf.agents); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: %d jobs, %d in flight\n", jobs, inFlight)
			if err := bf.startProfiles(); err != nil {
				return err
			}
			res, err := env.Throughput(ctx, jobs, inFlight)
			if err != nil {
				return err
			}
			return printBench(g, bench.NewThroughputReport(bf.agents, inFlight, res.Elapsed, res.Latencies, res.Rejected, res.CPU))
		}),
	}
	cmd.Flags().IntVar(&jobs, "jobs", 2000, "jobs to submit")
	cmd.Flags().IntVar(&inFlight, "in-flight", 64, "jobs submitted and not completed at most at once")
	return cmd
}

func newBenchRegisterCommand(g *globals, bf *benchFlags) *cobra.Command {
	var settle time.Duration
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Time until N agents are online and read the memory they and the controller use",
		Long: `Start the agents and time from the first start until the controller counts
all of them online; then let them heartbeat for --settle and read memory.

Embedded, the figures are this process's RSS (/proc/self/status VmRSS) and
Go heap in use: the controller, its NATS server and every simulated agent
together. Against an existing deployment (--addr, --nats), the controller's
own RSS, heap and goroutine stacks, and its CPU use during the settle (percent
of one core), come from its /metrics, and this process's figures are the
agents'. The agents stay online and heartbeating until memory is read.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			ctx, env, done, err := benchSetup(cmd, g, bf)
			if err != nil {
				return err
			}
			defer done()
			if err := bf.startProfiles(); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agents\n", bf.agents)
			took, err := env.StartAgents(ctx, bf.agents)
			if err != nil {
				return err
			}
			s := settle
			if !cmd.Flags().Changed("settle") {
				s = bf.heartbeat
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: %d agents online after %.2fs; heartbeating for %s\n", bf.agents, took.Seconds(), s)
			cpu0, cpuErr := env.ControllerCPU(ctx)
			settleStart := time.Now()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(s):
			}
			r := bench.RegisterReport{Agents: bf.agents, Seconds: float64(took.Milliseconds()) / 1000, SettledSeconds: s.Seconds()}
			if cpu1, err := env.ControllerCPU(ctx); cpuErr == nil && err == nil {
				r.ControllerCPUPercent = (cpu1 - cpu0) / time.Since(settleStart).Seconds() * 100
			}
			env.Memory(ctx, &r)
			return printBench(g, r)
		}),
	}
	cmd.Flags().DurationVar(&settle, "settle", 0, "how long agents heartbeat before memory is read (default: one heartbeat interval)")
	return cmd
}

func newBenchSoakCommand(g *globals, bf *benchFlags) *cobra.Command {
	var (
		procs    int
		rate     float64
		duration time.Duration
		interval time.Duration
		inFlight int
		plotFile string
		ctlBin   string
		ctlArgs  []string
		agentBin string
		keepData bool
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run fan-out jobs at a steady rate for a long time and sample memory, files, storage and latency",
		Long: `Start a controller process of its own ("grid controller" of --controller-bin,
default this binary, with a temporary data dir, on free ports of 127.0.0.1),
--agents agents of which --agent-procs are separate "grid agent" processes
(--agent-bin; the rest run in this process), and submit a one-step ping
echo job to every agent --rate times a second for --duration, each waited
for with the long poll.

Every --interval (and before the first job and after the last) it samples:
the controller process's RSS (/proc/<pid>/status), its live heap, heap in
use, soft memory limit, goroutines and open files (its /metrics), what the
jobs bucket (KV_jobs) and the results stream hold, one agent process's RSS
(and its anonymous part), live heap, goroutines (from its profiler, on a free
port of 127.0.0.1) and open files, and the p50/p99 of the jobs completed in the interval. It
prints a table of the samples (or JSON with -o json) and draws them over
time to a PNG (--plot).

A tick that finds --max-in-flight jobs still waiting submits nothing and is
counted as skipped: the controller did not keep up with the rate.`,
		Example: `  grid bench soak --agents 300 --agent-procs 300 --agent-bin bin/grid-agent --rate 1 --duration 30m --plot soak.png
  grid bench soak --agents 5 --agent-procs 2 --duration 10s --interval 3s --plot /tmp/soak.png`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			if cmd.Flags().Changed("addr") || bf.nats != "" {
				return usageErrorf("bench soak starts a controller process of its own (to read its RSS): --addr and --nats do not apply")
			}
			if bf.agents < 1 {
				return usageErrorf("--agents must be at least 1, got %d", bf.agents)
			}
			if !cmd.Flags().Changed("agent-procs") {
				procs = bf.agents
			}
			if procs < 1 || procs > bf.agents {
				return usageErrorf("--agent-procs must be between 1 (the agent process sampled) and --agents (%d), got %d", bf.agents, procs)
			}
			if rate <= 0 || rate > 1000 {
				return usageErrorf("--rate must be above 0 and at most 1000 jobs/s, got %g", rate)
			}
			if duration <= 0 || interval <= 0 || interval > duration {
				return usageErrorf("--duration and --interval must be positive, the interval at most the duration (got %s, %s)", duration, interval)
			}
			if inFlight < 1 {
				return usageErrorf("--max-in-flight must be at least 1")
			}
			if plotFile == "" {
				return usageErrorf("--plot needs a file name")
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("this binary: %w", err)
			}
			if ctlBin == "" {
				ctlBin = self
			}
			if agentBin == "" {
				agentBin = self
			}
			logger, err := bf.logs.logger(g.stderr)
			if err != nil {
				return err
			}
			want := uint64(bf.agents)*3 + 1024
			if got, err := bench.RaiseFDLimit(want); err != nil || got < want {
				_, _ = fmt.Fprintf(g.stderr, "warning: open-files limit is %d, %d agents may need %d (%v)\n", got, bf.agents, want, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dir, err := os.MkdirTemp("", "grid-soak-")
			if err != nil {
				return err
			}
			defer func() {
				if keepData {
					_, _ = fmt.Fprintf(g.stderr, "bench: the controller's data dir and log are in %s\n", dir)
					return
				}
				_ = os.RemoveAll(dir)
			}()
			_, _ = fmt.Fprintf(g.stderr, "bench: starting the controller (%s)\n", ctlBin)
			ctl, err := bench.StartControllerProc(ctx, ctlBin, dir, ctlArgs)
			if err != nil {
				return err
			}
			defer ctl.Stop()
			token, err := ctl.Token()
			if err != nil {
				return err
			}
			// The sampled agent process serves its profiler, where its
			// heap and goroutines are read.
			agentDebug, err := bench.FreeLocalAddr()
			if err != nil {
				return err
			}
			opts := bench.Options{APIAddr: ctl.APIAddr, NATSURL: ctl.NATSURL, ControllerDataDir: ctl.DataDir, Token: token,
				Heartbeat: bf.heartbeat, StartParallel: bf.parallel, Progress: g.stderr, Logger: logger,
				AgentBin: agentBin, AgentLogLevel: "warn", SampledAgentDebugAddr: agentDebug}
			// The controller's API accepts connections a moment before it
			// answers (its streams and stores start behind it): try again
			// for a while, on a loaded machine too.
			var env *bench.Env
			for deadline := time.Now().Add(time.Minute); ; {
				if env, err = bench.Setup(ctx, opts); err == nil || ctx.Err() != nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("controller at %s (log: %s): %w", ctl.APIAddr, filepath.Join(dir, "controller.log"), err)
			}
			defer func() {
				_, _ = fmt.Fprintln(g.stderr, "bench: stopping agents")
				env.Close()
			}()
			_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agent processes; the sampled one serves its profiler at http://%s/debug/pprof/\n", procs, agentDebug)
			if _, err := env.StartAgentProcs(ctx, procs); err != nil {
				return err
			}
			if n := bf.agents - procs; n > 0 {
				_, _ = fmt.Fprintf(g.stderr, "bench: starting %d agents in this process\n", n)
				if _, err := env.StartAgents(ctx, n); err != nil {
					return err
				}
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: %g jobs/s to %d agents for %s, a sample every %s\n", rate, bf.agents, duration, interval)
			samples, err := env.Soak(ctx, bench.SoakOptions{Rate: rate, Duration: duration, Interval: interval, MaxInFlight: inFlight,
				ControllerPID: ctl.PID(), StoreDir: ctl.DataDir, OnSample: func(s bench.SoakSample) {
					_, _ = fmt.Fprintf(g.stderr, "  %.1f min: %d jobs (%d failed, %d skipped), p50 %.1f ms, p99 %.1f ms; controller RSS %.1f MiB, live heap %.1f MiB, %d goroutines, %d files; KV_jobs %.2f MiB, results %.2f MiB; agent RSS %.1f MiB (anonymous %.1f), live heap %.2f MiB, %d goroutines, %d files\n",
						s.Minutes, s.Jobs, s.Failed, s.Skipped, s.P50Ms, s.P99Ms, s.CtlRSSMiB, s.CtlLiveHeapMiB, s.CtlGoroutines, s.CtlOpenFDs,
						float64(s.JobsStoreBytes)/(1<<20), float64(s.ResultsBytes)/(1<<20), s.AgentRSSMiB, s.AgentAnonMiB, s.AgentLiveHeapMiB, s.AgentGoroutines, s.AgentOpenFDs)
				}})
			if err != nil && len(samples) < 2 {
				return err
			}
			r := bench.NewSoakReport(bf.agents, procs, rate, interval.Seconds(), samples)
			if perr := r.WritePNG(plotFile); perr != nil {
				return perr
			}
			_, _ = fmt.Fprintf(g.stderr, "bench: plot written to %s\n", plotFile)
			if perr := printBench(g, r); perr != nil {
				return perr
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.IntVar(&procs, "agent-procs", 0, "how many of --agents run as separate agent processes (default: all; at least 1, the one sampled)")
	f.Float64Var(&rate, "rate", 1, "fan-out jobs submitted per second")
	f.DurationVar(&duration, "duration", 30*time.Minute, "how long jobs are submitted")
	f.DurationVar(&interval, "interval", time.Minute, "how often the figures are sampled")
	f.IntVar(&inFlight, "max-in-flight", 16, "jobs submitted and not yet completed at most; a tick beyond is skipped")
	f.StringVar(&plotFile, "plot", "soak.png", "PNG file the samples are drawn to")
	f.StringVar(&ctlBin, "controller-bin", "", "the grid binary the controller process runs (default: this one)")
	f.StringArrayVar(&ctlArgs, "controller-arg", nil, "an argument added to the controller's command line (--memory-limit=0, ...); repeatable")
	f.StringVar(&agentBin, "agent-bin", "", "the binary of the agent processes: grid (runs grid agent) or the slim grid-agent (default: this one)")
	f.BoolVar(&keepData, "keep-data", false, "keep the controller's and agents' data dirs and logs (their path is printed)")
	return cmd
}
