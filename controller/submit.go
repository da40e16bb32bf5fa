package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// decodeSubmission turns a POST /job body into a job not yet stored: parse
// (YAML or JSON, unknown fields refused), validate its structure, then
// validate every task against the catalog of online nodes. Any error names
// the field at fault and is the 400's message.
func decodeSubmission(body []byte, cat *api.Catalog) (*api.Job, error) {
	spec, err := api.ParseJobSpec(body)
	if err != nil {
		return nil, err
	}
	job := spec.Job()
	if err := cat.ValidateJob(job); err != nil {
		return nil, err
	}
	return job, nil
}

// errJobExists is submit's answer for a job whose preset id is taken: a
// schedule's tick that was submitted already.
var errJobExists = errors.New("a job with this id exists")

// submit queues a decoded, structurally valid job as POST /job does:
// policy for the submitter, validation on the nodes its target resolves to
// now, sensitive values moved out, size and admission checks, then the job
// stored and its request queued. A job with an id set keeps it (a
// schedule's tick); otherwise it gets a new one. On refusal it returns the
// HTTP status to answer with and an error naming the field at fault.
func (c *Controller) submit(ctx context.Context, job *api.Job, cat *api.Catalog, by principal) (*api.Job, int, error) {
	if err := c.checkPolicy(cat, job, by); err != nil {
		return nil, http.StatusForbidden, err
	}
	// The answer shows the nodes the target resolves to now (the seed's
	// API did); the job resolves it again when it starts.
	online, offline := c.reg.preview(job.Target)
	if err := validateOnNodes(job, c.reg.catalogsOf(online)); err != nil {
		return nil, http.StatusBadRequest, err
	}
	// Sensitive values leave the job here: it is stored and answered with
	// (sensitive) in their place.
	secrets, err := extractSensitive(job, cat)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if err := c.checkJobSize(job); err != nil {
		return nil, http.StatusBadRequest, err
	}
	pending, err := c.pendingCount(ctx, c.cfg.MaxPending)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	if pending >= c.cfg.MaxPending {
		c.metrics.admissionRejected.Inc()
		return nil, http.StatusTooManyRequests, fmt.Errorf("job queue is full (%d pending, max_pending %d); retry later", pending, c.cfg.MaxPending)
	}
	now := time.Now().UTC()
	if job.ID == "" {
		job.ID = newJobID()
	}
	job.Status = api.JobPending
	if job.NotBefore != nil && job.NotBefore.After(now) {
		// Queued now like any job; a claim before not_before puts the
		// request back until then (see claim), so the wait is kept by the
		// replicated consumer and outlives any controller.
		job.Status = api.JobWaiting
	}
	job.SubmittedBy = by.Name
	job.Expected, job.Unreachable = online, offline
	if job.Expected == nil {
		job.Expected = []string{}
	}
	job.CreatedAt, job.UpdatedAt = now, now
	if job.Strategy == "" {
		job.Strategy = api.StrategyFailFast
	}
	stampTrace(ctx, job)
	if len(secrets) > 0 {
		if err := c.storeSecrets(ctx, job.ID, secrets); err != nil {
			return nil, http.StatusServiceUnavailable, err
		}
	}
	rev, stored, err := c.jobs.create(ctx, job)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Someone else's job: leave it alone.
		return nil, http.StatusConflict, fmt.Errorf("job %s: %w", job.ID, errJobExists)
	}
	if err != nil {
		// The write may have landed without its answer (a server failing
		// over); such a job has no request and would stay pending, so
		// mark it failed if it exists.
		mctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = c.jobs.mutate(mctx, job.ID, func(j *api.Job) bool {
			if j.Status != api.JobPending && j.Status != api.JobWaiting {
				return false
			}
			j.Status, j.Error = api.JobFailed, "could not store the job: "+err.Error()
			return true
		})
		return nil, http.StatusServiceUnavailable, err
	}
	c.jobIdx.put(job.ID, stored, job.CreatedAt, rev)
	if err := c.queueRequest(ctx, job.ID, job.Priority, rev, stored); err != nil {
		// Without its request no scheduler would ever see the job.
		_, _, _ = c.jobs.mutate(context.Background(), job.ID, func(j *api.Job) bool {
			j.Status, j.Error = api.JobFailed, "could not queue the job: "+err.Error()
			return true
		})
		return nil, http.StatusServiceUnavailable, fmt.Errorf("queue job: %w", err)
	}
	c.metrics.jobsSubmitted.Inc()
	jobLogger(c.log, job).Info("job submitted", "by", by.Name, "target", job.Target.String(),
		"steps", api.LeafCount(job.Tasks), "schedule", job.ScheduleID)
	return job, http.StatusAccepted, nil
}

// queueRequest publishes a stored job's request. The message id makes a
// repeated publish harmless (the stream drops a duplicate within its
// duplicate window), so it can ride out a stream leader election in a
// cluster, and a schedule's tick can be queued again by a peer that is not
// sure it was.
func (c *Controller) queueRequest(ctx context.Context, id string, priority int, rev uint64, stored []byte) error {
	req := requestMsg(id, rev, stored)
	req.Subject = api.PriorityRequestSubject(priority, id)
	_, err := c.js.PublishMsg(ctx, req,
		jetstream.WithMsgID(id), jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(250*time.Millisecond))
	return err
}
