package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Rate limits in a step group: every task start (a node's first attempt
// of a step, and each retry) of a limited action takes one unit of the
// limit's shared budget before its command goes out. Starts that find no
// unit wait in the group's queue for the limit, in order, holding the
// rollout slot they took (so max_concurrency still bounds the nodes the
// group has begun); the step's node result stays pending and says why.
// One compare-and-swap takes as many units as the queue wants, so a step
// on many nodes starts as many as the window allows at once; the rest wait
// on a timer until the window's oldest start leaves it, never on a loop.
// The task's own timeout starts when its command goes out; the job's
// timeout counts from the job's start, waiting included.

// limitWait is how long a start waits when the shared count could not be
// read or written (a bucket failing over): the job waits, never fails.
const limitWait = time.Second

// rateTakeTimeout bounds one take of units.
const rateTakeTimeout = 5 * time.Second

// limitQueue holds a group's starts waiting for one limit.
type limitQueue struct {
	lim   *rateLimit
	items []limitedStart
	// timer wakes the run when the next unit should be free; nil while
	// the queue may take at once.
	timer *time.Timer
	next  time.Time
	// reason is what the job's status says while the queue waits.
	reason string
}

// limitedStart is one node's attempt waiting for a unit.
type limitedStart struct {
	n       *nodeRun
	attempt int
	// delayed: found no unit at once (counted in the metrics).
	delayed bool
}

// limitOf is the rate limit on a step, nil when none applies: no limit
// matches its action, or the job runs in check mode (a check changes
// nothing and fetches nothing, which is what limits protect).
func (g *stepGroup) limitOf(s api.FlatStep) *rateLimit {
	if g.r.c == nil || g.r.job.CheckMode {
		return nil
	}
	return g.r.c.limits.match(s.Task)
}

// dispatch starts n's current step (attempt), at once or, under a rate
// limit, once a unit is granted (pumpLimits takes it).
func (g *stepGroup) dispatch(n *nodeRun, attempt int) {
	s := g.steps[n.cursor]
	lim := g.limitOf(s)
	if lim == nil {
		g.r.dispatchOne(s, n, attempt)
		return
	}
	if g.limits == nil {
		g.limits = map[string]*limitQueue{}
	}
	q := g.limits[lim.key]
	if q == nil {
		q = &limitQueue{lim: lim}
		g.limits[lim.key] = q
	}
	q.items = append(q.items, limitedStart{n: n, attempt: attempt})
}

// pumpLimits takes units for every queue that is not waiting on its timer,
// dispatches the starts granted and sets the timer for the rest.
func (g *stepGroup) pumpLimits() {
	changed := false
	for _, key := range g.limitKeys() {
		q := g.limits[key]
		if len(q.items) == 0 || q.timer != nil || g.r.ctx.Err() != nil {
			continue
		}
		g.takeUnits(q)
		changed = true
	}
	if changed {
		g.setStatusReason()
	}
}

func (g *stepGroup) limitKeys() []string {
	keys := make([]string, 0, len(g.limits))
	for k := range g.limits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// takeUnits asks the shared budget for as many units as q waits for.
func (g *stepGroup) takeUnits(q *limitQueue) {
	r := g.r
	ctx, cancel := context.WithTimeout(r.ctx, rateTakeTimeout)
	granted, next, err := r.c.rates.takeStarts(ctx, q.lim, len(q.items))
	cancel()
	if r.ctx.Err() != nil {
		return // the run ends; abort records the waiting nodes
	}
	now := time.Now()
	var detail string
	if err != nil {
		r.log.Warn("rate limit: could not take starts; waiting", "limit", q.lim.String(), "err", err)
		granted, next = 0, now.Add(limitWait)
		detail = "the shared count is unavailable (" + err.Error() + "), trying again"
	}
	batch := q.items[:granted]
	q.items = slices.Clone(q.items[granted:])
	g.startGranted(batch)
	if len(q.items) == 0 {
		q.reason = ""
		return
	}
	wait := max(next.Sub(now), 10*time.Millisecond)
	q.next = now.Add(wait)
	if detail == "" {
		detail = "next slot in " + roundWait(wait) + " (at " + q.next.UTC().Format("15:04:05Z") + ")"
	}
	nodeReason := api.RateLimitedPrefix + q.lim.String() + ": " + detail
	q.reason = fmt.Sprintf("%s%s: %d %s waiting, %s", api.RateLimitedPrefix, q.lim.String(), len(q.items), plural(len(q.items), "node start", "node starts"), detail)
	for i := range q.items {
		it := &q.items[i]
		first := !it.delayed
		if first {
			it.delayed = true
			r.c.metrics.rateLimited.WithLabelValues(q.lim.Action).Inc()
			r.c.metrics.rateWaiting.WithLabelValues(q.lim.Action).Inc()
		}
		s := g.steps[it.n.cursor]
		r.setNodeResult(s.Index, it.n.id, func(res *api.NodeResult) {
			res.Status = api.StepPending
			res.StatusReason = nodeReason
			if first {
				res.Events = append(res.Events, api.Event{Status: api.StepPending, Time: now.UTC(), Attempt: it.attempt, Message: nodeReason})
			}
		})
	}
	r.log.Info("rate limited; waiting", "limit", q.lim.String(), "waiting", len(q.items), "started", granted, "next", wait)
	q.timer = time.AfterFunc(wait, func() {
		select {
		case r.limitC <- q:
		case <-r.done:
		}
	})
}

// startGranted dispatches the starts that got units: a barrier step's
// first attempts as one broadcast where it can.
func (g *stepGroup) startGranted(batch []limitedStart) {
	if len(batch) == 0 {
		return
	}
	for _, it := range batch {
		if it.delayed {
			g.r.c.metrics.rateWaiting.WithLabelValues(g.limitOf(g.steps[it.n.cursor]).Action).Dec()
		}
	}
	if g.barrier && len(batch) > 1 && !slices.ContainsFunc(batch, func(it limitedStart) bool { return it.attempt != 1 }) {
		nodes := make([]*nodeRun, len(batch))
		for i, it := range batch {
			nodes[i] = it.n
		}
		g.r.dispatchMany(g.steps[0], nodes, 1)
		return
	}
	for _, it := range batch {
		g.r.dispatchOne(g.steps[it.n.cursor], it.n, it.attempt)
	}
}

// onLimitTimer lets a queue take again once its next unit should be free.
func (g *stepGroup) onLimitTimer(q *limitQueue) {
	if g.limits[q.lim.key] != q {
		return // an earlier group's
	}
	q.timer = nil
}

// setStatusReason writes why the job waits (or clears it).
func (g *stepGroup) setStatusReason() {
	var reasons []string
	for _, key := range g.limitKeys() {
		if q := g.limits[key]; len(q.items) > 0 && q.reason != "" {
			reasons = append(reasons, q.reason)
		}
	}
	reason := strings.Join(reasons, "; ")
	g.r.mu.Lock()
	same := g.r.job.StatusReason == reason
	g.r.mu.Unlock()
	if !same {
		g.r.update(func(j *api.Job) { j.StatusReason = reason })
	}
}

// closeLimits stops the group's timers and takes its waiting starts out of
// the gauge when the group ends (done, or the run stopped).
func (g *stepGroup) closeLimits() {
	for _, q := range g.limits {
		if q.timer != nil {
			q.timer.Stop()
		}
		for _, it := range q.items {
			if it.delayed {
				g.r.c.metrics.rateWaiting.WithLabelValues(q.lim.Action).Dec()
			}
		}
		q.items = nil
	}
	if len(g.limits) > 0 {
		g.setStatusReason()
	}
}

// roundWait writes a wait for people: whole seconds, or tenths below two.
func roundWait(d time.Duration) string {
	if d < 2*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
