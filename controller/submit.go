package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// decodeSubmission turns a POST /job body into a job not yet stored: parse
// (YAML or JSON, unknown fields refused). submit validates it. Any error
// names the field at fault and is the 400's message.
func decodeSubmission(body []byte) (*api.Job, error) {
	spec, err := api.ParseJobSpec(body)
	if err != nil {
		return nil, err
	}
	return spec.Job(), nil
}

// submitOptions change how submit takes a job.
type submitOptions struct {
	// allowEmpty takes a job whose target matches no node (POST
	// /job?allow_empty=true: Terraform's allow_empty); it is stored and
	// fails for want of online nodes when claimed.
	allowEmpty bool
}

// submit is the one way a job is made: POST /job, a retry, a schedule's
// tick and anything later all come here, so each gets the same checks, in
// this order: the controller is not stopping; the job's structure and its
// steps against the merged schemas of online nodes; the controller's
// policy for by (its allow list; dangerous_roles for by's role); every
// step against the schemas of the nodes the job targets now (its nodes, for
// a narrowed retry); sensitive values moved out; its size once stored with
// every result; admission (max_pending). Then it is stored and its request
// queued. by is who asks now: the caller of the API, or a schedule's
// creator. A job with an id set keeps it (a schedule's tick); otherwise it
// gets a new one. A refusal is a *jobError whose kind (errRefused,
// errInvalid, errTooLarge, errQueueFull, errStorageFull, errUnavailable,
// errJobExists) says why and whose message names the field at fault.
func (c *Controller) submit(ctx context.Context, job *api.Job, by principal, opts submitOptions) (*api.Job, error) {
	select {
	case <-c.stopping:
		return nil, refusef(errUnavailable, "controller %s is stopping; submit to another controller or try again", c.id)
	default:
	}
	if err := job.Validate(); err != nil {
		return nil, refuse(errInvalid, err)
	}
	cat := c.catalog()
	// The answer shows the nodes the job would run on now (the seed's API
	// did); the job resolves them again when it starts.
	online, offline := c.jobNodes(job, c.reg.preview)
	if err := cat.ValidateJob(job); err != nil {
		// The merged catalog holds one declaration of an action that
		// nodes declare differently (the first met): what decides is how
		// the nodes the job targets declare it, so a node elsewhere in the
		// fleet cannot make a job refused by declaring another's backend
		// its own way.
		if len(online) == 0 || validateOnNodes(job, c.reg.catalogsOf(online)) != nil {
			return nil, refuse(errInvalid, err)
		}
	}
	if err := c.checkPolicy(cat, job, by); err != nil {
		return nil, refuse(errRefused, err)
	}
	if len(online)+len(offline) == 0 && !opts.allowEmpty {
		// A misspelt group or node would otherwise be stored, queued and
		// failed later; an empty fleet has nothing to run on either.
		return nil, refuse(errInvalid, &api.ValidationError{Field: "target", Msg: fmt.Sprintf(
			"%s matches no node, online or offline (grid node list shows the nodes, their groups and sites)", job.Target)})
	}
	if err := validateOnNodes(job, c.reg.catalogsOf(online)); err != nil {
		return nil, refuse(errInvalid, err)
	}
	// Sensitive values leave the job here: it is stored and answered with
	// (sensitive) in their place.
	secrets, err := extractSensitive(job, cat)
	if err != nil {
		return nil, refuse(errInvalid, err)
	}
	if err := c.checkJobSize(job); err != nil {
		return nil, refuse(errTooLarge, err)
	}
	pending, err := c.pendingCount(ctx, c.cfg.MaxPending)
	if err != nil {
		return nil, refuse(errUnavailable, fmt.Errorf("count pending jobs: %w", err))
	}
	if pending >= c.cfg.MaxPending {
		c.metrics.admissionRejected.Inc()
		return nil, refusef(errQueueFull, "job queue is full (%d pending, max_pending %d); retry later", pending, c.cfg.MaxPending)
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
	job.NodeSites = c.reg.sitesOf(online, offline)
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
			return nil, storeError(err)
		}
	}
	rev, stored, err := c.jobs.create(ctx, job)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Someone else's job: leave it alone.
		return nil, refuse(errJobExists, fmt.Errorf("job %s: %w", job.ID, errJobExists))
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
		return nil, storeError(err)
	}
	c.jobIdx.put(job.ID, stored, job.CreatedAt, rev)
	if err := c.queueRequest(ctx, job.ID, job.Priority, rev, stored); err != nil {
		// Without its request no scheduler would ever see the job.
		_, _, _ = c.jobs.mutate(context.Background(), job.ID, func(j *api.Job) bool {
			j.Status, j.Error = api.JobFailed, "could not queue the job: "+err.Error()
			return true
		})
		if isMaxBytes(err) {
			return nil, refuse(errStorageFull, &storageFullError{bucket: api.StreamRequests, setting: "requests_max_bytes", err: err})
		}
		return nil, refuse(errUnavailable, fmt.Errorf("queue job: %w", err))
	}
	c.metrics.jobsSubmitted.Inc()
	jobLogger(c.log, job).Info("job submitted", "by", by.Name, "role", by.Role, "target", job.Target.String(),
		"steps", api.LeafCount(job.Tasks), "schedule", job.ScheduleID, "retry_of", job.RetryOf)
	return job, nil
}

// jobNodes resolves, with resolve, the nodes a job runs on and those of
// its target that are offline: its target's, or, for a job narrowed to
// some nodes (a retry of the failed ones), those nodes.
func (c *Controller) jobNodes(j *api.Job, resolve func(api.Target) (online, offline []string)) (online, offline []string) {
	if len(j.Nodes) == 0 {
		return resolve(j.Target)
	}
	for _, id := range j.Nodes {
		on, off := resolve(api.Target{Scope: api.ScopeNode, Value: id})
		online, offline = append(online, on...), append(offline, off...)
	}
	return online, offline
}

// expectedNodes resolves the nodes a job being claimed runs on (see
// jobNodes), moving the round robin of a ScopeAny target on.
func (c *Controller) expectedNodes(j *api.Job) (online, offline []string) {
	return c.jobNodes(j, c.reg.resolveAll)
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
