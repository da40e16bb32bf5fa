package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller/ui"
)

// apiRoutes is the API: every route with the weakest role that may call it
// (see api.Role). A new route is one line here, with its role.
func (c *Controller) apiRoutes() []route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	return []route{
		{"POST /job", api.RoleOperator, h(c.handleSubmit)},
		{"GET /job/{id}", api.RoleRead, h(c.handleGetJob)},
		{"POST /job/{id}/cancel", api.RoleOperator, h(c.handleCancel)},
		{"GET /jobs", api.RoleRead, h(c.handleListJobs)},
		{"GET /nodes", api.RoleRead, h(c.handleListNodes)},
		{"GET /node/{id}", api.RoleRead, h(c.handleGetNode)},
		{"DELETE /node/{id}", api.RoleAdmin, h(c.handleRemoveNode)},
		{"GET /status", api.RoleRead, h(c.handleStatus)},
		{"GET /controllers", api.RoleRead, h(c.handleControllers)},
		{"GET /backends", api.RoleRead, h(c.handleBackends)},
		{"POST /token", api.RoleAdmin, h(c.handleCreateToken)},
		{"GET /tokens", api.RoleAdmin, h(c.handleListTokens)},
		{"DELETE /token/{name}", api.RoleAdmin, h(c.handleRevokeToken)},
		{"GET /enrollments", api.RoleAdmin, h(c.handleListEnrollments)},
		{"POST /enrollments/{id}/approve", api.RoleAdmin, h(c.handleDecide(api.EnrollAdmitted))},
		{"POST /enrollments/{id}/revoke", api.RoleAdmin, h(c.handleDecide(api.EnrollRevoked))},
		{"POST /join-token", api.RoleAdmin, h(c.handleCreateJoinToken)},
		{"GET /join-tokens", api.RoleAdmin, h(c.handleListJoinTokens)},
		{"DELETE /join-token/{name}", api.RoleAdmin, h(c.handleRevokeJoinToken)},
		// Sites (sites_http.go): their credentials hold secrets.
		{"POST /site", api.RoleAdmin, h(c.handleCreateSite)},
		{"GET /sites", api.RoleRead, h(c.handleListSites)},
		{"DELETE /site/{name}", api.RoleAdmin, h(c.handleRevokeSite)},
		// The audit trail (audit.go): admins only, as it names every
		// token, node and job.
		{"GET /audit", api.RoleAdmin, h(c.handleAudit)},
		// The dashboard: its files hold no data and load without a token
		// (the sign-in page is one of them); its data routes need read.
		{"GET /ui/", public, ui.Handler("/ui/")},
		{"GET /{$}", public, http.RedirectHandler("/ui/", http.StatusFound)},
		{"GET /fleet", api.RoleRead, h(c.views.handleFleet)},
		{"GET /jobs/page", api.RoleRead, h(c.views.handleJobPage)},
		{"GET /job/{id}/events", api.RoleRead, h(c.views.handleJobEvents)},
		{"GET /schedules/page", api.RoleRead, h(c.handleSchedulesPage)},
		{"GET /node/{id}/jobs", api.RoleRead, h(c.handleNodeJobs)},
		{"GET /jobs/stats", api.RoleRead, h(c.handleJobStats)},
		{"GET /whoami", api.RoleMetrics, h(c.handleWhoami)},
		// Any token may scrape; a metrics-role token may do nothing else.
		{"GET /metrics", api.RoleMetrics, c.metrics.handler()},
		{"GET /healthz", public, h(c.handleHealthz)},
		{"GET /readyz", public, h(c.handleReadyz)},
		// Jobs over time (retry.go, dlq.go).
		{"POST /job/{id}/retry", api.RoleOperator, h(c.handleRetry)},
		{"DELETE /job/{id}", api.RoleOperator, h(c.handleDeleteJob)},
		{"GET /dlq", api.RoleRead, h(c.handleDLQList)},
		{"POST /dlq/{id}/replay", api.RoleOperator, h(c.handleDLQReplay)},
		{"DELETE /dlq/{id}", api.RoleOperator, h(c.handleDLQDrop)},
		// Schedules (schedules_http.go).
		{"POST /schedules", api.RoleOperator, h(c.handleCreateSchedule)},
		{"GET /schedules", api.RoleRead, h(c.handleListSchedules)},
		{"GET /schedule/{id}", api.RoleRead, h(c.handleGetSchedule)},
		{"PUT /schedule/{id}", api.RoleOperator, h(c.handleUpdateSchedule)},
		{"POST /schedule/{id}/pause", api.RoleOperator, h(c.handlePause(true))},
		{"POST /schedule/{id}/resume", api.RoleOperator, h(c.handlePause(false))},
		{"DELETE /schedule/{id}", api.RoleOperator, h(c.handleDeleteSchedule)},
		// Anything else is 404, to callers with a token.
		{"/", api.RoleMetrics, h(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
		})},
	}
}

func (c *Controller) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range c.apiRoutes() {
		mux.Handle(rt.pattern, c.authorize(rt))
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.ErrorBody{Error: msg})
}

// jobErrorStatus is the HTTP status of a job that could not be made or
// retried, by the kind of its refusal (see joberrors.go): the one place
// where those kinds become status codes. An error of no kind is a 500: the
// core is to say why it refuses.
func jobErrorStatus(err error) int {
	switch {
	case errors.Is(err, errRefused):
		return http.StatusForbidden
	case errors.Is(err, errInvalid), errors.Is(err, errTooLarge):
		// A job too large to store names the limit, as any invalid field.
		return http.StatusBadRequest
	case errors.Is(err, errQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, errStorageFull):
		return http.StatusInsufficientStorage
	case errors.Is(err, errJobExists), errors.Is(err, errJobState):
		return http.StatusConflict
	case errors.Is(err, errJobNotFound):
		return http.StatusNotFound
	case errors.Is(err, errUnavailable):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// writeRefusal answers a request whose job could not be made or retried:
// the status of the refusal's kind, {"error": message}, and for a full
// queue when to try again.
func writeRefusal(w http.ResponseWriter, err error) {
	code := jobErrorStatus(err)
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, code, err.Error())
}

func (c *Controller) handleSubmit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", c.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	var opts submitOptions
	if v := r.URL.Query().Get("allow_empty"); v != "" {
		if opts.allowEmpty, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("allow_empty=%q: want true or false", v))
			return
		}
	}
	job, err := decodeSubmission(body)
	if err != nil {
		writeRefusal(w, refuse(errInvalid, err))
		return
	}
	p := principalFrom(r.Context())
	// A refused job is recorded by its target and actions only: its
	// params are not yet cleared of sensitive values.
	noteAudit(r, func(n *auditNote) { n.params = auditJobParams(job, false) })
	job, err = c.submit(r.Context(), job, p, opts)
	if err != nil {
		writeRefusal(w, err)
		return
	}
	noteAudit(r, func(n *auditNote) {
		n.resource, n.params, n.brief = job.ID, auditJobParams(job, true), auditJobParams(job, false)
	})
	writeJSON(w, http.StatusAccepted, jobView(p, job))
}

// maxNamedNodes bounds how many nodes an error names.
const maxNamedNodes = 10

// validateOnNodes checks every step of the job against the schemas of the
// nodes the target resolves to, not the union of all nodes: a node that
// does not offer an action (or whose allowlist refuses it) cannot run it,
// whatever other nodes offer. The error names the step and the nodes.
func validateOnNodes(job *api.Job, cats []nodeCatalog) error {
	for _, s := range api.Flatten(job.Tasks) {
		var bad []string
		var first error
		for _, nc := range cats {
			if err := nc.cat.ValidateTask(s.Path, s.Task, job.CheckMode); err != nil {
				bad = append(bad, nc.nodes...)
				if first == nil {
					first = err
				}
			}
		}
		if len(bad) == 0 {
			continue
		}
		slices.Sort(bad)
		names := strings.Join(bad[:min(len(bad), maxNamedNodes)], ", ")
		if len(bad) > maxNamedNodes {
			names += fmt.Sprintf(" and %d more", len(bad)-maxNamedNodes)
		}
		msg := first.Error()
		var ve *api.ValidationError
		if errors.As(first, &ve) {
			msg = ve.Msg
		}
		return &api.ValidationError{Field: s.Path, Msg: fmt.Sprintf("%d targeted node(s) cannot run %s: %s (%s)", len(bad), s.Task.Name(), names, msg)}
	}
	return nil
}

// catalogCache keeps the merged schemas of online nodes for submissions:
// merging them walks every node, a cost per POST that grows with the fleet.
type catalogCache struct {
	mu      sync.Mutex
	cat     *api.Catalog
	at      time.Time
	changed <-chan struct{} // the registry's change signal when computed
}

// catalogFresh bounds how old a cached catalog may be. Registrations and
// status changes drop it at once; this covers a node whose heartbeat ages
// past node_offline_after, which the registry does not announce.
const catalogFresh = 100 * time.Millisecond

// catalog returns the merged schemas of online nodes for validating a
// submission.
func (c *Controller) catalog() *api.Catalog {
	cc := &c.catCache
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.cat != nil && time.Since(cc.at) < catalogFresh {
		select {
		case <-cc.changed:
		default:
			return cc.cat
		}
	}
	// Take the signal first, so a change while merging drops the result.
	cc.changed = c.reg.changes()
	cc.at = time.Now()
	cc.cat = c.reg.catalog()
	return cc.cat
}

// currentJob returns the freshest view of a job: the run's own copy when
// this controller runs it, else the stored one.
func (c *Controller) currentJob(ctx context.Context, id string) (*api.Job, error) {
	if r := c.localRun(id); r != nil {
		return r.snapshot(), nil
	}
	j, _, err := c.jobs.get(ctx, id)
	return j, err
}

func (c *Controller) handleGetJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if ws := r.URL.Query().Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait %q is not a duration", ws))
			return
		}
		if data := c.waitTerminal(r.Context(), id, min(d, 60*time.Second)); data != nil {
			if p := principalFrom(r.Context()); p.Anonymous {
				var j api.Job
				if err := json.Unmarshal(data, &j); err != nil {
					writeError(w, http.StatusInternalServerError, fmt.Sprintf("job %s as stored: %v", id, err))
					return
				}
				writeJSON(w, http.StatusOK, seedView(&j))
				return
			}
			// The final state as stored, without decoding and encoding it
			// again.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data) //nolint:gosec // the job's JSON as stored, served as application/json
			return
		}
	}
	j, ok := c.jobOrError(w, r, id)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, jobView(principalFrom(r.Context()), j))
}

// waitTerminal blocks until the job is terminal or d passes, and returns
// the stored terminal job's JSON, or nil. A job this controller runs (or,
// with no live peer, a pending job, which can then only start here) is
// followed in memory: the answer is the JSON its run stored. So is a job
// this controller has just claimed, whose run is about to start. Otherwise it
// follows the job's key, so it answers the moment the job ends on any
// controller.
func (c *Controller) waitTerminal(ctx context.Context, id string, d time.Duration) []byte {
	if !api.ValidToken(id) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	started, stop := c.onStart(id)
	defer stop()
	for {
		if r := c.localRun(id); r != nil {
			select {
			case <-r.settled:
			case <-ctx.Done():
				return nil
			}
			if data := r.finalJSON(); data != nil {
				return data
			}
			break // stopped without ending the job: follow its key
		}
		data, head, err := c.jobs.getRaw(ctx, id)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, api.ErrNotFound) {
				return nil
			}
			break
		}
		if head.Status.Terminal() {
			return data
		}
		// Claimed here, its run about to start; or pending, and no peer
		// that could take it.
		mine := head.Status == api.JobRunning && head.Owner == c.id
		if !mine && (head.Status != api.JobPending || !c.alone()) {
			break
		}
		// Look again now and then, in case a peer has joined since the
		// last look and takes the job.
		select {
		case <-started:
			started = nil
		case <-time.After(pendingRecheck):
		case <-ctx.Done():
			return nil
		}
	}
	return c.watchTerminal(ctx, id)
}

// pendingRecheck is how often a long poll that waits for a pending job to
// start here reads the job again.
const pendingRecheck = time.Second

// watchTerminal follows the job's key until it is terminal or ctx ends.
func (c *Controller) watchTerminal(ctx context.Context, id string) []byte {
	w, err := c.jobs.kv.Watch(ctx, id)
	if err != nil {
		return nil
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if terminalJSON(e.Value()) {
				return e.Value()
			}
		}
	}
}

// terminalJSON reports whether a stored job's status is terminal, decoding
// only the status (a job with 10,000 results is megabytes).
func terminalJSON(data []byte) bool {
	return decodeJobHead(data).Status.Terminal()
}

// jobHeadFields are the fields of a stored job a long poll looks at.
type jobHeadFields struct {
	Status api.JobStatus `json:"status"`
	Owner  string        `json:"owner"`
}

// decodeJobHead decodes only the status and owner of a stored job (zero if
// it cannot).
func decodeJobHead(data []byte) jobHeadFields {
	var h jobHeadFields
	_ = json.Unmarshal(data, &h)
	return h
}

// jobOrError reads job id for a handler. When it cannot, it answers 404
// (no such job) or 503 (the store did not answer) and returns false.
func (c *Controller) jobOrError(w http.ResponseWriter, r *http.Request, id string) (*api.Job, bool) {
	j, err := c.currentJob(r.Context(), id)
	if errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %s not found", id))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return nil, false
	}
	return j, true
}

func (c *Controller) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j, ok := c.jobOrError(w, r, id)
	if !ok {
		return
	}
	p := principalFrom(r.Context())
	if j.Status.Terminal() {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %s is already %s", id, jobView(p, j).Status))
		return
	}
	// A pending (or waiting) job is cancelled in place; the scheduler
	// skips it.
	j, _, err := c.jobs.mutate(r.Context(), id, func(j *api.Job) bool {
		if j.Status != api.JobPending && j.Status != api.JobWaiting {
			return false
		}
		now := time.Now().UTC()
		j.Status, j.Error, j.FinishedAt, j.UpdatedAt = api.JobCancelled, "cancelled by request", &now, now
		j.CancelledBy = p.Name
		return true
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if j.Status == api.JobRunning {
		// A run this controller owns is cancelled before the agents hear
		// of it: a task the cancel stops reports a failure, which must not
		// reach a run that does not know of the cancel yet and end the job
		// failed instead of cancelled.
		if lr := c.localRun(id); lr != nil {
			cancelRun(lr, p.Name)
		}
		// The owner (this controller or another) and the agents hear this.
		// The owner stores who cancelled it (cancelled_by).
		msg := &nats.Msg{Subject: api.CancelSubject(id), Header: nats.Header{}}
		msg.Header.Set(api.CancelledByHeader, p.Name)
		if err := c.nc.PublishMsg(msg); err != nil {
			writeError(w, http.StatusServiceUnavailable, "publish cancel: "+err.Error())
			return
		}
		// Give a local run a moment to settle so the answer shows the outcome.
		if lr := c.localRun(id); lr != nil {
			select {
			case <-lr.done:
			case <-time.After(2 * time.Second):
			}
		}
		if cur, err := c.currentJob(r.Context(), id); err == nil {
			j = cur
		}
	}
	c.log.Info("job cancel requested", "job", id, "status", j.Status, "by", p.Name)
	if p.Anonymous {
		// Seed 000's client takes any answer but 200 for a failed cancel.
		writeJSON(w, http.StatusOK, seedView(j))
		return
	}
	writeJSON(w, http.StatusAccepted, j)
}

// Paging of GET /jobs.
const (
	defaultJobsLimit = 100
	maxJobsLimit     = 1000
)

// handleListJobs answers one page of jobs, newest first: ?limit= (default
// 100, at most 1000), ?cursor= (api.JobCursor of the last job of the
// previous page), ?status=, ?submitted_by= and ?schedule_id= filters. It picks the page
// from the in-memory index and reads only those jobs.
func (c *Controller) handleListJobs(w http.ResponseWriter, r *http.Request) {
	q, err := parseJobQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := principalFrom(r.Context())
	// An anonymous caller filters by the statuses it is shown.
	q.seed = p.Anonymous
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := c.jobIdx.waitReady(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	ids := c.jobIdx.page(q)
	out := make([]*api.Job, 0, len(ids))
	for _, id := range ids {
		j, err := c.currentJob(ctx, id)
		if errors.Is(err, api.ErrNotFound) {
			continue // removed since
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		// The index may be a moment behind a local run.
		if !q.matches(j.Status) {
			continue
		}
		out = append(out, jobView(p, j))
	}
	writeJSON(w, http.StatusOK, out)
}

// parseJobQuery reads GET /jobs's query parameters.
func parseJobQuery(v url.Values) (jobQuery, error) {
	q := jobQuery{limit: defaultJobsLimit, status: api.JobStatus(v.Get("status")), submittedBy: v.Get("submitted_by"),
		scheduleID: v.Get("schedule_id")}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxJobsLimit {
			return q, fmt.Errorf("limit %q: want a number from 1 to %d", s, maxJobsLimit)
		}
		q.limit = n
	}
	if s := v.Get("cursor"); s != "" {
		cur, err := parseCursor(s)
		if err != nil {
			return q, err
		}
		q.after = cur
	}
	switch q.status {
	case "", api.JobPending, api.JobRunning, api.JobCompleted, api.JobFailed, api.JobCancelled, api.JobPartialFailure:
	default:
		return q, fmt.Errorf("status %q: want pending, running, completed, failed, cancelled or partial_failure", q.status)
	}
	return q, nil
}

// handleListNodes serves GET /nodes: every node, or with ?site=NAME the
// nodes of one site (default: the hub's own agents). A site no node is in
// lists none, as a group no node is in would.
func (c *Controller) handleListNodes(w http.ResponseWriter, r *http.Request) {
	nodes := c.reg.list(false)
	if site := r.URL.Query().Get("site"); site != "" {
		if !api.ValidToken(site) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("site %q is not valid: letters, digits, '_' and '-'", site))
			return
		}
		nodes = slices.DeleteFunc(nodes, func(n api.NodeInfo) bool { return api.SiteOf(n.Site) != site })
	}
	writeJSON(w, http.StatusOK, nodes)
}

func (c *Controller) handleGetNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	n, ok := c.reg.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("node %s not found", id))
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// handleRemoveNode serves DELETE /node/{id}: it forgets the record of a
// node that is offline (a host scaled down or rebuilt under another name),
// so targets, the catalog and the fleet's counts stop listing it. An online
// node is a 409: its next heartbeat would bring it back at once.
func (c *Controller) handleRemoveNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	n, ok := c.reg.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("node %s not found", id))
		return
	}
	if n.Status == api.NodeOnline {
		writeError(w, http.StatusConflict, fmt.Sprintf("node %s is online (last seen %s); stop its agent first, or revoke it (grid node revoke %s) to disconnect it and refuse its key", id, n.LastSeen.Format(time.RFC3339), id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := c.nodesKV.Delete(ctx, id); err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("remove node %s: %v", id, err))
		return
	}
	// Gone from this controller's answers at once; the others follow the
	// bucket's delete marker.
	c.reg.forget(id)
	c.log.Info("node removed", "node", id, "by", principalFrom(r.Context()).Name)
	w.WriteHeader(http.StatusNoContent)
}

func (c *Controller) handleStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := c.jobIdx.waitReady(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// Counted as the jobs bucket changes, not by reading it.
	qs := c.jobIdx.stats()
	ctls, _ := c.controllers(r.Context())
	hctx, cancel := context.WithTimeout(r.Context(), streamHealthTimeout)
	defer cancel()
	writeJSON(w, http.StatusOK, api.Status{
		Nodes: c.reg.counts(), Controllers: len(ctls), Jobs: qs, Time: time.Now().UTC(),
		Limits:   map[string]int{"max_concurrent": c.cfg.MaxConcurrent, "max_pending": c.cfg.MaxPending},
		Replicas: c.replicas, Streams: c.streamHealth(hctx),
	})
}

// readControllers returns every controller's registry entry as stored.
func (c *Controller) readControllers(ctx context.Context) ([]api.ControllerInfo, error) {
	kv, err := c.js.KeyValue(ctx, api.BucketControllers)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []api.ControllerInfo
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var ci api.ControllerInfo
		if json.Unmarshal(e.Value(), &ci) == nil {
			out = append(out, ci)
		}
	}
	return out, nil
}

// controllers returns the controllers as the API shows them: an online one
// whose heartbeat is late is "stale".
func (c *Controller) controllers(ctx context.Context) ([]api.ControllerInfo, error) {
	out, err := c.readControllers(ctx)
	if err != nil {
		return nil, err
	}
	stale := 3 * c.cfg.HeartbeatInterval.D()
	for i := range out {
		if out[i].Status == "online" && time.Since(out[i].LastSeen) > stale {
			out[i].Status = "stale"
		}
	}
	return out, nil
}

func (c *Controller) handleControllers(w http.ResponseWriter, r *http.Request) {
	out, err := c.controllers(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Controller) handleBackends(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.reg.catalog())
}

func (c *Controller) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz reports ready only when NATS is connected, JetStream answers
// and every stream and bucket is present.
func (c *Controller) handleReadyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{}
	ok := true
	fail := func(k, v string) { checks[k] = v; ok = false }
	c.mu.Lock()
	ready := c.ready
	c.mu.Unlock()
	if !ready {
		fail("controller", "starting or stopping")
	}
	if !c.nc.IsConnected() {
		// JetStream calls would only wait out their timeout.
		fail("nats", "not connected")
	} else {
		checks["nats"] = "connected"
		c.readyzJetStream(r.Context(), fail, checks)
	}
	status := "ready"
	code := http.StatusOK
	if !ok {
		status, code = "not ready", http.StatusServiceUnavailable
	}
	checks["status"] = status
	writeJSON(w, code, checks)
}

// readyzJetStream checks that JetStream answers and every stream and bucket
// is present and has a leader, and shows each one's replicas. Replicas that
// are behind or offline are shown ("degraded") without failing: the stream
// still serves, and a controller taken out of rotation for them would only
// move its load to the others.
func (c *Controller) readyzJetStream(ctx context.Context, fail func(k, v string), checks map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, streamHealthTimeout)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); err != nil {
		fail("jetstream", err.Error())
	} else {
		checks["jetstream"] = "ok"
	}
	for _, h := range c.streamHealth(ctx) {
		key := "stream " + h.Name
		if h.Bucket {
			key = "bucket " + h.Name
		}
		switch {
		case h.Error != "":
			fail(key, h.Error)
		case !h.HasLeader:
			fail(key, "no leader: "+healthLine(h))
		default:
			checks[key] = healthLine(h)
		}
	}
}
