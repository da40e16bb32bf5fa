package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// errNoEnrollmentHere answers enrollment routes on a controller without
// the embedded server's security (insecure, or an external NATS).
const errNoEnrollmentHere = "agent enrollment is off on this controller (insecure, or nats_urls: the NATS deployment authenticates agents)"

// handleListEnrollments serves GET /enrollments[?status=pending].
func (c *Controller) handleListEnrollments(w http.ResponseWriter, r *http.Request) {
	if c.sec == nil {
		writeError(w, http.StatusNotFound, errNoEnrollmentHere)
		return
	}
	status := r.URL.Query().Get("status")
	switch status {
	case "", api.EnrollPending, api.EnrollAdmitted, api.EnrollRevoked:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("status %q: want pending, admitted or revoked", status))
		return
	}
	// ?node= answers with one node's record alone (the dashboard's node
	// page), read by key rather than by listing the whole fleet's.
	if node := r.URL.Query().Get("node"); node != "" {
		list := []api.Enrollment{}
		if e, ok := c.sec.one(node); ok && (status == "" || e.Status == status) {
			list = append(list, e)
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	writeJSON(w, http.StatusOK, c.sec.list(status))
}

// handleDecide serves POST /enrollments/{id}/approve and .../revoke. A
// revocation also removes the node from the nodes bucket; every controller
// closes the agent's connections as its enrollment watch sees the change.
func (c *Controller) handleDecide(to string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.sec == nil {
			writeError(w, http.StatusNotFound, errNoEnrollmentHere)
			return
		}
		id := r.PathValue("id")
		if !api.ValidToken(id) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("node id %q: want letters, digits, '-' or '_'", id))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		e, err := c.sec.decide(ctx, id, to)
		switch {
		case errors.Is(err, errNoEnrollment):
			writeError(w, http.StatusNotFound, fmt.Sprintf("node %s: %v", id, err))
			return
		case errors.Is(err, errRevokedApprove), errors.Is(err, errEnrollConflict):
			writeError(w, http.StatusConflict, fmt.Sprintf("node %s: %v", id, err))
			return
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		if to == api.EnrollRevoked {
			_ = c.nodesKV.Delete(ctx, id)
		}
		c.log.Info("node enrollment decided", "node", id, "status", e.Status)
		writeJSON(w, http.StatusOK, e)
	}
}
