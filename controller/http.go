package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func (c *Controller) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /job", c.handleSubmit)
	mux.HandleFunc("GET /job/{id}", c.handleGetJob)
	mux.HandleFunc("POST /job/{id}/cancel", c.handleCancel)
	mux.HandleFunc("GET /jobs", c.handleListJobs)
	c.jobsOverTimeRoutes(mux)
	mux.HandleFunc("GET /nodes", c.handleListNodes)
	mux.HandleFunc("GET /node/{id}", c.handleGetNode)
	mux.HandleFunc("GET /status", c.handleStatus)
	mux.HandleFunc("GET /controllers", c.handleControllers)
	mux.HandleFunc("GET /backends", c.handleBackends)
	mux.HandleFunc("GET /healthz", c.handleHealthz)
	mux.HandleFunc("GET /readyz", c.handleReadyz)
	mux.Handle("GET /metrics", c.metrics.handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
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
	spec, err := api.ParseJobSpec(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	job := spec.Job()
	if err := c.catalog().ValidateJob(job); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	pending, err := c.pendingCount(r.Context(), c.cfg.MaxPending)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if pending >= c.cfg.MaxPending {
		c.metrics.admissionRejected.Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("job queue is full (%d pending, max_pending %d); retry later", pending, c.cfg.MaxPending))
		return
	}
	if err := c.enqueue(r.Context(), job); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, job)
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
			// The final state as stored, without decoding and encoding it
			// again.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data) //nolint:gosec // the job's JSON as stored, served as application/json
			return
		}
	}
	j, err := c.currentJob(r.Context(), id)
	if errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %s not found", id))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, j)
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

func (c *Controller) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j, err := c.currentJob(r.Context(), id)
	if errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %s not found", id))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if j.Status.Terminal() {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %s is already %s", id, j.Status))
		return
	}
	// A pending (or waiting) job is cancelled in place; the scheduler
	// skips it.
	j, _, err = c.jobs.mutate(r.Context(), id, func(j *api.Job) bool {
		if j.Status != api.JobPending && j.Status != api.JobWaiting {
			return false
		}
		now := time.Now().UTC()
		j.Status, j.Error, j.FinishedAt, j.UpdatedAt = api.JobCancelled, "cancelled by request", &now, now
		return true
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if j.Status == api.JobRunning {
		// The owner (this controller or another) and the agents hear this.
		if err := c.nc.Publish(api.CancelSubject(id), nil); err != nil {
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
	c.log.Info("job cancel requested", "job", id, "status", j.Status)
	writeJSON(w, http.StatusAccepted, j)
}

func (c *Controller) handleListJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := c.jobs.list(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	status := r.URL.Query().Get("status")
	out := make([]api.Job, 0, len(jobs))
	for _, j := range jobs {
		if lr := c.localRun(j.ID); lr != nil {
			j = *lr.snapshot()
		}
		if status != "" && string(j.Status) != status {
			continue
		}
		out = append(out, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Controller) handleListNodes(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.reg.list(false))
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

func (c *Controller) handleStatus(w http.ResponseWriter, r *http.Request) {
	jobs, err := c.jobs.list(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	qs := api.QueueStats{Total: len(jobs), StatusCounts: map[string]int{}, OperationCounts: map[string]int{}}
	for _, j := range jobs {
		qs.StatusCounts[string(j.Status)]++
		for _, s := range api.Flatten(j.Tasks) {
			qs.OperationCounts[s.Task.Name()]++
		}
	}
	ctls, _ := c.controllers(r.Context())
	writeJSON(w, http.StatusOK, api.Status{
		Nodes: c.reg.counts(), Controllers: len(ctls), Jobs: qs, Time: time.Now().UTC(),
		Limits: map[string]int{"max_concurrent": c.cfg.MaxConcurrent, "max_pending": c.cfg.MaxPending},
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
// is present.
func (c *Controller) readyzJetStream(ctx context.Context, fail func(k, v string), checks map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); err != nil {
		fail("jetstream", err.Error())
	} else {
		checks["jetstream"] = "ok"
	}
	for _, s := range []string{api.StreamRequests, api.StreamCommands, api.StreamResults} {
		if _, err := c.js.Stream(ctx, s); err != nil {
			fail("stream "+s, err.Error())
		}
	}
	for _, b := range []string{api.BucketJobs, api.BucketNodes, api.BucketControllers, api.BucketSchemas} {
		if _, err := c.js.KeyValue(ctx, b); err != nil {
			fail("bucket "+b, err.Error())
		}
	}
}
