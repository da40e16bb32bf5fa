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
	// unreachable: the node went away while a step was out to it.
	unreachable bool
	// started: the node holds (or held) one of the group's slots.
	started bool
	// notStarted: the rollout stopped before the node started.
	notStarted bool
}

// stepGroup drives nodes through one group of steps: the seed's barrier
// step (one leaf, broadcast) or a pipeline (several leaves, each node
// advancing on its own results), in one state machine. It is owned by the
// run's goroutine; its methods are the machine's transitions.
type stepGroup struct {
	r     *run
	steps []api.FlatStep
	// nodes is the order nodes start in.
	nodes []string
	nr    map[string]*nodeRun
	// byIndex maps a flat step index to its position in steps.
	byIndex map[int]int
	// entryFailed is whether an earlier step of the job failed, for
	// conditions inside a pipeline.
	entryFailed bool
	barrier     bool
	tk          *stepTrace
	// remaining counts nodes not yet past the last step.
	remaining int

	// rollout holds the group's max_concurrency and max_errors; path names
	// the phase in messages.
	rollout api.Rollout
	path    string
	// slots is how many nodes may hold a slot at once (len(nodes) without
	// max_concurrency); inFlight how many do; queue the nodes waiting for
	// one, in order.
	slots    int
	inFlight int
	queue    []*nodeRun
	// budget is how many nodes may fail before no new node starts
	// (hasBudget false: no max_errors); errors counts the nodes that
	// failed or became unreachable; stopped is set once errors > budget.
	budget    int
	hasBudget bool
	errors    int
	stopped   bool
	// limits holds, by rate limit, the starts waiting for a unit of it.
	limits map[string]*limitQueue
}

// stepOutcome is what a group tells the job walker.
type stepOutcome struct {
	// failed holds the nodes that failed or became unreachable.
	failed map[string]bool
	// notStarted holds the nodes a stopped rollout never started.
	notStarted map[string]bool
	// exceeded says max_errors stopped the rollout; reason says how.
	exceeded bool
	reason   string
}

// newStepGroup prepares a group; run starts it.
func (r *run) newStepGroup(steps []api.FlatStep, nodes []string, entryFailed, barrier bool, ro api.Rollout, path string) *stepGroup {
	g := &stepGroup{
		r: r, steps: steps, nodes: nodes, nr: make(map[string]*nodeRun, len(nodes)),
		byIndex: make(map[int]int, len(steps)), entryFailed: entryFailed, barrier: barrier,
		remaining: len(nodes), rollout: ro, path: path, slots: ro.Slots(len(nodes)),
	}
	g.budget, g.hasBudget = ro.ErrorBudget(len(nodes))
	for _, id := range nodes {
		g.nr[id] = &nodeRun{id: id}
	}
	for i, s := range steps {
		g.byIndex[s.Index] = i
	}
	return g
}

// runSteps drives nodes through steps, at most ro's max_concurrency at once
// and starting no new node once more than max_errors failed.
func (r *run) runSteps(steps []api.FlatStep, nodes []string, entryFailed, barrier bool, ro api.Rollout, path string) stepOutcome {
	return r.newStepGroup(steps, nodes, entryFailed, barrier, ro, path).run()
}

// run starts every node and handles results, retries, node changes and
// ticks until every node is past the group or the run ends.
func (g *stepGroup) run() stepOutcome {
	g.tk = g.r.newStepTrace(g.steps, len(g.nodes))
	defer g.tk.close()
	defer g.closeLimits()
	g.start()

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	nodeChanges := g.r.c.reg.changes()
	for g.remaining > 0 {
		select {
		case <-g.r.ctx.Done():
			g.abort(context.Cause(g.r.ctx))
			return g.outcome()
		case tr := <-g.r.inbox:
			g.onResult(tr)
		case req := <-g.r.retryC:
			g.onRetry(req)
		case <-nodeChanges:
			nodeChanges = g.r.c.reg.changes()
			g.failUnreachable(time.Now())
		case now := <-tick.C:
			g.onTick(now)
		case q := <-g.r.limitC:
			g.onLimitTimer(q)
		}
		g.pumpLimits()
	}
	return g.outcome()
}

// start moves every node to its first runnable step and dispatches it, up
// to the group's slots; the rest wait in the queue. A barrier step whose
// nodes all start at once goes out as one broadcast.
func (g *stepGroup) start() {
	var toDispatch []*nodeRun
	for _, id := range g.nodes {
		n := g.nr[id]
		if g.stopped || g.inFlight >= g.slots {
			g.queue = append(g.queue, n)
			continue
		}
		if g.take(n) {
			toDispatch = append(toDispatch, n)
		}
	}
	if g.stopped {
		g.stopQueue()
	}
	if g.barrier && len(toDispatch) > 0 && len(g.queue) == 0 && g.limitOf(g.steps[0]) == nil {
		g.r.dispatchMany(g.steps[0], toDispatch, 1)
		return
	}
	for _, n := range toDispatch {
		g.dispatch(n, 1)
	}
	g.pumpLimits()
}

// take gives n a slot and reports whether it has a step to dispatch; a
// node with nothing left to run (a resumed job) finishes at once and
// hands the slot back.
func (g *stepGroup) take(n *nodeRun) bool {
	n.started = true
	g.inFlight++
	if g.advance(n) {
		return true
	}
	g.finish(n)
	return false
}

// startNext fills free slots from the queue, or records the queued nodes
// as not started once the rollout stopped.
func (g *stepGroup) startNext() {
	for !g.stopped && g.inFlight < g.slots && len(g.queue) > 0 {
		n := g.queue[0]
		g.queue = g.queue[1:]
		if g.take(n) {
			g.dispatch(n, 1)
		}
	}
	if g.stopped {
		g.stopQueue()
	}
}

// countError records that n failed or became unreachable and stops the
// rollout once errors pass max_errors.
func (g *stepGroup) countError(n *nodeRun) {
	if n.failed {
		return // counted already
	}
	n.failed = true
	g.errors++
	if g.hasBudget && g.errors > g.budget && !g.stopped {
		g.stopped = true
		g.r.log.Warn("max_errors exceeded; starting no new node", "phase", g.path, "max_errors", g.rollout.MaxErrors.String(),
			"errors", g.errors, "waiting", len(g.queue), "in_flight", g.inFlight)
	}
}

// stopQueue records every queued node as not started, at every step of the
// group, and finishes it.
func (g *stepGroup) stopQueue() {
	if len(g.queue) == 0 {
		return
	}
	reason := g.stopReason()
	now := time.Now().UTC()
	for _, n := range g.queue {
		n.notStarted = true
		for i := n.cursor; i < len(g.steps); i++ {
			if prior := g.r.nodeResult(g.steps[i].Index, n.id); prior != nil && api.StepTerminal(prior.Status) {
				continue
			}
			g.r.setNodeResult(g.steps[i].Index, n.id, func(res *api.NodeResult) {
				res.Status = api.StepNotStarted
				res.Output = reason
				res.Events = append(res.Events, api.Event{Status: api.StepNotStarted, Time: now, Message: reason})
			})
		}
		g.finish(n)
	}
	g.queue = nil
}

func (g *stepGroup) stopReason() string {
	return fmt.Sprintf("not started: max_errors %s (%d of %d nodes) exceeded at %s: %d nodes failed or were unreachable",
		g.rollout.MaxErrors, g.budget, len(g.nodes), g.path, g.errors)
}

// finish marks a node past the group's last step and frees its slot.
func (g *stepGroup) finish(n *nodeRun) {
	g.tk.move(n, len(g.steps))
	n.waiting = false
	g.remaining--
	if n.started {
		g.inFlight--
	}
}

// advance moves a node to its next runnable step (recording skips and
// steps that already have a final result, which is how a recovered job
// resumes) and returns whether it has one.
func (g *stepGroup) advance(n *nodeRun) bool {
	r := g.r
	for n.cursor < len(g.steps) {
		s := g.steps[n.cursor]
		if prior := r.nodeResult(s.Index, n.id); prior != nil && api.StepTerminal(prior.Status) {
			switch prior.Status {
			case api.StepUnreachable:
				n.unreachable = true
				g.countError(n)
			case api.StepFailed:
				g.countError(n)
			}
			g.tk.move(n, n.cursor+1)
			continue
		}
		if reason, skip := skipInPipeline(s.Task.Condition, g.entryFailed, n.failed, g.barrier); skip {
			r.setNodeResult(s.Index, n.id, func(nr *api.NodeResult) {
				nr.Status = api.StepSkipped
				nr.Output = reason
				nr.Events = append(nr.Events, api.Event{Status: api.StepSkipped, Time: time.Now().UTC(), Message: reason})
			})
			g.tk.move(n, n.cursor+1)
			continue
		}
		return true
	}
	return false
}

// complete records a node's final outcome for its current step and moves
// it on.
func (g *stepGroup) complete(n *nodeRun, ok bool) {
	if !ok {
		g.countError(n)
		g.tk.fail(n)
	}
	n.waiting = false
	n.retrying = false
	g.tk.move(n, n.cursor+1)
	if g.advance(n) {
		g.dispatch(n, 1)
		return
	}
	g.finish(n)
	g.startNext()
}

// onResult handles one result an agent reported.
func (g *stepGroup) onResult(tr *api.TaskResult) {
	r := g.r
	n := g.nr[tr.NodeID]
	i, inGroup := g.byIndex[tr.TaskIndex]
	if n == nil || !inGroup || i != n.cursor || tr.Attempt != n.attempt || !n.waiting {
		return // stale, duplicate, or not ours
	}
	r.heard(n)
	s := g.steps[i]
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
			if r.ctx.Err() != nil {
				return // the run is ending already: the cancel is known here
			}
			// A node cannot cancel a job: only a cancel this controller
			// hears (cancel.<job>, which every controller and agent hear)
			// does. Its task was stopped by one not heard here yet, or the
			// node says so falsely; either way the step failed on that
			// node alone, and a real cancel ends the job when it arrives.
			tr.Status = api.StepFailed
			if tr.Error == "" {
				tr.Error = "the node reported its task cancelled, but no cancel of the job was heard"
			}
		}
		final := tr.Status == api.StepSuccess || tr.Attempt > s.Task.MaxRetries
		r.c.metrics.taskResults.WithLabelValues(s.Task.Backend, s.Task.Action, tr.Status).Inc()
		r.setNodeResult(s.Index, n.id, func(res *api.NodeResult) {
			res.Output, res.Error, res.Changed, res.Facts = tr.Output, tr.Error, tr.Changed, tr.Facts
			res.Duration = tr.Duration
			res.Attempts = tr.Attempt
			res.Progress = nil
			if tr.StartedAt != nil && !ranEvent(res.Events, tr.Attempt) {
				// A task that ended quickly sent no running report; its
				// final result says when it started.
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
			g.complete(n, tr.Status == api.StepSuccess)
			return
		}
		g.scheduleRetry(n, s, tr)
	}
}

// scheduleRetry sends the next attempt of a failed step after the backoff.
func (g *stepGroup) scheduleRetry(n *nodeRun, s api.FlatStep, tr *api.TaskResult) {
	r := g.r
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

// onRetry dispatches a retry whose backoff has passed, if the node still
// waits for it.
func (g *stepGroup) onRetry(req retryReq) {
	n := g.nr[req.node]
	if n == nil || !n.retrying || n.cursor >= len(g.steps) || g.steps[n.cursor].Index != req.step {
		return
	}
	n.retrying = false
	g.dispatch(n, req.attempt)
}

// onTick fails unreachable and timed-out nodes and re-sends commands nodes
// have not answered.
func (g *stepGroup) onTick(now time.Time) {
	r := g.r
	g.failUnreachable(now)
	for _, id := range g.nodes {
		n := g.nr[id]
		if n.waiting && now.After(n.deadline) {
			s := g.steps[n.cursor]
			msg := fmt.Sprintf("timeout: no result from node %s within %s", n.id, r.c.taskTimeout(s.Task)+r.c.cfg.ResultGrace.D())
			r.failNode(s.Index, n, msg)
			g.complete(n, false)
		}
	}
	r.catchUp(g.steps, g.nr, now)
}

// failUnreachable fails the steps of nodes that went offline while a command
// was out: they will not answer, and waiting for the timeout would stall the
// job.
func (g *stepGroup) failUnreachable(now time.Time) {
	r := g.r
	for _, id := range g.nodes {
		n := g.nr[id]
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
		s := g.steps[n.cursor]
		n.unreachable = true
		r.unreachableNode(s.Index, n, fmt.Sprintf("unreachable: node %s went offline (no heartbeat within %s or it shut down)", n.id, r.c.cfg.NodeOfflineAfter.D()))
		g.complete(n, false)
	}
}

// outcome is what the group tells the job walker.
func (g *stepGroup) outcome() stepOutcome {
	out := stepOutcome{failed: map[string]bool{}, notStarted: map[string]bool{}, exceeded: g.stopped}
	for id, n := range g.nr {
		if n.failed {
			out.failed[id] = true
		}
		if n.notStarted {
			out.notStarted[id] = true
		}
	}
	if g.stopped {
		out.reason = fmt.Sprintf("max_errors %s exceeded at %s: %d of %d nodes failed or were unreachable, %d not started",
			g.rollout.MaxErrors, g.path, g.errors, len(g.nodes), len(out.notStarted))
	}
	return out
}

// failNode records that the controller gave up on a node's step (timeout).
func (r *run) failNode(step int, n *nodeRun, msg string) {
	r.loseNode(step, n, api.StepFailed, "lost", msg)
}

// unreachableNode records that a node went away during its step.
func (r *run) unreachableNode(step int, n *nodeRun, msg string) {
	r.loseNode(step, n, api.StepUnreachable, api.StepUnreachable, msg)
}

func (r *run) loseNode(step int, n *nodeRun, status, metric, msg string) {
	r.log.Warn("step "+status+" on node", "step", step, "node", n.id, "err", msg)
	if step < len(r.steps) {
		t := r.steps[step].Task
		r.c.metrics.taskResults.WithLabelValues(t.Backend, t.Action, metric).Inc()
	}
	r.setNodeResult(step, n.id, func(res *api.NodeResult) {
		res.Status = status
		res.Error = msg
		res.Attempts = n.attempt
		res.Events = append(res.Events, api.Event{Status: status, Time: time.Now().UTC(), Attempt: n.attempt, Message: msg})
	})
}

// abort records why unfinished nodes stopped: cancelled, or failed by the
// job timeout.
func (g *stepGroup) abort(cause error) {
	if errors.Is(cause, errShutdown) || errors.Is(cause, errLostOwnership) {
		return
	}
	status, msg := api.StepFailed, jobTimeoutMessage(g.r.job.Timeout)
	if errors.Is(cause, errCancelled) {
		status, msg = api.StepCancelled, "cancelled"
	}
	now := time.Now().UTC()
	for _, n := range g.nr {
		if n.cursor >= len(g.steps) {
			continue
		}
		for i := n.cursor; i < len(g.steps); i++ {
			st := status
			if i > n.cursor {
				st = api.StepCancelled
			}
			g.r.setNodeResult(g.steps[i].Index, n.id, func(res *api.NodeResult) {
				res.Status = st
				res.StatusReason = ""
				if st == api.StepFailed {
					res.Error = msg
				}
				res.Events = append(res.Events, api.Event{Status: st, Time: now, Message: msg})
			})
		}
	}
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
