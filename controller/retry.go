package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// The routes of this file and dlq.go are registered in apiRoutes: retry
// and delete need operator.

// handleRetry serves POST /job/{id}/retry: see retry.
func (c *Controller) handleRetry(w http.ResponseWriter, r *http.Request) {
	var req api.RetryRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "retry request: "+err.Error()+` (want {"failed_only": true|false})`)
			return
		}
	}
	noteAudit(r, func(n *auditNote) { n.params = map[string]any{"failed_only": req.FailedOnly} })
	job, err := c.retry(r.Context(), r.PathValue("id"), req.FailedOnly, principalFrom(r.Context()))
	if err != nil {
		writeRefusal(w, err)
		return
	}
	noteAudit(r, func(n *auditNote) { n.detail = "new job " + job.ID })
	writeJSON(w, http.StatusAccepted, job)
}

// retry makes a new job with every setting of a finished one (retryJob),
// linked to it by retry_of; with failedOnly, only on the nodes that did not
// finish every step they ran (failed, cancelled, unreachable, or never
// answered). It is submitted as by, the caller of the retry, not the
// original submitter: through submit, so policy, validation on the nodes,
// size and admission apply as they do to any new job.
func (c *Controller) retry(ctx context.Context, id string, failedOnly bool, by principal) (*api.Job, error) {
	orig, err := c.currentJob(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		return nil, refusef(errJobNotFound, "job %s not found", id)
	}
	if err != nil {
		return nil, refuse(errUnavailable, fmt.Errorf("read job %s: %w", id, err))
	}
	if !orig.Status.Terminal() {
		return nil, refusef(errJobState, "job %s is %s; retry a finished job (or cancel it first)", id, orig.Status)
	}
	if p := sensitiveParam(orig); p != "" {
		// Its values were dropped when the job ended; a retry would send
		// the placeholder in their place.
		return nil, refusef(errJobState, "job %s has sensitive param %s, whose value is not kept after a job ends; submit the job again with it", id, p)
	}
	job, err := retryJob(orig)
	if err != nil {
		return nil, refuse(errInvalid, err)
	}
	if failedOnly {
		job.Nodes = failedNodes(orig)
		if len(job.Nodes) == 0 {
			return nil, refusef(errJobState, "job %s has no failed nodes to retry (status %s)", id, orig.Status)
		}
	}
	return c.submit(ctx, job, by, submitOptions{})
}

// retryJob is a new job with every setting of orig (what it runs, where,
// and how: target and the nodes it was narrowed to, tasks, strategy,
// timeout, check mode, rollout limits, priority, not_before), linked to it
// by retry_of, and none of its run (status, results, times, owner,
// submitter, trace, schedule). It shares nothing with orig.
func retryJob(orig *api.Job) (*api.Job, error) {
	settings := api.Job{
		Target: orig.Target, Tasks: orig.Tasks, Strategy: orig.Strategy, Timeout: orig.Timeout, CheckMode: orig.CheckMode,
		MaxConcurrency: orig.MaxConcurrency, MaxErrors: orig.MaxErrors, Priority: orig.Priority, NotBefore: orig.NotBefore,
		Nodes: orig.Nodes,
	}
	// A deep copy: tasks hold maps, and orig may be a running
	// controller's copy.
	b, err := json.Marshal(settings)
	if err != nil {
		return nil, fmt.Errorf("copy job %s: %w", orig.ID, err)
	}
	var job api.Job
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, fmt.Errorf("copy job %s: %w", orig.ID, err)
	}
	job.RetryOf = orig.ID
	return &job, nil
}

// failedNodes are the nodes of a finished job that did not finish every
// step they ran: a step failed (unreachable and timed out included) or was
// cancelled, or the node has no final result at all.
func failedNodes(j *api.Job) []string {
	var out []string
	for _, id := range j.Expected {
		ok, seen := true, false
		for _, m := range j.Results {
			res := m[id]
			if res == nil {
				continue
			}
			seen = true
			if res.Status != api.StepSuccess && res.Status != api.StepSkipped {
				ok = false
			}
		}
		if !ok || !seen {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// handleDeleteJob removes a finished job from the jobs bucket (its results
// in the results stream expire on their own). A job that may still change
// (pending or running) is a 409: cancel it first.
func (c *Controller) handleDeleteJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j, rev, err := c.jobs.get(r.Context(), id)
	if errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %s not found", id))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !j.Status.Terminal() || c.localRun(id) != nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %s is %s; cancel it first, then delete it", id, j.Status))
		return
	}
	// Deleting at the revision read makes a job that changed since (it
	// cannot once terminal, but a stale replica may have answered) a
	// conflict instead of a lost update.
	if err := c.jobs.delete(r.Context(), id, rev); err != nil {
		if errors.Is(err, errConflict) {
			writeError(w, http.StatusConflict, fmt.Sprintf("job %s changed while being deleted; try again", id))
			return
		}
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("job deleted", "job", id, "status", j.Status)
	w.WriteHeader(http.StatusNoContent)
}

// delete removes a job if its stored revision is still rev.
func (s *jobStore) delete(ctx context.Context, id string, rev uint64) error {
	err := s.kv.Delete(ctx, id, jetstream.LastRevision(rev))
	if err == nil {
		return nil
	}
	if isRevisionConflict(err) {
		return errConflict
	}
	return fmt.Errorf("delete job %s: %w", id, err)
}

// sensitiveParam names a param of the job whose value was held back as
// sensitive ("step N: name"), or "".
func sensitiveParam(j *api.Job) string {
	for _, s := range api.Flatten(j.Tasks) {
		for k, v := range s.Task.Params {
			if v == api.SensitiveValue {
				return fmt.Sprintf("%s (step %d)", k, s.Index)
			}
		}
	}
	return ""
}
