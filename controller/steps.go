package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// nodeRun is one node's progress through a barrier step or a pipeline.
type nodeRun struct {
	id       string
	cursor   int // index into the group's steps; len(steps) when done
	attempt  int
	failed   bool
	waiting  bool // a command is out and no final result has come
	deadline time.Time
	retrying bool
	sentAt   time.Time // when the current attempt was dispatched
	heard    bool      // whether the current attempt has answered
	catchUp  catchUpState
	// offlineAt is when the node was first seen offline while a command
	// was out (zero while online).
	offlineAt time.Time
}

// runSteps drives nodes through steps, the seed's barrier step (one leaf,
// broadcast) and pipeline (several leaves, each node advancing on its own
// results) in one state machine. entryFailed is whether an earlier step of
// the job failed, for conditions inside a pipeline. It returns the nodes
// that failed.
func (r *run) runSteps(steps []api.FlatStep, nodes []string, entryFailed, barrier bool) map[string]bool {
	nr := make(map[string]*nodeRun, len(nodes))
	for _, id := range nodes {
		nr[id] = &nodeRun{id: id}
	}
	tk := r.newStepTrace(steps, len(nodes))
	defer tk.close()
	remaining := len(nodes)
	finish := func(n *nodeRun) {
		tk.move(n, len(steps))
		n.waiting = false
		remaining--
	}

	// advance moves a node to its next runnable step (recording skips and
	// steps that already have a final result, which is how a recovered job
	// resumes) and returns whether it has one.
	advance := func(n *nodeRun) bool {
		for n.cursor < len(steps) {
			s := steps[n.cursor]
			if prior := r.nodeResult(s.Index, n.id); prior != nil && api.StepTerminal(prior.Status) {
				if prior.Status == api.StepFailed {
					n.failed = true
				}
				tk.move(n, n.cursor+1)
				continue
			}
			if reason, skip := skipInPipeline(s.Task.Condition, entryFailed, n.failed, barrier); skip {
				r.setNodeResult(s.Index, n.id, func(nr *api.NodeResult) {
					nr.Status = api.StepSkipped
					nr.Output = reason
					nr.Events = append(nr.Events, api.Event{Status: api.StepSkipped, Time: time.Now().UTC(), Message: reason})
				})
				tk.move(n, n.cursor+1)
				continue
			}
			return true
		}
		return false
	}

	// Start every node. A barrier step whose nodes are all at the same step
	// goes out as one broadcast.
	var toDispatch []*nodeRun
	for _, id := range nodes {
		n := nr[id]
		if advance(n) {
			toDispatch = append(toDispatch, n)
		} else {
			finish(n)
		}
	}
	if barrier && len(toDispatch) > 0 {
		r.dispatchMany(steps[0], toDispatch, 1)
	} else {
		for _, n := range toDispatch {
			r.dispatchOne(steps[n.cursor], n, 1)
		}
	}

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	nodeChanges := r.c.reg.changes()
	byIndex := make(map[int]int, len(steps))
	for i, s := range steps {
		byIndex[s.Index] = i
	}

	// complete records a node's final outcome for its current step and moves
	// it on.
	complete := func(n *nodeRun, ok bool) {
		if !ok {
			n.failed = true
			tk.fail(n)
		}
		n.waiting = false
		n.retrying = false
		tk.move(n, n.cursor+1)
		if advance(n) {
			r.dispatchOne(steps[n.cursor], n, 1)
			return
		}
		finish(n)
	}

	for remaining > 0 {
		select {
		case <-r.ctx.Done():
			r.abortNodes(steps, nr, context.Cause(r.ctx))
			return failedSet(nr)

		case tr := <-r.inbox:
			n := nr[tr.NodeID]
			i, inGroup := byIndex[tr.TaskIndex]
			if n == nil || !inGroup || i != n.cursor || tr.Attempt != n.attempt || !n.waiting {
				continue // stale, duplicate, or not ours
			}
			r.heard(n)
			s := steps[i]
			switch tr.Status {
			case api.ResultRunning:
				r.setNodeResult(s.Index, n.id, func(res *api.NodeResult) {
					res.Status = api.StepRunning
					res.Events = append(res.Events, api.Event{Status: api.StepRunning, Time: tr.Timestamp, Attempt: tr.Attempt})
				})
			case api.ResultProgress:
				r.setNodeResult(s.Index, n.id, func(res *api.NodeResult) {
					res.Progress = tr.Progress
					if tr.Output != "" {
						res.Output = tr.Output
						res.ProgressMessage = tr.Output
					}
				})
			case api.StepSuccess, api.StepFailed:
				if tr.Cancelled {
					// The agent heard the job's cancel before this
					// controller did: a cancellation, not a failure.
					r.cancel(errCancelled)
					continue
				}
				final := tr.Status == api.StepSuccess || tr.Attempt > s.Task.MaxRetries
				r.c.metrics.taskResults.WithLabelValues(s.Task.Backend, s.Task.Action, tr.Status).Inc()
				r.setNodeResult(s.Index, n.id, func(res *api.NodeResult) {
					res.Output, res.Error, res.Changed, res.Facts = tr.Output, tr.Error, tr.Changed, tr.Facts
					res.Duration = tr.Duration
					res.Attempts = tr.Attempt
					res.Progress = nil
					if tr.StartedAt != nil && !ranEvent(res.Events, tr.Attempt) {
						// A task that ended quickly sent no running report;
						// its final result says when it started.
						res.Events = append(res.Events, api.Event{Status: api.StepRunning, Time: *tr.StartedAt, Attempt: tr.Attempt})
					}
					res.Events = append(res.Events, api.Event{Status: tr.Status, Time: tr.Timestamp, Attempt: tr.Attempt, Message: tr.Error})
					if final {
						res.Status = tr.Status
					} else {
						res.Status = api.StepPending
					}
				})
				if final {
					complete(n, tr.Status == api.StepSuccess)
					continue
				}
				n.waiting = false
				n.retrying = true
				delay := r.c.backoff(tr.Attempt)
				req := retryReq{node: n.id, step: s.Index, attempt: tr.Attempt + 1}
				r.c.metrics.retries.WithLabelValues(s.Task.Backend, s.Task.Action).Inc()
				r.log.Info("retrying step", "step", s.Index, "node", n.id, "attempt", req.attempt, "in", delay, "err", tr.Error)
				time.AfterFunc(delay, func() {
					select {
					case r.retryC <- req:
					case <-r.done:
					}
				})
			}

		case req := <-r.retryC:
			n := nr[req.node]
			if n == nil || !n.retrying || n.cursor >= len(steps) || steps[n.cursor].Index != req.step {
				continue
			}
			n.retrying = false
			r.dispatchOne(steps[n.cursor], n, req.attempt)

		case <-nodeChanges:
			nodeChanges = r.c.reg.changes()
			r.failUnreachable(steps, nr, complete)

		case now := <-tick.C:
			r.failUnreachable(steps, nr, complete)
			for _, n := range nr {
				if n.waiting && now.After(n.deadline) {
					s := steps[n.cursor]
					msg := fmt.Sprintf("timeout: no result from node %s within %s", n.id, r.c.taskTimeout(s.Task)+r.c.cfg.ResultGrace.D())
					r.failNode(s.Index, n, msg)
					complete(n, false)
				}
			}
			r.catchUp(steps, nr, now)
		}
	}
	return failedSet(nr)
}

// failUnreachable fails the steps of nodes that went offline while a command
// was out: they will not answer, and waiting for the timeout would stall the
// job.
func (r *run) failUnreachable(steps []api.FlatStep, nr map[string]*nodeRun, complete func(*nodeRun, bool)) {
	now := time.Now()
	for _, n := range nr {
		if !n.waiting && !n.retrying {
			continue
		}
		if r.c.reg.online(n.id, now) {
			n.offlineAt = time.Time{}
			continue
		}
		if !n.offlineLongEnough(now) {
			continue
		}
		s := steps[n.cursor]
		r.failNode(s.Index, n, fmt.Sprintf("unreachable: node %s went offline (no heartbeat within %s or it shut down)", n.id, r.c.cfg.NodeOfflineAfter.D()))
		complete(n, false)
	}
}

func (r *run) failNode(step int, n *nodeRun, msg string) {
	r.log.Warn("step failed on node", "step", step, "node", n.id, "err", msg)
	if step < len(r.steps) {
		t := r.steps[step].Task
		r.c.metrics.taskResults.WithLabelValues(t.Backend, t.Action, "lost").Inc()
	}
	r.setNodeResult(step, n.id, func(res *api.NodeResult) {
		res.Status = api.StepFailed
		res.Error = msg
		res.Attempts = n.attempt
		res.Events = append(res.Events, api.Event{Status: api.StepFailed, Time: time.Now().UTC(), Attempt: n.attempt, Message: msg})
	})
}

// abortNodes records why unfinished nodes stopped: cancelled, or failed by
// the job timeout.
func (r *run) abortNodes(steps []api.FlatStep, nr map[string]*nodeRun, cause error) {
	if errors.Is(cause, errShutdown) || errors.Is(cause, errLostOwnership) {
		return
	}
	status, msg := api.StepFailed, jobTimeoutMessage(r.job.Timeout)
	if errors.Is(cause, errCancelled) {
		status, msg = api.StepCancelled, "cancelled"
	}
	now := time.Now().UTC()
	for _, n := range nr {
		if n.cursor >= len(steps) {
			continue
		}
		for i := n.cursor; i < len(steps); i++ {
			st := status
			if i > n.cursor {
				st = api.StepCancelled
			}
			r.setNodeResult(steps[i].Index, n.id, func(res *api.NodeResult) {
				res.Status = st
				if st == api.StepFailed {
					res.Error = msg
				}
				res.Events = append(res.Events, api.Event{Status: st, Time: now, Message: msg})
			})
		}
	}
}

func failedSet(nr map[string]*nodeRun) map[string]bool {
	out := map[string]bool{}
	for id, n := range nr {
		if n.failed {
			out[id] = true
		}
	}
	return out
}

// skipInPipeline judges a leaf's condition for one node. In a barrier step
// the job-level walker has judged it already. In a pipeline a node that
// failed runs only on_failure steps.
func skipInPipeline(c api.Condition, entryFailed, nodeFailed, barrier bool) (string, bool) {
	if barrier {
		return "", false
	}
	failed := entryFailed || nodeFailed
	switch {
	case nodeFailed && c != api.ConditionOnFailure:
		return "skipped: an earlier step failed on this node", true
	case c == api.ConditionOnSuccess && failed:
		return "skipped: condition on_success not met", true
	case c == api.ConditionOnFailure && !failed:
		return "skipped: condition on_failure not met", true
	}
	return "", false
}

// ranEvent reports whether the timeline holds a running event of attempt
// since its last dispatch.
func ranEvent(events []api.Event, attempt int) bool {
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Status {
		case api.StepRunning:
			if events[i].Attempt == attempt {
				return true
			}
		case api.StepDispatched:
			return false
		}
	}
	return false
}

func (r *run) nodeResult(step int, node string) *api.NodeResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job.Results.Node(step, node)
}

func (r *run) setNodeResult(step int, node string, fn func(*api.NodeResult)) {
	r.update(func(j *api.Job) {
		m := ensureStep(j, step)
		res := m[node]
		if res == nil {
			res = &api.NodeResult{Status: api.StepPending}
			m[node] = res
		}
		fn(res)
		if j.Step < step {
			j.Step = step
		}
	})
}
