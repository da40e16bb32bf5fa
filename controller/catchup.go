package controller

import (
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Catch-up: agents hear commands on core subscriptions, so one published
// while an agent was briefly disconnected (a network cut, a NATS server
// failing over) never reaches it. While a step still waits on a node that
// has not answered the current attempt at all (not even "running"), the
// controller sends the same attempt again to that node's own subject:
//
//   - an agent that never got it runs it now;
//   - an agent that has it queued or running ignores the repeat (it dedupes
//     on job, step and attempt);
//   - an agent that already finished it publishes its recorded result again.
//
// Re-sending stops once the node answers, and only happens while the node
// is online and an agent starting the task now would still report, by its
// own timeout, before the controller's deadline for the attempt (deadline =
// dispatch + task timeout + result_grace). So the window is result_grace
// after the dispatch, and once the controller has given up on a node
// (timeout, unreachable, job cancelled or timed out) it never sends that
// step to it again: a missed command is then never executed.
const (
	// resendFirst is how long a node may stay silent after a dispatch before
	// the command goes out again; each further re-send waits twice as long,
	// up to resendMax.
	resendFirst = 2 * time.Second
	resendMax   = 8 * time.Second
)

// catchUpState tracks the re-sends of a node's current attempt.
type catchUpState struct {
	sentAt time.Time // the dispatch the re-sends belong to
	last   time.Time // when the command last went out
	count  int
}

// catchUp re-sends the current attempt to nodes that have not answered it.
// It runs on the run loop's tick.
func (r *run) catchUp(steps []api.FlatStep, nr map[string]*nodeRun, now time.Time) {
	for _, n := range nr {
		if !n.waiting || n.heard || n.cursor >= len(steps) {
			continue
		}
		cu := &n.catchUp
		if !cu.sentAt.Equal(n.sentAt) {
			*cu = catchUpState{sentAt: n.sentAt, last: n.sentAt}
		}
		if now.Sub(cu.last) < min(resendFirst<<cu.count, resendMax) {
			continue
		}
		s := steps[n.cursor]
		// An agent starting now must be able to time out on its own before
		// the controller gives up, or its result would come too late.
		if now.Add(r.c.taskTimeout(s.Task)).After(n.deadline) {
			continue
		}
		if !r.c.reg.online(n.id, now) {
			continue // failUnreachable deals with it
		}
		cu.last, cu.count = now, cu.count+1
		r.log.Info("no answer from node; sending the command again", "step", s.Index, "node", n.id,
			"attempt", n.attempt, "resend", cu.count, "since", now.Sub(n.sentAt).Round(time.Millisecond))
		cmd := r.command(s, n.attempt)
		r.sealFor(&cmd, n.id)
		r.c.publishCommand(r.stepCtx(s), api.NodeCommandSubject(n.id, s.Task.Backend, s.Task.Action), &cmd)
	}
}

// unreachableGrace is how long a node must have been offline before its
// waiting step fails as unreachable. An agent that shuts down gracefully
// publishes its last results and then deregisters; the results stream and
// the nodes bucket reach this controller on different consumers, so the
// deregistration can overtake a result that is already stored.
const unreachableGrace = 2 * time.Second

// offlineLongEnough records when the node was first seen offline and
// reports whether unreachableGrace has passed since.
func (n *nodeRun) offlineLongEnough(now time.Time) bool {
	if n.offlineAt.IsZero() {
		n.offlineAt = now
	}
	return now.Sub(n.offlineAt) >= unreachableGrace
}
