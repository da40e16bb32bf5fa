package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// scheduleRow is one schedule as the dashboard's schedules view shows it:
// the schedule and a summary of the last job it fired (nil when it has
// fired none, or that job is gone).
type scheduleRow struct {
	api.Schedule
	LastJob *api.JobHead `json:"last_job,omitempty"`
}

// handleSchedulesPage serves GET /schedules/page: every schedule with its
// last job's summary, read by key (one small read per schedule, no scan).
func (c *Controller) handleSchedulesPage(w http.ResponseWriter, r *http.Request) {
	list, err := c.scheds.list(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := make([]scheduleRow, 0, len(list))
	for _, s := range list {
		row := scheduleRow{Schedule: s}
		if s.LastJobID != "" {
			h, err := c.views.jobHead(r.Context(), s.LastJobID)
			switch {
			case err == nil:
				row.LastJob = &h
			case errors.Is(err, jetstream.ErrKeyNotFound):
				// Deleted by retention or by hand: the row says so by
				// having no last job.
			default:
				writeError(w, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		out = append(out, row)
	}
	writeJSON(w, http.StatusOK, out)
}

// jobHead reads one stored job's summary; a job this controller runs shows
// its state in memory, which is ahead of the store.
func (v *dashboardViews) jobHead(ctx context.Context, id string) (api.JobHead, error) {
	e, err := v.jobsKV.Get(ctx, id)
	if err != nil {
		return api.JobHead{}, fmt.Errorf("read job %s: %w", id, err)
	}
	var s storedJobHead
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return api.JobHead{}, fmt.Errorf("read job %s: %w", id, err)
	}
	h := s.head()
	if lr := v.live.localRun(h.ID); lr != nil {
		lr.mu.Lock()
		h.Status, h.Step, h.Error, h.Nodes = lr.job.Status, lr.job.Step, lr.job.Error, len(lr.job.Expected)
		h.UpdatedAt, h.StartedAt, h.FinishedAt = lr.job.UpdatedAt, lr.job.StartedAt, lr.job.FinishedAt
		lr.mu.Unlock()
	}
	return h, nil
}

// Page sizes of a node's recent jobs.
const (
	defaultNodeJobs = 20
	maxNodeJobs     = 200
)

// nodeJobsPage is the answer of GET /node/{id}/jobs.
type nodeJobsPage struct {
	Node string `json:"node"`
	// Total is how many jobs the index holds that touched the node.
	Total int       `json:"total"`
	Jobs  []nodeJob `json:"jobs"`
}

// handleNodeJobs serves GET /node/{id}/jobs?limit=: the newest jobs that
// touched the node (targeted it, or found it offline), with its outcome
// in each, from the job index in memory.
func (c *Controller) handleNodeJobs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !api.ValidToken(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("node id %q: want letters, digits, '-' or '_'", id))
		return
	}
	limit, _, err := pageParams(r, defaultNodeJobs, maxNodeJobs)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := c.jobIdx.waitReady(r.Context()); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	jobs, total := c.jobIdx.nodeJobs(id, limit)
	writeJSON(w, http.StatusOK, nodeJobsPage{Node: id, Total: total, Jobs: jobs})
}

// whoami is the answer of GET /whoami: the caller's token name and role,
// and what that role may do, so the dashboard shows only the actions the
// controller would accept (it still enforces them on every request).
type whoami struct {
	Name   string   `json:"name"`
	Role   api.Role `json:"role"`
	Submit bool     `json:"submit"`
	Admin  bool     `json:"admin"`
}

func (c *Controller) handleWhoami(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	writeJSON(w, http.StatusOK, whoami{Name: p.Name, Role: p.Role, Submit: p.Role.Includes(api.RoleOperator), Admin: p.Role.Includes(api.RoleAdmin)})
}
