package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// schedulerConsumer is the durable consumer on the requests stream that
// every controller pulls from, so each job is claimed once.
const schedulerConsumer = "scheduler"

// missingJobGrace is how long a request whose job cannot be read is retried
// before it is dropped.
const missingJobGrace = 30 * time.Second

// fetchBatch bounds how many requests one pull of the scheduler takes.
const fetchBatch = 64

// requestRevHeader carries, on a request, the revision of the job stored
// with it in the message body.
const requestRevHeader = "Grid-Job-Revision"

// maxRequestJob bounds the job JSON a request carries; a bigger job's
// request holds only its id.
const maxRequestJob = 64 << 10

// requestMsg is the request for a submitted job: its id in the subject, and
// the job as stored with its revision, so a claim needs no read while the
// job is unchanged. A request with only the id in its body (a big job, or
// an older controller's) works too.
func requestMsg(id string, rev uint64, stored []byte) *nats.Msg {
	m := &nats.Msg{Subject: api.RequestSubject(id), Data: []byte(id)}
	if len(stored) <= maxRequestJob {
		m.Header = nats.Header{requestRevHeader: []string{strconv.FormatUint(rev, 10)}}
		m.Data = stored
	}
	return m
}

// requestJob returns the job and revision a request carries, or nil.
func requestJob(m jetstream.Msg, id string) (*api.Job, uint64) {
	rev, err := strconv.ParseUint(m.Headers().Get(requestRevHeader), 10, 64)
	if err != nil {
		return nil, 0
	}
	var j api.Job
	if json.Unmarshal(m.Data(), &j) != nil || j.ID != id {
		return nil, 0
	}
	return &j, rev
}

// claim takes a submitted job: it moves it from pending to running with
// this controller as owner (compare-and-swap, so two controllers never both
// win) and starts it. It returns whether a run started.
func (c *Controller) claim(ctx context.Context, m jetstream.Msg) bool {
	id := api.RequestJobID(m.Subject())
	started := false
	// refusedNow: this claim ended the job, refused at start.
	refusedNow := false
	var notYet time.Duration
	carried, crev := requestJob(m, id)
	if why := c.crashedClaim(m, carried); why != "" {
		c.deadLetter(ctx, m, id, why)
		return false
	}
	job, rev, err := c.jobs.mutateFrom(ctx, id, carried, crev, func(j *api.Job) bool {
		// Judged on each try: an earlier try may have lost to a cancel.
		started, refusedNow = false, false
		if notYet = untilDue(j); notYet > 0 {
			return false
		}
		if j.Status != api.JobPending && j.Status != api.JobWaiting {
			return false
		}
		j.Expected, j.Unreachable = c.expectedNodes(j)
		j.NodeSites = c.reg.sitesOf(j.Expected, j.Unreachable)
		now := time.Now().UTC()
		if err := c.policyAtStart(j); err != nil {
			// Refused as it would have been at submit had these nodes
			// been online then: the job ends without running.
			j.Status, j.Error, j.FinishedAt, j.UpdatedAt = api.JobFailed, "refused at start: "+err.Error(), &now, now
			refusedNow = true
			return true
		}
		j.Status = api.JobRunning
		j.Owner = c.id
		j.UpdatedAt = now
		j.StartedAt = &now
		started = true
		return true
	})
	if err != nil {
		if errors.Is(err, api.ErrNotFound) {
			// In a cluster a KV read may be answered by a replica that has
			// not yet applied the job's creation (direct gets are served by
			// followers too), so a just-submitted job can look missing. Try
			// again for a while; only a request that still has no job after
			// that is dropped.
			if md, mdErr := m.Metadata(); mdErr == nil && time.Since(md.Timestamp) < missingJobGrace {
				_ = m.NakWithDelay(250 * time.Millisecond)
				return false
			}
			c.log.Warn("dropping the request of a job that does not exist", "job", id)
			_ = m.Ack()
			return false
		}
		c.log.Warn("claim job", "job", id, "err", err)
		// A bus that does not answer (a stream electing a leader after a
		// server died) says nothing about the request: only failures of
		// the request itself count toward the dead letter.
		if c.lastDelivery(m) && !busUnavailable(err) {
			c.deadLetter(ctx, m, id, "claim failed: "+err.Error())
			return false
		}
		_ = m.NakWithDelay(time.Second)
		return false
	}
	if notYet > 0 {
		c.putBackUntilDue(m, id, notYet)
		return false
	}
	// A job started by this claim (not one resumed below) gets its
	// job.start record.
	claimedNow := started
	if !started && job.Status == api.JobRunning && job.Owner == c.id && c.localRun(id) == nil {
		// An earlier claim's write landed but its answer was lost (a
		// stream failing over): the job is ours, yet nothing runs it, and
		// no peer takes over from a live owner. Run it now.
		c.log.Info("resuming a job whose claim was stored without an answer", "job", id)
		started = true
	}
	if refusedNow {
		c.record(api.AuditRecord{Action: api.AuditJobEnd, Resource: id, Job: id,
			Detail: fmt.Sprintf("%s; submitted by %s: %s", job.Status, job.SubmittedBy, job.Error)})
	}
	if started && claimedNow {
		c.record(api.AuditRecord{Action: api.AuditJobStart, Resource: id, Job: id,
			Summary: &api.JobSummary{Targeted: len(job.Expected) + len(job.Unreachable), Unreachable: len(job.Unreachable)},
			Detail:  fmt.Sprintf("submitted by %s; started on %d node(s), %d unreachable", job.SubmittedBy, len(job.Expected), len(job.Unreachable))})
	}
	if started {
		// Refused once shutdown began: the job stays running and owned
		// here, for a restart or a peer to resume, like one interrupted.
		started = c.startRun(job, rev)
	}
	// A confirmed ack: once a job runs its request no longer counts as
	// pending for admission control. (A controller that dies before the
	// ack leaves the request to be delivered again; the job is no longer
	// pending then, and the request is dropped.)
	if err := m.DoubleAck(ctx); err != nil {
		c.log.Warn("ack request", "job", id, "err", err)
	}
	// Not started: cancelled while pending, or already taken.
	return started
}

// startRun executes a job this controller owns. It refuses (false) once
// shutdown has begun, so every run shutdown waits for is known to it.
func (c *Controller) startRun(job *api.Job, rev uint64) bool {
	if job.StartedAt == nil {
		now := time.Now().UTC()
		job.StartedAt = &now
	}
	spanCtx, span := c.startJobSpan(job)
	root, cancel := context.WithCancelCause(spanCtx)
	rctx, stopTimeout := root, context.CancelFunc(func() {})
	if d, err := time.ParseDuration(job.Timeout); err == nil && job.StartedAt != nil {
		// The job timeout counts from when the job first started, so a
		// resumed job keeps its original deadline.
		rctx, stopTimeout = context.WithDeadlineCause(root, job.StartedAt.Add(d), errJobTimeout)
		c.stopAgentsOnJobTimeout(rctx, job.ID)
	}
	size := 4 * len(job.Expected)
	r := &run{
		c: c, log: jobLogger(c.log, job), steps: api.Flatten(job.Tasks), span: span,
		inbox: make(chan *api.TaskResult, max(size, 1024)), retryC: make(chan retryReq, 64), limitC: make(chan *limitQueue, 16),
		ctx: rctx, cancel: cancel, stopTimeout: stopTimeout, job: job, enc: newJobEncoder(), rev: rev, resolvedAt: *job.StartedAt,
		flushKick: make(chan struct{}, 1), done: make(chan struct{}), settled: make(chan struct{}),
	}
	if hasSensitive(r.steps) {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		sec, err := c.loadSecrets(sctx, job.ID)
		scancel()
		if err != nil {
			// The steps that need them fail on the node, naming the param.
			r.log.Warn("sensitive params unavailable", "err", err)
			sec = stepSecrets{}
		}
		r.secrets = sec
	}
	if !c.addRun(r) {
		cancel(errShutdown)
		stopTimeout()
		span.End()
		r.log.Info("shutting down; not starting the job")
		return false
	}
	r.log.Info("job started", "target", job.Target.String(), "nodes", len(job.Expected), "steps", len(r.steps))
	go func() {
		defer c.runWG.Done()
		r.execute()
	}()
	return true
}

// resumeOwned restarts the running jobs this controller owned before it
// stopped, folding in the results that arrived meanwhile so that no node
// re-runs a step it finished.
func (c *Controller) resumeOwned(ctx context.Context) {
	jobs, err := c.jobs.list(ctx)
	if err != nil {
		c.log.Warn("list jobs for recovery", "err", err)
		return
	}
	for i := range jobs {
		j := &jobs[i]
		if j.Status != api.JobRunning || j.Owner != c.id {
			continue
		}
		select {
		case c.slots <- struct{}{}:
		default:
			c.log.Warn("no capacity to resume job", "job", j.ID)
			continue
		}
		if !c.adopt(ctx, j.ID, c.id) {
			<-c.slots
		}
	}
}

// foldStoredResults reads a job's results from the results stream and
// records the final ones in the job.
func (c *Controller) foldStoredResults(ctx context.Context, j *api.Job) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := c.js.OrderedConsumer(cctx, api.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: api.JobResultsSubjects(j.ID),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	info, err := cons.Info(cctx)
	if err != nil {
		return err
	}
	pending := info.NumPending
	for pending > 0 {
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return err
		}
		pending--
		var tr api.TaskResult
		if json.Unmarshal(m.Data(), &tr) != nil || !api.StepTerminal(tr.Status) {
			continue
		}
		step, node, ok := storedResultOf(m.Subject(), &tr)
		if !ok {
			continue
		}
		steps := api.LeafCount(j.Tasks)
		if step >= steps {
			continue
		}
		maxRetries := api.Flatten(j.Tasks)[step].Task.MaxRetries
		if tr.Status == api.StepFailed && tr.Attempt <= maxRetries {
			continue // a retry was still due
		}
		m2 := ensureStep(j, step)
		m2[node] = &api.NodeResult{Status: tr.Status, Output: tr.Output, Error: tr.Error, Changed: tr.Changed,
			Facts: tr.Facts, Duration: tr.Duration, Attempts: tr.Attempt,
			Events: []api.Event{{Status: tr.Status, Time: tr.Timestamp, Attempt: tr.Attempt, Message: tr.Error}}}
	}
	return nil
}

// storedResultOf says which step and node a result stored on subject is
// of: the body's (written by the controller that stored it) on
// result.<job>, the subject's on result.<job>.<step>.<node> (stored by an
// earlier version).
func storedResultOf(subject string, tr *api.TaskResult) (step int, node string, ok bool) {
	parts := strings.SplitN(subject, ".", 4)
	switch len(parts) {
	case 2:
		return tr.TaskIndex, tr.NodeID, tr.TaskIndex >= 0 && api.ValidToken(tr.NodeID)
	case 4:
		step, err := strconv.Atoi(parts[2])
		return step, parts[3], err == nil && step >= 0
	}
	return 0, "", false
}

// pendingEstimate saves admission control a stream info request per
// submission: it keeps the last exact count and, pessimistically, adds one
// for every submission since (claims only lower the true count). While the
// estimate is below the limit so is the true count; at the limit, or when
// the count is older than pendingFresh, the stream is asked again.
type pendingEstimate struct {
	mu    sync.Mutex
	at    time.Time
	exact int
	since int
}

const pendingFresh = 100 * time.Millisecond

// pendingCount is an upper bound of the number of submitted jobs no
// controller has claimed, exact when it reaches limit.
func (c *Controller) pendingCount(ctx context.Context, limit int) (int, error) {
	p := &c.pending
	p.mu.Lock()
	if est := p.exact + p.since; !p.at.IsZero() && time.Since(p.at) < pendingFresh && est < limit {
		p.since++
		p.mu.Unlock()
		return est, nil
	}
	p.mu.Unlock()
	n, err := c.exactPendingCount(ctx)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.at, p.exact, p.since = time.Now(), n, 1
	p.mu.Unlock()
	return n, nil
}

// exactPendingCount asks the requests stream.
func (c *Controller) exactPendingCount(ctx context.Context) (int, error) {
	s, err := c.js.Stream(ctx, api.StreamRequests)
	if err != nil {
		return 0, fmt.Errorf("requests stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("requests stream: %w", err)
	}
	return int(info.State.Msgs), nil
}
