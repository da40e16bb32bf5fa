package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// enqueue stores a new job (pending) and queues its request: what a
// submission does once the job passed validation and admission. It fills in
// the id, status and times. On failure the job, if it was stored, is
// marked failed so that it does not stay pending without a request.
func (c *Controller) enqueue(ctx context.Context, job *api.Job) error {
	now := time.Now().UTC()
	job.ID = newJobID()
	job.Status = api.JobPending
	if job.NotBefore != nil && job.NotBefore.After(now) {
		// Queued now like any job; a claim before not_before puts the
		// request back until then (see claim), so the wait is kept by the
		// replicated consumer and outlives any controller.
		job.Status = api.JobWaiting
	}
	job.Expected = []string{}
	job.CreatedAt, job.UpdatedAt = now, now
	if job.Strategy == "" {
		job.Strategy = api.StrategyFailFast
	}
	stampTrace(ctx, job)
	rev, stored, err := c.jobs.create(ctx, job)
	if err != nil {
		// The write may have landed without its answer (a server failing
		// over); such a job has no request and would stay pending.
		mctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = c.jobs.mutate(mctx, job.ID, func(j *api.Job) bool {
			if j.Status != api.JobPending {
				return false
			}
			j.Status, j.Error = api.JobFailed, "could not store the job: "+err.Error()
			return true
		})
		return fmt.Errorf("store job: %w", err)
	}
	c.jobIdx.put(job.ID, stored, job.CreatedAt, rev)
	// The message id makes a retried publish harmless (the stream drops a
	// duplicate), so it can ride out a stream leader election in a cluster.
	req := requestMsg(job.ID, rev, stored)
	req.Subject = api.PriorityRequestSubject(job.Priority, job.ID)
	if _, err := c.js.PublishMsg(ctx, req,
		jetstream.WithMsgID(job.ID), jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(250*time.Millisecond)); err != nil {
		_, _, _ = c.jobs.mutate(context.Background(), job.ID, func(j *api.Job) bool {
			j.Status, j.Error = api.JobFailed, "could not queue the job: "+err.Error()
			return true
		})
		return fmt.Errorf("queue job: %w", err)
	}
	c.metrics.jobsSubmitted.Inc()
	jobLogger(c.log, job).Info("job submitted", "target", job.Target.String(), "steps", api.LeafCount(job.Tasks), "retry_of", job.RetryOf)
	return nil
}

// expectedNodes resolves the nodes a job being claimed runs on, and those
// of its target that are offline: its target's, or, for a job narrowed to
// some nodes (a retry of the failed ones), those nodes.
func (c *Controller) expectedNodes(j *api.Job) (online, offline []string) {
	if len(j.Nodes) == 0 {
		return c.reg.resolveAll(j.Target)
	}
	for _, id := range j.Nodes {
		on, off := c.reg.resolveAll(api.Target{Scope: api.ScopeNode, Value: id})
		online, offline = append(online, on...), append(offline, off...)
	}
	return online, offline
}
