package controller

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// The routes of this file are registered in apiRoutes: reading schedules
// needs read, changing them operator.

// readScheduleSpec reads and checks a schedule body: its own fields, its
// job's structure, and the job as POST /job would check it for the caller
// (the catalog of online nodes, the controller's policy). Sensitive params
// are refused: a schedule keeps its job to submit it again and again, and
// sensitive values are kept only while one job may use them.
func (c *Controller) readScheduleSpec(w http.ResponseWriter, r *http.Request) (*api.ScheduleSpec, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return nil, false
	}
	spec, err := api.ParseScheduleSpec(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	spec.Normalize()
	if err := c.checkScheduleJob(spec, principalFrom(r.Context())); err != nil {
		writeRefusal(w, err)
		return nil, false
	}
	return spec, true
}

// checkScheduleJob checks a schedule's job as submit would for by, as far
// as it can before a tick: its steps against the catalog of online nodes
// and the controller's policy. Sensitive params are refused. Each tick
// goes through submit again, as the schedule's creator.
func (c *Controller) checkScheduleJob(spec *api.ScheduleSpec, by principal) error {
	cat := c.catalog()
	job := spec.Job.Job()
	if err := cat.ValidateJob(job); err != nil {
		return refuse(errInvalid, api.PrefixField("job", err))
	}
	if err := c.checkPolicy(cat, job, by); err != nil {
		return refuse(errRefused, api.PrefixField("job", err))
	}
	secrets, err := extractSensitive(job, cat)
	if err != nil {
		return refuse(errInvalid, api.PrefixField("job", err))
	}
	if len(secrets) > 0 {
		return refusef(errInvalid, "job: a schedule cannot hold sensitive params (their values are kept only while one job runs); give the value on the nodes instead")
	}
	return nil
}

// scheduleNext is a schedule's next run from now (nil while paused).
func scheduleNext(spec *api.ScheduleSpec, now time.Time) *time.Time {
	if spec.Paused {
		return nil
	}
	n, err := spec.NextRun(now)
	if err != nil {
		return nil // validated before
	}
	return &n
}

func (c *Controller) handleCreateSchedule(w http.ResponseWriter, r *http.Request) {
	spec, ok := c.readScheduleSpec(w, r)
	if !ok {
		return
	}
	noteAudit(r, func(n *auditNote) { n.resource, n.params = spec.Name, auditScheduleParams(spec) })
	now := time.Now().UTC()
	sc := &api.Schedule{ID: spec.Name, ScheduleSpec: *spec, NextRun: scheduleNext(spec, now),
		CreatedBy: principalFrom(r.Context()).Name, CreatedAt: now, UpdatedAt: now}
	if _, err := c.scheds.create(r.Context(), sc); err != nil {
		if errors.Is(err, errConflict) {
			writeError(w, http.StatusConflict, fmt.Sprintf("name: a schedule named %q exists (update it with PUT /schedule/%s, or delete it first)", sc.ID, sc.ID))
			return
		}
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("schedule created", "schedule", sc.ID, "cron", sc.Cron, "time_zone", sc.TimeZone, "by", sc.CreatedBy)
	writeJSON(w, http.StatusCreated, sc)
}

func (c *Controller) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	out, err := c.scheds.list(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Controller) handleGetSchedule(w http.ResponseWriter, r *http.Request) {
	sc, _, err := c.scheds.get(r.Context(), r.PathValue("id"))
	if !c.scheduleFound(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, sc)
}

// scheduleFound answers a failed read: 404 or 503.
func (c *Controller) scheduleFound(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, api.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("schedule %s not found", r.PathValue("id")))
	default:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
	return false
}

// handleUpdateSchedule replaces a schedule's spec in place. Its next run is
// worked out again from now when the cron expression, the time zone or
// paused changed; the firing state (last run, counts) stays.
func (c *Controller) handleUpdateSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	spec, ok := c.readScheduleSpec(w, r)
	if !ok {
		return
	}
	if spec.Name != id {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name: %q differs from the schedule's id %q (a schedule cannot be renamed; create another)", spec.Name, id))
		return
	}
	by := principalFrom(r.Context())
	c.changeSchedule(w, r, func(sc *api.Schedule, now time.Time) {
		timing := sc.Cron != spec.Cron || sc.TimeZone != spec.TimeZone || sc.Paused != spec.Paused
		sc.ScheduleSpec = *spec
		// Its ticks run as whoever set their job last: an editor's job
		// does not run with the creator's rights, and stops with the
		// editor's token.
		sc.CreatedBy = by.Name
		if timing || sc.NextRun == nil {
			sc.NextRun = scheduleNext(spec, now)
		}
	})
}

// handlePause stops a schedule firing; handleResume makes it fire again
// from the first tick after now (the ticks in between are not caught up).
func (c *Controller) handlePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !paused {
			// Resuming makes its ticks fire again: the caller must be one
			// who could have set its job.
			sc, _, err := c.scheds.get(r.Context(), r.PathValue("id"))
			if !c.scheduleFound(w, r, err) {
				return
			}
			if err := c.checkScheduleJob(&sc.ScheduleSpec, principalFrom(r.Context())); err != nil {
				writeRefusal(w, err)
				return
			}
		}
		c.changeSchedule(w, r, func(sc *api.Schedule, now time.Time) {
			if sc.Paused == paused {
				return
			}
			sc.Paused = paused
			sc.NextRun = scheduleNext(&sc.ScheduleSpec, now)
		})
	}
}

// changeSchedule applies fn to the stored schedule by CAS and answers with
// the result.
func (c *Controller) changeSchedule(w http.ResponseWriter, r *http.Request, fn func(*api.Schedule, time.Time)) {
	sc, err := c.scheds.mutate(r.Context(), r.PathValue("id"), func(sc *api.Schedule) (bool, error) {
		now := time.Now().UTC()
		fn(sc, now)
		sc.UpdatedAt = now
		return true, nil
	})
	if !c.scheduleFound(w, r, err) {
		return
	}
	c.log.Info("schedule changed", "schedule", sc.ID, "paused", sc.Paused, "by", principalFrom(r.Context()).Name)
	writeJSON(w, http.StatusOK, sc)
}

// handleDeleteSchedule removes a schedule; the jobs it submitted stay.
func (c *Controller) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, _, err := c.scheds.get(r.Context(), id); !c.scheduleFound(w, r, err) {
		return
	}
	if err := c.scheds.delete(r.Context(), id); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("schedule deleted", "schedule", id, "by", principalFrom(r.Context()).Name)
	w.WriteHeader(http.StatusNoContent)
}
