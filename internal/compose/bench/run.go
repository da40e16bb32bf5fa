package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// echoMessage is what every benchmark job asks the agents to echo.
const echoMessage = "bench"

// Floor measures the raw NATS fan-out on the controller's server: n plain
// subscribers, one connection each as an agent has, reply to one core
// message; a round is the time from the publish to the n-th reply. The
// subscribers' connections are closed before it returns.
func (e *Env) Floor(ctx context.Context, n, rounds int) ([]time.Duration, error) {
	subject := "bench.floor." + e.runID
	conns := make([]*nats.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	for range min(64, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := nats.Connect(e.natsURL, append(e.natsOpts(), nats.Name("grid-bench-floor"))...)
				if err == nil {
					_, err = c.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
				}
				if err == nil {
					err = c.Flush()
				}
				if err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					if c != nil {
						c.Close()
					}
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("floor subscribers: %w", errors.Join(errs...))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return e.floorRounds(ctx, subject, n, rounds)
}

// FanoutJob is the one-step ping echo job to every agent of the run.
func (e *Env) FanoutJob() *api.JobSpec {
	return &api.JobSpec{
		Target:   api.Target{Scope: api.ScopeGroup, Value: e.Group()},
		Tasks:    []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": echoMessage}}},
		Strategy: api.StrategyFailFast,
		Timeout:  "10m",
	}
}

// FanoutResult is what Fanout measured.
type FanoutResult struct {
	// Latencies are the counted rounds' times, submit to completed.
	Latencies []time.Duration
	// Spans are the counted rounds' times as the controller saw them, the
	// job's created_at to its finished_at.
	Spans []time.Duration
	// Verified counts the jobs checked in the jobs bucket.
	Verified int
	// CPU is the process's CPU time over the counted rounds, without the
	// checks of the stored jobs.
	CPU time.Duration
}

// Fanout submits the fan-out job rounds times, one after the other, and
// returns each round's time from submit to the long poll answering
// completed. Every job is then checked in the jobs bucket. One warm-up
// round runs first and is not counted.
//
// before, when not nil, runs just before the first counted round (to read
// the agent processes' CPU, say).
func (e *Env) Fanout(ctx context.Context, rounds int, before func()) (FanoutResult, error) {
	names := e.Names()
	var res FanoutResult
	for r := -1; r < rounds; r++ {
		if r == 0 && before != nil {
			before()
		}
		cpu0 := CPUTime()
		start := time.Now()
		j, err := e.client.SubmitJob(ctx, e.FanoutJob())
		if err != nil {
			return res, fmt.Errorf("submit: %w", err)
		}
		done, err := e.client.WaitJob(ctx, j.ID)
		if err != nil {
			return res, fmt.Errorf("wait for job %s: %w", j.ID, err)
		}
		d := time.Since(start)
		cpu := CPUTime() - cpu0
		if done.Status != api.JobCompleted {
			return res, fmt.Errorf("job %s ended %s: %s", j.ID, done.Status, done.Error)
		}
		if done.FinishedAt == nil {
			return res, fmt.Errorf("job %s completed without finished_at", j.ID)
		}
		if err := e.VerifyStored(ctx, j.ID, names); err != nil {
			return res, err
		}
		if r >= 0 {
			res.Verified++
			res.Latencies = append(res.Latencies, d)
			res.Spans = append(res.Spans, done.FinishedAt.Sub(done.CreatedAt))
			res.CPU += cpu
			e.printf("  round %d/%d: %.1f ms, cpu %.1f ms (%s)", r+1, rounds, ms(d), ms(cpu), phases(start, done))
		}
	}
	return res, nil
}

// CPUTime is the CPU time (user and system) this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// VerifyStored reads the job from the jobs bucket and checks that step 0
// holds a successful echo from exactly the given nodes.
func (e *Env) VerifyStored(ctx context.Context, id string, nodes []string) error {
	entry, err := e.jobsKV.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read job %s from the jobs bucket: %w", id, err)
	}
	var j api.Job
	if err := json.Unmarshal(entry.Value(), &j); err != nil {
		return fmt.Errorf("decode stored job %s: %w", id, err)
	}
	if j.Status != api.JobCompleted {
		return fmt.Errorf("stored job %s is %s, want completed", id, j.Status)
	}
	res := j.Results[0]
	if len(res) != len(nodes) {
		return fmt.Errorf("stored job %s holds %d results, want %d (one per agent)", id, len(res), len(nodes))
	}
	for _, n := range nodes {
		r := res[n]
		if r == nil {
			return fmt.Errorf("stored job %s has no result from %s", id, n)
		}
		if r.Status != api.StepSuccess || r.Output != echoMessage {
			return fmt.Errorf("stored job %s: node %s reported %s %q, want success %q", id, n, r.Status, r.Output, echoMessage)
		}
	}
	return nil
}

// ThroughputResult is what Throughput measured.
type ThroughputResult struct {
	// Latencies are the jobs' times, submit to completed.
	Latencies []time.Duration
	// Elapsed is the wall time of the whole run.
	Elapsed time.Duration
	// Rejected counts submissions turned away with 429 (and retried).
	Rejected int
	// CPU is the process's CPU time over the run, without the checks of
	// the stored jobs.
	CPU time.Duration
}

// Throughput submits jobs single-node jobs (round robin over the agents),
// at most inFlight at once, each waited for with the long poll. It returns
// each job's submit-to-completed time, the wall time, and how many
// submissions were turned away with 429 (and retried). Every job is then
// checked in the jobs bucket.
func (e *Env) Throughput(ctx context.Context, jobs, inFlight int) (ThroughputResult, error) {
	var res ThroughputResult
	names := e.Names()
	if len(names) == 0 {
		return res, errors.New("no agents")
	}
	lat := make([]time.Duration, jobs)
	ids := make([]string, jobs)
	var (
		next     atomic.Int64
		doneN    atomic.Int64
		rejected atomic.Int64
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cpu0 := CPUTime()
	start := time.Now()
	stopProgress := e.every(time.Second, func() {
		e.printf("  jobs completed %d/%d (%.1fs)", doneN.Load(), jobs, time.Since(start).Seconds())
	})
	for range min(inFlight, jobs) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= jobs {
					return
				}
				spec := &api.JobSpec{
					Target:  api.Target{Scope: api.ScopeNode, Value: names[i%len(names)]},
					Tasks:   []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": echoMessage}}},
					Timeout: "10m",
				}
				t0 := time.Now()
				var j *api.Job
				var err error
				for {
					j, err = e.client.SubmitJob(ctx, spec)
					if !api.IsStatus(err, http.StatusTooManyRequests) {
						break
					}
					rejected.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
				if err != nil {
					fail(fmt.Errorf("submit: %w", err))
					cancel()
					return
				}
				d, err := e.client.WaitJob(ctx, j.ID)
				if err != nil {
					fail(fmt.Errorf("wait for job %s: %w", j.ID, err))
					cancel()
					return
				}
				if d.Status != api.JobCompleted {
					fail(fmt.Errorf("job %s ended %s: %s", j.ID, d.Status, d.Error))
					cancel()
					return
				}
				lat[i], ids[i] = time.Since(t0), j.ID
				if i%500 == 499 {
					e.printf("  job %d: %.1f ms (%s)", i+1, ms(lat[i]), phases(t0, d))
				}
				doneN.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := CPUTime() - cpu0
	stopProgress()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	e.printf("  checking %d jobs in the jobs bucket", jobs)
	for i, id := range ids {
		if err := e.VerifyStored(ctx, id, []string{names[i%len(names)]}); err != nil {
			return res, err
		}
	}
	return ThroughputResult{Latencies: lat, Elapsed: elapsed, Rejected: int(rejected.Load()), CPU: cpu}, nil
}

// phases splits a job's time by the timestamps it carries: queued (submit
// to claimed), dispatch (claimed to the first command), results (to the
// last agent's result), finish (to the job's end) and answer (to the long
// poll's reply reaching us).
func phases(submit time.Time, j *api.Job) string {
	if j.StartedAt == nil || j.FinishedAt == nil {
		return "no timestamps"
	}
	var first, last time.Time
	for _, m := range j.Results {
		for _, r := range m {
			for _, ev := range r.Events {
				if ev.Status == api.StepDispatched && (first.IsZero() || ev.Time.Before(first)) {
					first = ev.Time
				}
				if api.StepTerminal(ev.Status) && ev.Time.After(last) {
					last = ev.Time
				}
			}
		}
	}
	end := time.Now()
	return fmt.Sprintf("queued %.1f, dispatch %.1f, results %.1f, finish %.1f, answer %.1f ms",
		ms(j.StartedAt.Sub(submit)), ms(first.Sub(*j.StartedAt)), ms(last.Sub(first)),
		ms(j.FinishedAt.Sub(last)), ms(end.Sub(*j.FinishedAt)))
}
