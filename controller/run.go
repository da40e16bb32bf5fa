package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Causes of a run's context ending early.
var (
	errCancelled  = errors.New("job cancelled")
	errJobTimeout = errors.New("job timeout")
	errShutdown   = errors.New("controller shutting down")
)

// run is one job being executed by this controller. One goroutine drives
// it; the API reads its job under mu.
type run struct {
	c     *Controller
	log   *slog.Logger
	steps []api.FlatStep

	inbox  chan *api.TaskResult
	retryC chan retryReq
	// limitC wakes the run when a rate limit it waits on may have a unit.
	limitC chan *limitQueue

	ctx         context.Context
	cancel      context.CancelCauseFunc
	stopTimeout context.CancelFunc

	// flushMu serialises writes of the job (and guards rev).
	flushMu    sync.Mutex
	mu         sync.Mutex
	job        *api.Job
	enc        *jobEncoder // under mu
	rev        uint64
	dirty      bool
	resolvedAt time.Time

	flushKick chan struct{}
	done      chan struct{}
	// settled is closed once the run has written its final state, or
	// stopped without (shutdown, lost ownership); final then holds the
	// terminal job's JSON as stored, if it wrote one.
	settled    chan struct{}
	settleOnce sync.Once
	final      []byte

	// secrets are the job's sensitive values (nil when it has none).
	secrets stepSecrets

	// span is the job's span; trace follows the steps being run.
	span  trace.Span
	trace *stepTrace
}

type retryReq struct {
	node    string
	step    int
	attempt int
}

// execState is the walker's state across top-level phases.
type execState struct {
	active     []string
	stepFailed bool
	failFast   bool
	// errMsg says why the job stopped, when a rollout's max_errors did.
	errMsg string
}

// snapshot returns a copy of the job safe to hand out.
func (r *run) snapshot() *api.Job {
	r.mu.Lock()
	b, _ := r.enc.encode(r.job)
	r.mu.Unlock()
	var j api.Job
	_ = json.Unmarshal(b, &j)
	return &j
}

// update changes the job under the lock and schedules a flush.
func (r *run) update(fn func(j *api.Job)) {
	r.mu.Lock()
	fn(r.job)
	r.job.UpdatedAt = time.Now().UTC()
	r.dirty = true
	r.mu.Unlock()
	select {
	case r.flushKick <- struct{}{}:
	default:
	}
}

// flushLoop writes the job to KV at most once per flush interval while it
// changes, so a step on 10,000 nodes is not 10,000 KV writes. A big job's
// write costs more (its JSON grows with its results), so the wait grows
// with it: a flush takes at most about a tenth of the run's time, and a
// run writes its intermediate states at most at flushRate (the server
// stores every write; a job on 10,000 nodes is megabytes).
func (r *run) flushLoop() {
	interval := r.c.cfg.FlushInterval.D()
	r.mu.Lock()
	guess := len(r.job.Expected) * nodeResultSize
	r.mu.Unlock()
	wait := flushWait(interval, 0, guess)
	for {
		select {
		case <-r.done:
			return
		case <-r.flushKick:
		}
		select {
		case <-r.done:
			return
		case <-time.After(wait):
		}
		start := time.Now()
		if size := r.flush(); size > 0 {
			wait = flushWait(interval, time.Since(start), size)
		}
		// A write that failed (a server failing over) left the job dirty
		// with nothing to kick the next one until the job changes again.
		r.mu.Lock()
		dirty := r.dirty
		r.mu.Unlock()
		if dirty {
			select {
			case r.flushKick <- struct{}{}:
			default:
			}
		}
	}
}

// flushWait is the wait before the next intermediate write of a job whose
// last write took took and was size bytes.
func flushWait(interval, took time.Duration, size int) time.Duration {
	byRate := time.Duration(float64(size) / flushRate * float64(time.Second))
	return min(max(interval, 10*took, byRate), maxFlushInterval)
}

const (
	// maxFlushInterval bounds how long intermediate writes of a big job
	// wait.
	maxFlushInterval = 5 * time.Second
	// flushRate bounds the bytes per second of a run's intermediate
	// writes: a job on 1,000 nodes is written every flush_interval (100ms),
	// one on 10,000 nodes about every 0.75s.
	flushRate = 4 << 20
	// nodeResultSize is about what a node's result of one step takes in
	// the job's JSON, for the first wait.
	nodeResultSize = 300
)

// flush writes the job to KV if it changed. The owner is the only writer of
// a running job, so a conflict means someone else touched it (a cancel from
// another controller): the stored status wins if it is terminal. The job is
// encoded under mu and written without it, so results keep flowing into
// the run while a big job is written. It returns the size of the JSON it
// wrote or tried to write, 0 when nothing had changed.
func (r *run) flush() int {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	if !r.dirty {
		r.mu.Unlock()
		return 0
	}
	id := r.job.ID
	data, err := r.enc.encode(r.job)
	if limit := r.c.maxJobBytes(); err == nil && len(data) > limit {
		// Never written otherwise: the job would stay running for ever.
		r.log.Warn("job outgrew the bus limit; cutting stored outputs", "bytes", len(data), "limit", limit)
		data, err = shrinkResults(r.job, r.enc, limit)
	}
	terminal := r.job.Status.Terminal()
	r.dirty = false
	r.mu.Unlock()
	if err != nil {
		r.log.Error("encode job", "err", err)
		return 0
	}
	redirty := func() {
		r.mu.Lock()
		r.dirty = true
		r.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 5 {
		rev, err := r.c.jobs.updateRaw(ctx, id, data, r.rev)
		if err == nil {
			r.rev = rev
			if terminal {
				r.mu.Lock()
				r.final = data
				r.mu.Unlock()
				r.c.jobIdx.put(id, data, time.Now(), rev)
			}
			return len(data)
		}
		if !errors.Is(err, errConflict) {
			r.log.Warn("write job", "err", err)
			redirty()
			return len(data)
		}
		stored, srev, gerr := r.c.jobs.get(ctx, id)
		if gerr != nil {
			r.log.Warn("re-read job after conflict", "err", gerr)
			redirty()
			return len(data)
		}
		r.rev = srev
		if stored.Owner != r.c.id {
			// Presumed dead and taken over: stop without writing.
			r.cancel(errLostOwnership)
			return len(data)
		}
		r.mu.Lock()
		terminal := r.job.Status.Terminal()
		r.mu.Unlock()
		if stored.Status == api.JobCancelled && !terminal {
			r.cancel(errCancelled)
		}
	}
	redirty()
	return len(data)
}

func (r *run) flushNow() {
	_ = r.flush()
}

// flushFinal writes the job's final state, trying again while the bucket
// does not answer (a cluster failing over): without it the job would stay
// running in KV under an owner that is alive, so no peer would take it
// over. It gives up when another controller took the job over, or when
// this one stops (a restart resumes the job and finds every result).
func (r *run) flushFinal() {
	wait := 100 * time.Millisecond
	for {
		_ = r.flush()
		r.mu.Lock()
		dirty := r.dirty
		r.mu.Unlock()
		if !dirty || errors.Is(context.Cause(r.ctx), errLostOwnership) {
			return
		}
		select {
		case <-r.c.stopping:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// settle marks the run's last write done; long polls then answer.
func (r *run) settle() {
	r.settleOnce.Do(func() { close(r.settled) })
}

// finalJSON is the terminal job as this run stored it, or nil when it did
// not store one (yet).
func (r *run) finalJSON() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.final
}

// deliver hands a result to the run; it never blocks the consumer for long.
func (r *run) deliver(tr *api.TaskResult) {
	select {
	case r.inbox <- tr:
	case <-r.done:
	}
}

// execute runs the whole job and records its final state.
func (r *run) execute() {
	defer close(r.done)
	defer r.cancel(nil)
	defer r.stopTimeout()
	defer r.settle()
	go r.flushLoop()

	// The target, tasks, timeout and expected nodes do not change while
	// the job runs.
	r.mu.Lock()
	job := struct {
		Target      api.Target
		Tasks       []api.Phase
		Timeout     string
		Expected    []string
		Unreachable []string
	}{r.job.Target, r.job.Tasks, r.job.Timeout, slices.Clone(r.job.Expected), slices.Clone(r.job.Unreachable)}
	r.mu.Unlock()
	st := &execState{active: job.Expected}
	var errMsg string
	if len(st.active) == 0 {
		errMsg = errNoNodes.Error() + " (" + job.Target.String() + ")"
		if len(job.Unreachable) > 0 {
			errMsg = fmt.Sprintf("every node the target matched was unreachable: offline when the target was resolved (%s)", strings.Join(job.Unreachable, ", "))
		}
		st.failFast = true
	} else {
		r.walk(job.Tasks, 0, st, 1)
	}

	status := api.JobCompleted
	cause := context.Cause(r.ctx)
	switch {
	case errors.Is(cause, errCancelled):
		status, errMsg = api.JobCancelled, "cancelled by request"
	case errors.Is(cause, errJobTimeout):
		status, errMsg = api.JobFailed, fmt.Sprintf("job timeout after %s", job.Timeout)
	case errors.Is(cause, errLostOwnership):
		r.log.Warn("stopping run", "reason", cause)
		r.c.jobFinished(r, "")
		return
	case errors.Is(cause, errShutdown):
		// Leave the job running in KV: a restart of this controller (or a
		// peer's recovery) resumes it.
		r.flushNow()
		r.span.SetStatus(codes.Error, errShutdown.Error())
		r.span.End()
		return
	case st.failFast:
		status = api.JobFailed
		switch {
		case st.errMsg != "":
			errMsg = st.errMsg
		case errMsg == "":
			errMsg = "a step failed (fail-fast)"
		}
	case st.stepFailed && len(st.active) == 0:
		status, errMsg = api.JobFailed, "every node failed or was unreachable"
	case st.stepFailed || len(job.Unreachable) > 0:
		status = api.JobPartialFailure
		errMsg = "some nodes failed or were unreachable"
	}
	now := time.Now().UTC()
	r.update(func(j *api.Job) {
		j.Status = status
		j.FinishedAt = &now
		sum := j.Summarize()
		j.Summary = &sum
		if status == api.JobPartialFailure || (status == api.JobFailed && st.errMsg == "" && errMsg != "" && st.stepFailed) {
			errMsg = fmt.Sprintf("%s: %d of %d targeted nodes succeeded, %d failed, %d unreachable, %d not started",
				errMsg, sum.Succeeded, sum.Targeted, sum.Failed, sum.Unreachable, sum.NotStarted)
		}
		j.Error = errMsg
	})
	r.mu.Lock()
	sum := *r.job.Summary
	r.mu.Unlock()
	r.c.metrics.observeNodes(sum)
	r.flushFinal()
	r.recordEnd(status, errMsg, sum)
	r.settle()
	endJobSpan(r.span, status, errMsg)
	r.log.Info("job finished", "status", status, "error", errMsg)
	r.c.jobFinished(r, status)
}

// walk runs phases in order (the seed's executePhases). base is the flat
// index of the first leaf; depth 1 is top level.
func (r *run) walk(phases []api.Phase, base int, st *execState, depth int) {
	idx := base
	for i, p := range phases {
		n := p.LeafCount()
		if r.ctx.Err() != nil || len(st.active) == 0 {
			return
		}
		if skip := skipPhase(p.Condition, st); skip {
			r.markSkipped(idx, n, st.active, conditionReason(p.Condition, st))
			idx += n
			continue
		}
		ro := api.RolloutFor(r.job, p)
		path := fmt.Sprintf("tasks[%d]", i)
		var out stepOutcome
		if p.IsLeaf() {
			out = r.runSteps(r.steps[idx:idx+1], st.active, st.stepFailed, true, ro, path)
		} else {
			out = r.runSteps(r.steps[idx:idx+n], st.active, st.stepFailed, false, ro, path)
		}
		switch {
		case out.exceeded:
			// The rollout stopped: nodes it never started changed nothing
			// and take no part in what follows (on_failure phases).
			st.stepFailed, st.failFast = true, true
			st.errMsg = out.reason
			st.active = slices.DeleteFunc(st.active, func(id string) bool { return out.notStarted[id] })
		case len(out.failed) > 0:
			st.stepFailed = true
			// Failures within a max_errors budget are tolerated: the
			// failed nodes drop out and the rollout carries on, as with
			// strategy continue.
			if r.job.Strategy == api.StrategyContinue || ro.MaxErrors != nil {
				st.active = slices.DeleteFunc(st.active, func(id string) bool { return out.failed[id] })
			} else {
				st.failFast = true
			}
		}
		idx += n
	}
}

func skipPhase(c api.Condition, st *execState) bool {
	if st.failFast && c != api.ConditionOnFailure {
		return true
	}
	switch c {
	case api.ConditionOnSuccess:
		return st.stepFailed
	case api.ConditionOnFailure:
		return !st.stepFailed
	}
	return false
}

func conditionReason(c api.Condition, st *execState) string {
	switch {
	case st.failFast && c != api.ConditionOnFailure:
		return "skipped: an earlier step failed (fail-fast)"
	case c == api.ConditionOnSuccess:
		return "skipped: condition on_success not met"
	case c == api.ConditionOnFailure:
		return "skipped: condition on_failure not met"
	}
	return "skipped"
}

func (r *run) markSkipped(from, n int, nodes []string, reason string) {
	now := time.Now().UTC()
	r.update(func(j *api.Job) {
		for s := from; s < from+n; s++ {
			m := ensureStep(j, s)
			for _, id := range nodes {
				if m[id] != nil && api.StepTerminal(m[id].Status) {
					continue
				}
				m[id] = &api.NodeResult{Status: api.StepSkipped, Output: reason,
					Events: []api.Event{{Status: api.StepSkipped, Time: now, Message: reason}}}
			}
		}
	})
}

func ensureStep(j *api.Job, step int) map[string]*api.NodeResult {
	if j.Results == nil {
		j.Results = api.JobResults{}
	}
	m := j.Results[step]
	if m == nil {
		m = map[string]*api.NodeResult{}
		j.Results[step] = m
	}
	return m
}

// recordEnd writes the job's job.end record: its status and per-node
// outcome, and who cancelled it.
func (r *run) recordEnd(status api.JobStatus, errMsg string, sum api.JobSummary) {
	r.mu.Lock()
	id, by, cancelledBy := r.job.ID, r.job.SubmittedBy, r.job.CancelledBy
	r.mu.Unlock()
	detail := string(status) + "; submitted by " + by
	if errMsg != "" {
		detail += ": " + errMsg
	}
	if cancelledBy != "" {
		detail += " (cancelled by " + cancelledBy + ")"
	}
	r.c.record(api.AuditRecord{Action: api.AuditJobEnd, Resource: id, Job: id, Summary: &sum, Detail: detail})
}
