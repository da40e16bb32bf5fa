package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	// Schedules' time zones resolve the same on every controller, with or
	// without a system zoneinfo database.
	_ "time/tzdata"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// Schedules fire exactly once per tick across a cluster:
//
//  1. Every controller follows the schedules bucket and, every
//     schedulePoll, looks for a schedule whose next_run has come.
//  2. To fire tick T it writes the schedule back with next_run past T and
//     pending_job set to the tick's job id, as a compare-and-swap on the
//     revision it read. One controller wins; the others' writes are
//     refused and they fire nothing.
//  3. The winner submits the job through the same path as POST /job, with
//     the id api.ScheduleJobID(schedule, T). The jobs bucket stores a key
//     once, so however often that submission is tried, by whichever
//     controller, there is at most one job for the tick.
//  4. It then clears pending_job (again by CAS). A controller that finds a
//     pending_job older than scheduleClaimTimeout (its claimer died between
//     2 and 4) submits that job itself: at least once, by 2, and at most
//     once, by 3.
const (
	schedulePoll         = 250 * time.Millisecond
	scheduleClaimTimeout = 3 * time.Second
)

// scheduleTicker fires the schedules that are due, on every controller
// (see above): it owns its copy of the schedules bucket and asks the
// controller (host) for what every job gets, the one submit path and the
// queue.
type scheduleTicker struct {
	id      string // this controller's, recorded on a claim
	log     *slog.Logger
	grace   time.Duration // schedule_grace
	store   *scheduleStore
	jobs    *jobStore
	tokens  *tokenStore
	metrics *metrics
	host    tickHost
	// claimed, when set, is called after a tick is claimed and before its
	// job is submitted; returning true stops there (tests simulate a crash
	// in between with it).
	claimed *atomic.Pointer[func(jobID string) bool]
}

// tickHost is what the ticker needs of the controller.
type tickHost interface {
	submit(ctx context.Context, job *api.Job, by principal, opts submitOptions) (*api.Job, error)
	queueRequest(ctx context.Context, id string, priority int, rev uint64, stored []byte) error
	// record writes an audit record of a tick fired or skipped.
	record(rec api.AuditRecord)
}

// cachedSchedule is a schedule as last seen (nil sc: deleted at rev).
type cachedSchedule struct {
	sc  *api.Schedule
	rev uint64
}

// scheduleCache is this controller's copy of the schedules bucket, fed by
// its watch and by what this controller writes itself; an entry never goes
// back to an older revision.
type scheduleCache struct {
	mu sync.Mutex
	m  map[string]cachedSchedule
}

func (sc *scheduleCache) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		sc.store(e.Key(), cachedSchedule{nil, e.Revision()})
		return
	}
	var s api.Schedule
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return
	}
	sc.store(e.Key(), cachedSchedule{&s, e.Revision()})
}

func (sc *scheduleCache) store(id string, cs cachedSchedule) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if cur, ok := sc.m[id]; ok && cur.rev >= cs.rev {
		return
	}
	sc.m[id] = cs
}

// live returns the schedules that are not deleted.
func (sc *scheduleCache) live() map[string]cachedSchedule {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := make(map[string]cachedSchedule, len(sc.m))
	for id, cs := range sc.m {
		if cs.sc != nil {
			out[id] = cs
		}
	}
	return out
}

// scheduleLoop fires the schedules that are due until ctx ends.
func (t *scheduleTicker) scheduleLoop(ctx context.Context) {
	cache := &scheduleCache{m: map[string]cachedSchedule{}}
	// The watch's goroutine is this loop's: it ends with ctx, and the loop
	// waits for it before returning.
	var watching sync.WaitGroup
	defer watching.Wait()
	err := retry.Do(ctx, followPolicy, func(try int) error {
		_, err := follow(ctx, &watching, t.store.kv, t.log, "schedules", cache.apply)
		if err != nil && try == 1 {
			t.log.Warn("watch schedules; retrying", "err", err)
		}
		return err
	})
	if err != nil {
		return // ctx ended
	}
	tick := time.NewTicker(schedulePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			now := time.Now().UTC()
			for id, cs := range cache.live() {
				if nsc, nrev := t.tickSchedule(ctx, cs.sc, cs.rev, now); nsc != nil {
					cache.store(id, cachedSchedule{nsc, nrev})
				}
			}
		}
	}
}

// tickSchedule fires or skips a schedule whose next run has come, or
// finishes a claim whose claimer died. It returns the schedule as written
// by this controller, or as read back when another controller had written
// it since (nil when it has nothing newer than the cache).
func (t *scheduleTicker) tickSchedule(ctx context.Context, cur *api.Schedule, rev uint64, now time.Time) (*api.Schedule, uint64) {
	if cur.PendingJob != "" {
		if cur.ClaimedAt != nil && now.Sub(*cur.ClaimedAt) < scheduleClaimTimeout {
			return nil, 0 // its claimer is on it
		}
		return t.finishClaim(ctx, cur, true)
	}
	if cur.Paused || cur.NextRun == nil || now.Before(*cur.NextRun) {
		return nil, 0
	}
	sc := *cur
	cron, err := api.ParseCron(sc.Cron, sc.TimeZone)
	if err != nil {
		t.log.Warn("schedule with an unreadable cron expression", "schedule", sc.ID, "err", err)
		return nil, 0
	}
	tick := *sc.NextRun
	next := cron.Next(tick).UTC()
	if late := now.Sub(tick); late > t.grace {
		// No controller fired it in time: every one was down, or busy.
		const maxCount = 100000
		missed, last := 0, tick
		for t := tick; !t.IsZero() && !t.After(now) && missed < maxCount; t = cron.Next(t) {
			missed, last = missed+1, t.UTC()
		}
		count := strconv.Itoa(missed)
		if missed == maxCount {
			count = "more than " + count
		}
		next = cron.Next(now).UTC()
		if sc.CatchUp != api.CatchUpRunOnce {
			reason := fmt.Sprintf("missed %s tick(s) from %s: no controller fired them within schedule_grace (%s); catch_up skip fires none",
				count, tick.Format(time.RFC3339), t.grace)
			return t.skipTick(ctx, &sc, rev, last, next, "missed", reason, missed)
		}
		// run_once: one job, for the first missed tick (its id says which
		// run was missed; its created_at, when it ran).
	}
	if sc.Overlap != api.OverlapAllow && sc.LastJobID != "" {
		j, _, err := t.jobs.get(ctx, sc.LastJobID)
		switch {
		case errors.Is(err, api.ErrNotFound):
		case err != nil:
			return nil, 0 // look again at the next poll
		case !j.Status.Terminal():
			reason := fmt.Sprintf("overlap skip: the previous job %s is %s", j.ID, j.Status)
			return t.skipTick(ctx, &sc, rev, tick, next, "overlap", reason, 1)
		}
	}
	sc.NextRun = &next
	sc.LastRun = &tick
	sc.PendingJob = api.ScheduleJobID(sc.ID, tick)
	sc.ClaimedAt, sc.ClaimedBy = &now, t.id
	nrev, err := t.store.update(ctx, &sc, rev)
	if err != nil {
		if !errors.Is(err, errConflict) && ctx.Err() == nil {
			t.log.Warn("schedule: claim a tick", "schedule", sc.ID, "err", err)
		}
		return nil, 0 // another controller has it, or the next poll tries again
	}
	if hook := t.claimed.Load(); hook != nil && (*hook)(sc.PendingJob) {
		return &sc, nrev
	}
	return t.finishClaim(ctx, &sc, false)
}

// skipTick advances a schedule past a tick that fires nothing, saying why.
func (t *scheduleTicker) skipTick(ctx context.Context, sc *api.Schedule, rev uint64, tick, next time.Time, kind, reason string, n int) (*api.Schedule, uint64) {
	sc.NextRun, sc.LastSkip, sc.LastSkipReason = &next, &tick, reason
	sc.Skipped += int64(n)
	nrev, err := t.store.update(ctx, sc, rev)
	if err != nil {
		return nil, 0
	}
	t.metrics.scheduleSkipped.WithLabelValues(kind).Add(float64(n))
	t.log.Info("schedule skipped a tick", "schedule", sc.ID, "tick", tick, "reason", reason)
	t.host.record(api.AuditRecord{Action: api.AuditScheduleSkip, Resource: sc.ID, Detail: fmt.Sprintf("tick %s: %s", tick.Format(time.RFC3339), reason)})
	return sc, nrev
}

// finishClaim submits the job of a claimed tick (unless it exists) and
// clears the claim. A submission that may succeed later (NATS unavailable)
// leaves the claim for the next try; one refused for good (the job no
// longer validates, the policy or the queue refuses it, its creator's
// token is revoked) is recorded as a skipped tick.
func (t *scheduleTicker) finishClaim(ctx context.Context, claimed *api.Schedule, orphan bool) (*api.Schedule, uint64) {
	jobID := claimed.PendingJob
	// The claim as stored now: one seen in a watch may have been finished
	// since, and its job deleted by now, which must not bring it back. The
	// job is the stored schedule's (an update may have changed it since
	// the claim; the tick fires what the schedule says now).
	cur, curRev, err := t.store.get(ctx, claimed.ID)
	if err != nil {
		return nil, 0
	}
	if cur.PendingJob != jobID {
		// Finished by another controller: remember the stored schedule, so
		// a watch that lags does not send this controller back to it.
		return cur, curRev
	}
	if orphan {
		t.log.Info("schedule: submitting a claimed tick whose claimer did not confirm it", "schedule", cur.ID,
			"job", jobID, "claimed_by", cur.ClaimedBy)
	}
	refusal, err := t.submitTick(ctx, cur, jobID)
	if refusal != "" {
		// A slow claimer may have stored it meanwhile.
		if _, gerr := t.jobs.kv.Get(ctx, jobID); gerr == nil {
			refusal = ""
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("schedule: submit a tick's job; trying again", "schedule", claimed.ID, "job", jobID, "err", err)
		}
		return nil, 0
	}
	var written *api.Schedule
	var wrev uint64
	for range 20 {
		sc, rev, err := t.store.get(ctx, claimed.ID)
		if err != nil || sc.PendingJob != jobID {
			return nil, 0 // deleted, or another controller finished it
		}
		now := time.Now().UTC()
		sc.PendingJob, sc.ClaimedAt, sc.ClaimedBy = "", nil, ""
		if refusal != "" {
			sc.LastSkip, sc.LastSkipReason = sc.LastRun, "submission refused: "+refusal
			sc.Skipped++
		} else {
			sc.LastJobID = jobID
			sc.Fired++
		}
		sc.UpdatedAt = now
		nrev, err := t.store.update(ctx, sc, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return nil, 0
		}
		written, wrev = sc, nrev
		break
	}
	if written == nil {
		return nil, 0
	}
	// Recorded by the controller whose update finished the claim: once.
	if refusal != "" {
		t.host.record(api.AuditRecord{Action: api.AuditScheduleSkip, Resource: written.ID,
			Detail: "submission refused: " + refusal + " (created by " + written.CreatedBy + ")"})
	} else {
		t.host.record(api.AuditRecord{Action: api.AuditScheduleTick, Resource: written.ID, Job: jobID,
			Detail: "fired job " + jobID + " as " + written.CreatedBy})
	}
	if refusal != "" {
		t.metrics.scheduleSkipped.WithLabelValues("refused").Inc()
		t.log.Warn("schedule: a tick's job was refused", "schedule", claimed.ID, "job", jobID, "reason", refusal)
	} else {
		t.metrics.scheduleFired.Inc()
	}
	return written, wrev
}

// submitTick makes sure the job of a claimed tick exists and is queued.
// refusal is set when it was refused for good; err when it should be tried
// again.
func (t *scheduleTicker) submitTick(ctx context.Context, sc *api.Schedule, jobID string) (refusal string, err error) {
	e, err := t.jobs.kv.Get(ctx, jobID)
	switch {
	case err == nil:
		// Stored already, by a claimer that may have died before queuing
		// it: queue it again (a duplicate request is dropped by its id).
		var j api.Job
		if json.Unmarshal(e.Value(), &j) == nil && (j.Status == api.JobPending || j.Status == api.JobWaiting) {
			return "", t.host.queueRequest(ctx, jobID, j.Priority, e.Revision(), e.Value())
		}
		return "", nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return "", err
	}
	job := sc.Job.Job()
	job.ID, job.ScheduleID = jobID, sc.ID
	by, err := t.scheduleCreator(sc)
	if err == nil {
		_, err = t.host.submit(ctx, job, by, submitOptions{})
	}
	switch {
	case err == nil, errors.Is(err, errJobExists):
		return "", nil
	case finalRefusal(err):
		return err.Error(), nil
	default:
		// Unavailable (or of no known kind): the claim stays for another
		// try.
		return "", err
	}
}

// scheduleCreator is who a schedule's ticks are submitted as: the token
// that created it, with the role that token has now. A token that is gone
// or revoked refuses every tick (errRefused).
func (t *scheduleTicker) scheduleCreator(sc *api.Schedule) (principal, error) {
	te, ok := t.tokens.get(sc.CreatedBy)
	if !ok || te.rec.RevokedAt != nil {
		return principal{}, refusef(errRefused, "the token %q that created the schedule no longer exists or is revoked; recreate the schedule with a valid token", sc.CreatedBy)
	}
	return principal{Name: te.rec.Name, Role: te.rec.Role}, nil
}
