// Package bench measures a GRID controller with many simulated agents in
// one process: the real agent code, each agent with its own identity, NATS
// connection and registration. `grid bench` drives it.
package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method: the smallest sample with at least p% of the samples
// at or below it. It returns 0 for no samples and does not modify ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// ms turns a duration into milliseconds rounded to 0.01.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*100) / 100
}

// ratio is a/b rounded to 0.01; 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

// mib turns bytes into MiB rounded to 0.1.
func mib(b uint64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

// FanoutReport is the result of a fan-out benchmark: a one-step job to every
// agent, submit to completed, against the raw NATS floor on the same server.
type FanoutReport struct {
	Agents int     `json:"agents"`
	Rounds int     `json:"rounds"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// FloorP50Ms is the median time to send one core NATS message to
	// Agents plain subscribers (one connection each) and collect their
	// Agents replies.
	FloorP50Ms float64 `json:"floor_p50_ms"`
	FloorP90Ms float64 `json:"floor_p90_ms"`
	// RatioP50 is P50Ms / FloorP50Ms.
	RatioP50 float64 `json:"ratio_p50"`
	// Verified counts the jobs whose stored results held one successful
	// result from every agent.
	Verified int `json:"verified"`
	// CPUMsPerRound is this process's CPU time per round, user and system:
	// the controller, its NATS server and every agent when the controller
	// is embedded, the agents alone otherwise. On a shared machine it is
	// steadier than the wall time.
	CPUMsPerRound float64 `json:"cpu_ms_per_round"`
}

// NewFanoutReport computes the percentiles of the samples; cpu is the CPU
// time of all rounds.
func NewFanoutReport(agents int, jobs, floor []time.Duration, verified int, cpu time.Duration) FanoutReport {
	r := FanoutReport{Agents: agents, Rounds: len(jobs), Verified: verified,
		P50Ms: ms(Percentile(jobs, 50)), P90Ms: ms(Percentile(jobs, 90)), P99Ms: ms(Percentile(jobs, 99)),
		MaxMs: ms(Percentile(jobs, 100)), FloorP50Ms: ms(Percentile(floor, 50)), FloorP90Ms: ms(Percentile(floor, 90))}
	r.RatioP50 = ratio(r.P50Ms, r.FloorP50Ms)
	if len(jobs) > 0 {
		r.CPUMsPerRound = ms(cpu / time.Duration(len(jobs)))
	}
	return r
}

// Table prints the report for a terminal.
func (r FanoutReport) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "agents\trounds\tp50 ms\tp90 ms\tp99 ms\tmax ms\tfloor p50 ms\tfloor p90 ms\tratio p50\tcpu ms/round\t")
	_, _ = fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", r.Agents, r.Rounds,
		r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs, r.FloorP50Ms, r.FloorP90Ms, r.RatioP50, r.CPUMsPerRound)
	_ = tw.Flush()
}

// ThroughputReport is the result of a throughput benchmark: many
// single-node jobs submitted concurrently.
type ThroughputReport struct {
	Agents      int     `json:"agents"`
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	JobsPerS    float64 `json:"jobs_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P90Ms       float64 `json:"p90_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	// Rejected counts submissions answered 429 (and retried).
	Rejected int `json:"rejected"`
	// CPUMsPerJob is this process's CPU time per job, user and system (see
	// FanoutReport.CPUMsPerRound).
	CPUMsPerJob float64 `json:"cpu_ms_per_job"`
}

// NewThroughputReport computes rate and percentiles; cpu is the CPU time of
// the whole run.
func NewThroughputReport(agents, concurrency int, elapsed time.Duration, lat []time.Duration, rejected int, cpu time.Duration) ThroughputReport {
	r := ThroughputReport{Agents: agents, Jobs: len(lat), Concurrency: concurrency, Rejected: rejected,
		Seconds: math.Round(elapsed.Seconds()*1000) / 1000,
		P50Ms:   ms(Percentile(lat, 50)), P90Ms: ms(Percentile(lat, 90)), P99Ms: ms(Percentile(lat, 99)),
		MaxMs: ms(Percentile(lat, 100))}
	if elapsed > 0 {
		r.JobsPerS = math.Round(float64(len(lat))/elapsed.Seconds()*10) / 10
	}
	if len(lat) > 0 {
		r.CPUMsPerJob = math.Round(float64(cpu)/float64(len(lat))/float64(time.Millisecond)*1000) / 1000
	}
	return r
}

// Table prints the report for a terminal.
func (r ThroughputReport) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "agents\tjobs\tin flight\tseconds\tjobs/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\t429s\tcpu ms/job\t")
	_, _ = fmt.Fprintf(tw, "%d\t%d\t%d\t%.3f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.3f\t\n", r.Agents, r.Jobs, r.Concurrency,
		r.Seconds, r.JobsPerS, r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs, r.Rejected, r.CPUMsPerJob)
	_ = tw.Flush()
}

// RegisterReport is the result of a registration benchmark.
type RegisterReport struct {
	Agents int `json:"agents"`
	// Seconds is from starting the first agent to the controller counting
	// every one online.
	Seconds float64 `json:"seconds"`
	// Embedded says whether the controller ran in this process; then
	// ProcessRSSMiB and HeapInuseMiB cover the controller, its NATS server
	// and every simulated agent together.
	Embedded      bool    `json:"embedded"`
	ProcessRSSMiB float64 `json:"process_rss_mib"`
	HeapInuseMiB  float64 `json:"heap_inuse_mib"`
	// ControllerRSSMiB and ControllerHeapMiB are the controller process's
	// own figures from its /metrics, when it runs elsewhere.
	ControllerRSSMiB  float64 `json:"controller_rss_mib,omitempty"`
	ControllerHeapMiB float64 `json:"controller_heap_inuse_mib,omitempty"`
	// ControllerStacksMiB is the controller's goroutine stack memory (the
	// embedded NATS server runs two goroutines per client connection), and
	// ControllerCPUPercent its CPU use while the agents heartbeated during
	// the settle, in percent of one core; both from its /metrics.
	ControllerStacksMiB  float64 `json:"controller_stacks_mib,omitempty"`
	ControllerCPUPercent float64 `json:"controller_cpu_percent,omitempty"`
	// Settled is how long the agents had been heartbeating when memory was
	// read.
	SettledSeconds float64 `json:"settled_seconds"`
}

// Table prints the report for a terminal.
func (r RegisterReport) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "agents\tonline after s\tcontroller\tprocess RSS MiB\theap in use MiB\tcontroller RSS MiB\tcontroller heap MiB\tcontroller stacks MiB\tcontroller CPU %\t")
	where := "external"
	if r.Embedded {
		where = "embedded"
	}
	ctlRSS, ctlHeap, ctlStacks, ctlCPU := "-", "-", "-", "-"
	if !r.Embedded {
		ctlRSS, ctlHeap = fmt.Sprintf("%.1f", r.ControllerRSSMiB), fmt.Sprintf("%.1f", r.ControllerHeapMiB)
		ctlStacks, ctlCPU = fmt.Sprintf("%.1f", r.ControllerStacksMiB), fmt.Sprintf("%.1f", r.ControllerCPUPercent)
	}
	_, _ = fmt.Fprintf(tw, "%d\t%.2f\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", r.Agents, r.Seconds, where,
		r.ProcessRSSMiB, r.HeapInuseMiB, ctlRSS, ctlHeap, ctlStacks, ctlCPU)
	_ = tw.Flush()
	if r.Embedded {
		_, _ = fmt.Fprintln(w, "(embedded: the process RSS and heap include the controller, its NATS server and every simulated agent)")
	}
}

// ProcFanoutReport is the result of a fan-out benchmark with agents as
// processes of their own: a one-step job to every agent, timed as the
// controller saw it (created_at to finished_at), against the floor of as
// many plain NATS responder processes.
type ProcFanoutReport struct {
	Agents int `json:"agents"`
	Rounds int `json:"rounds"`
	// P50Ms and P90Ms are the job's created_at to finished_at.
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	MaxMs float64 `json:"max_ms"`
	// SubmitP50Ms is the client's view: submit to the long poll's answer.
	SubmitP50Ms float64 `json:"submit_p50_ms"`
	// FloorP50Ms is the median time from publishing one core NATS message
	// to the Agents-th reply of as many responder processes.
	FloorP50Ms float64 `json:"floor_p50_ms"`
	FloorP90Ms float64 `json:"floor_p90_ms"`
	RatioP50   float64 `json:"ratio_p50"`
	// AgentCPUMsPerCommand is the agent processes' CPU time (user and
	// system, /proc/<pid>/stat) over the counted rounds, per agent and
	// round.
	AgentCPUMsPerCommand float64 `json:"agent_cpu_ms_per_command"`
	// AgentIdleCPUMsPerS is the agent processes' CPU time per second, all
	// of them together, while idle just before the rounds.
	AgentIdleCPUMsPerS float64 `json:"agent_idle_cpu_ms_per_s"`
	// FloorCPUMsPerMessage is a responder process's CPU time per message
	// answered: the least a process that receives and answers over NATS
	// costs on this machine.
	FloorCPUMsPerMessage float64 `json:"floor_cpu_ms_per_message"`
	Verified             int     `json:"verified"`
}

// NewProcFanoutReport computes the report; agentCPU is the agents' CPU time
// over all rounds, idleCPU theirs over idle.
func NewProcFanoutReport(agents int, res FanoutResult, floor []time.Duration, floorCPU, agentCPU, idleCPU, idle time.Duration) ProcFanoutReport {
	r := ProcFanoutReport{Agents: agents, Rounds: len(res.Spans), Verified: res.Verified,
		P50Ms: ms(Percentile(res.Spans, 50)), P90Ms: ms(Percentile(res.Spans, 90)), MaxMs: ms(Percentile(res.Spans, 100)),
		SubmitP50Ms: ms(Percentile(res.Latencies, 50)),
		FloorP50Ms:  ms(Percentile(floor, 50)), FloorP90Ms: ms(Percentile(floor, 90))}
	r.RatioP50 = ratio(r.P50Ms, r.FloorP50Ms)
	r.FloorCPUMsPerMessage = math.Round(float64(floorCPU)/float64(time.Millisecond)*1000) / 1000
	if n := agents * len(res.Spans); n > 0 {
		r.AgentCPUMsPerCommand = math.Round(float64(agentCPU)/float64(n)/float64(time.Millisecond)*1000) / 1000
	}
	if idle > 0 {
		r.AgentIdleCPUMsPerS = math.Round(float64(idleCPU)/float64(time.Millisecond)/idle.Seconds()*10) / 10
	}
	return r
}

// Table prints the report for a terminal.
func (r ProcFanoutReport) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "agent procs\trounds\tp50 ms\tp90 ms\tmax ms\tsubmit p50 ms\tfloor p50 ms\tfloor p90 ms\tratio p50\tagent cpu ms/cmd\tfloor cpu ms/msg\tidle cpu ms/s\t")
	_, _ = fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.1f\t\n", r.Agents, r.Rounds,
		r.P50Ms, r.P90Ms, r.MaxMs, r.SubmitP50Ms, r.FloorP50Ms, r.FloorP90Ms, r.RatioP50, r.AgentCPUMsPerCommand, r.FloorCPUMsPerMessage, r.AgentIdleCPUMsPerS)
	_ = tw.Flush()
}
