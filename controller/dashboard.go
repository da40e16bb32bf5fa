package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Page sizes of the dashboard's list routes.
const (
	defaultFleetLimit = 100
	maxFleetLimit     = 1000
	defaultJobLimit   = 50
	maxJobLimit       = 500
)

// dashboardViews serves the dashboard's data routes: a page of the fleet,
// a page of job summaries, and a job's live event stream. It reads what
// the controller holds (the registry, the jobs bucket, the runs in memory)
// and keeps no state between requests; each event stream keeps its own.
type dashboardViews struct {
	reg *registry
	// jobsKV is read whole (without results) for the job list.
	jobsKV jetstream.KeyValue
	// live is the state of the jobs this controller runs, which is ahead
	// of the store.
	live liveJobs
	// stopping is closed when the controller shuts down; event streams end.
	stopping <-chan struct{}
}

// liveJobs is what the views read of the jobs a controller runs.
type liveJobs interface {
	// currentJob is the freshest view of a job: the run's own copy when
	// this controller runs it, else the stored one.
	currentJob(ctx context.Context, id string) (*api.Job, error)
	// localRun is the run of a job this controller executes, or nil.
	localRun(id string) *run
}

// pageParams reads limit and offset, naming the parameter that is wrong.
func pageParams(r *http.Request, def, maxLimit int) (limit, offset int, err error) {
	q := r.URL.Query()
	limit, offset = def, 0
	if s := q.Get("limit"); s != "" {
		limit, err = strconv.Atoi(s)
		if err != nil || limit < 1 || limit > maxLimit {
			return 0, 0, fmt.Errorf("limit %q must be a whole number from 1 to %d", s, maxLimit)
		}
	}
	if s := q.Get("offset"); s != "" {
		offset, err = strconv.Atoi(s)
		if err != nil || offset < 0 {
			return 0, 0, fmt.Errorf("offset %q must be a whole number, 0 or more", s)
		}
	}
	return limit, offset, nil
}

// handleFleet serves one page of the nodes a filter selects, with the whole
// fleet's counts. Filters: q (a substring of the id, hostname, a group, a
// backend, the version or the site), group (the group or any sub-group),
// site, status (online or offline), backend.
func (v *dashboardViews) handleFleet(w http.ResponseWriter, r *http.Request) {
	limit, offset, err := pageParams(r, defaultFleetLimit, maxFleetLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	status := q.Get("status")
	if status != "" && status != api.NodeOnline && status != api.NodeOffline {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("status %q must be %s or %s", status, api.NodeOnline, api.NodeOffline))
		return
	}
	site := q.Get("site")
	if site != "" && !api.ValidToken(site) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("site %q is not valid: letters, digits, '_' and '-'", site))
		return
	}
	writeJSON(w, http.StatusOK, v.reg.fleetPage(fleetFilter{
		q: strings.ToLower(strings.TrimSpace(q.Get("q"))), group: q.Get("group"), site: site, status: status, backend: q.Get("backend"),
	}, limit, offset))
}

type fleetFilter struct{ q, group, site, status, backend string }

// match reports whether the filter selects a node whose status (as the
// API shows it) is status.
func (f fleetFilter) match(n *api.NodeInfo, status string) bool {
	if f.status != "" && status != f.status {
		return false
	}
	if f.group != "" && !(api.Target{Scope: api.ScopeGroup, Value: f.group}).Matches(n.ID, n.Site, n.Groups) {
		return false
	}
	if f.site != "" && api.SiteOf(n.Site) != f.site {
		return false
	}
	if f.backend != "" && !slices.Contains(n.Backends, f.backend) {
		return false
	}
	if f.q == "" {
		return true
	}
	has := func(s string) bool { return strings.Contains(strings.ToLower(s), f.q) }
	if has(n.ID) || has(n.Hostname) || has(n.Version) || has(api.SiteOf(n.Site)) {
		return true
	}
	return slices.ContainsFunc(n.Groups, has) || slices.ContainsFunc(n.Backends, has)
}

// fleetPage pages and tallies the registry in one pass under its read
// lock, copying only the page's nodes: a request over 10,000 nodes
// allocates a page, not a fleet.
func (r *registry) fleetPage(f fleetFilter, limit, offset int) api.FleetPage {
	now := time.Now()
	p := api.FleetPage{Offset: offset, Limit: limit, Nodes: []api.NodeInfo{}, Time: now.UTC()}
	groups := map[string]*api.GroupCount{}
	backends, versions, sites := map[string]int{}, map[string]int{}, map[string]int{}
	seen := map[string]bool{}
	r.mu.RLock()
	defer r.mu.RUnlock()
	p.Total = len(r.nodes)
	matched := make([]*api.NodeInfo, 0, len(r.nodes))
	for _, n := range r.nodes {
		online := r.isOnline(n, now)
		status := api.NodeOffline
		if online {
			p.Online++
			status = api.NodeOnline
		} else {
			p.Offline++
		}
		// A node counts once toward a group and each of its parents, even
		// when two of its groups share a parent.
		clear(seen)
		for _, g := range n.Groups {
			for name := g; name != ""; {
				if !seen[name] {
					seen[name] = true
					gc := groups[name]
					if gc == nil {
						gc = &api.GroupCount{Group: name}
						groups[name] = gc
					}
					gc.Total++
					if online {
						gc.Online++
					} else {
						gc.Offline++
					}
				}
				cut := strings.LastIndexByte(name, '.')
				if cut < 0 {
					break
				}
				name = name[:cut]
			}
		}
		for _, b := range n.Backends {
			backends[b]++
		}
		versions[n.Version]++
		sites[api.SiteOf(n.Site)]++
		if f.match(n, status) {
			matched = append(matched, n)
		}
	}
	p.Matched = len(matched)
	if offset < len(matched) {
		sort.Slice(matched, func(i, j int) bool { return matched[i].ID < matched[j].ID })
		for _, n := range matched[offset:min(offset+limit, len(matched))] {
			p.Nodes = append(p.Nodes, r.view(n, now, false))
		}
	}
	p.Groups = make([]api.GroupCount, 0, len(groups))
	for _, g := range groups {
		p.Groups = append(p.Groups, *g)
	}
	sort.Slice(p.Groups, func(i, j int) bool { return p.Groups[i].Group < p.Groups[j].Group })
	p.Backends, p.Versions, p.Sites = nameCounts(backends), nameCounts(versions), nameCounts(sites)
	return p
}

func nameCounts(m map[string]int) []api.NameCount {
	out := make([]api.NameCount, 0, len(m))
	for k, v := range m {
		out = append(out, api.NameCount{Name: k, Nodes: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// storedJobHead is what a job list reads of a stored job: its results,
// the bulk of a big job, are skipped. SubmittedBy is read from the stored
// JSON so a controller that records it shows it.
type storedJobHead struct {
	ID          string        `json:"id"`
	Status      api.JobStatus `json:"status"`
	Target      api.Target    `json:"target"`
	SubmittedBy string        `json:"submitted_by"`
	Tasks       []api.Phase   `json:"tasks"`
	Step        int           `json:"step"`
	Expected    []string      `json:"expected"`
	Error       string        `json:"error"`
	Owner       string        `json:"owner"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	StartedAt   *time.Time    `json:"started_at"`
	FinishedAt  *time.Time    `json:"finished_at"`
}

func (s *storedJobHead) head() api.JobHead {
	h := api.JobHead{ID: s.ID, Status: s.Status, Target: s.Target, SubmittedBy: s.SubmittedBy, Tasks: []string{},
		Step: s.Step, Nodes: len(s.Expected), Error: s.Error, Owner: s.Owner,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt}
	for _, st := range api.Flatten(s.Tasks) {
		h.Tasks = append(h.Tasks, st.Task.Name())
	}
	return h
}

// jobHeads reads every stored job's summary, newest first; a job this
// controller runs shows its state in memory, which is ahead of the store.
func (v *dashboardViews) jobHeads(ctx context.Context) ([]api.JobHead, error) {
	wa, err := v.jobsKV.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer func() { _ = wa.Stop() }()
	var out []api.JobHead
	for e := range wa.Updates() {
		if e == nil {
			break
		}
		var s storedJobHead
		if json.Unmarshal(e.Value(), &s) != nil {
			continue
		}
		h := s.head()
		if lr := v.live.localRun(h.ID); lr != nil {
			lr.mu.Lock()
			h.Status, h.Step, h.Error, h.Nodes = lr.job.Status, lr.job.Step, lr.job.Error, len(lr.job.Expected)
			h.UpdatedAt, h.StartedAt, h.FinishedAt = lr.job.UpdatedAt, lr.job.StartedAt, lr.job.FinishedAt
			lr.mu.Unlock()
		}
		out = append(out, h)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].CreatedAt.After(out[b].CreatedAt) })
	return out, nil
}

// handleJobPage serves one page of job summaries, newest first. Filters:
// status, submitter, q (a substring of the id, target, submitter or a
// task name).
func (v *dashboardViews) handleJobPage(w http.ResponseWriter, r *http.Request) {
	limit, offset, err := pageParams(r, defaultJobLimit, maxJobLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	heads, err := v.jobHeads(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	query := r.URL.Query()
	status, submitter := query.Get("status"), query.Get("submitter")
	q := strings.ToLower(strings.TrimSpace(query.Get("q")))
	has := func(s string) bool { return strings.Contains(strings.ToLower(s), q) }
	p := api.JobPage{Total: len(heads), Counts: map[string]int{}, Offset: offset, Limit: limit, Jobs: []api.JobHead{}}
	for _, h := range heads {
		p.Counts[string(h.Status)]++
		if status != "" && string(h.Status) != status {
			continue
		}
		if submitter != "" && h.SubmittedBy != submitter {
			continue
		}
		if q != "" && !has(h.ID) && !has(h.Target.String()) && !has(h.SubmittedBy) && !slices.ContainsFunc(h.Tasks, has) {
			continue
		}
		if p.Matched >= offset && len(p.Jobs) < limit {
			p.Jobs = append(p.Jobs, h)
		}
		p.Matched++
	}
	writeJSON(w, http.StatusOK, p)
}

// Pacing of a job's event stream.
const (
	// eventsInterval is how often the stream looks at the job; changes in
	// between go out together, so a step on 1,000 nodes is a few messages a
	// second, not a thousand.
	eventsInterval = 250 * time.Millisecond
	// eventsKeepAlive keeps proxies from closing an idle stream.
	eventsKeepAlive = 15 * time.Second
)

// jobPatch is an "update" event of GET /job/{id}/events: the job's head
// when it changed, and the node results that changed since the last event,
// by flat step index and node id.
type jobPatch struct {
	Job     *api.Job                           `json:"job,omitempty"`
	Results map[int]map[string]*api.NodeResult `json:"results,omitempty"`
}

// resultMark is what tells one version of a node result from the next.
type resultMark struct {
	status   string
	attempts int
	events   int
	output   int
	errLen   int
	changed  bool
	progress int
	duration api.Duration
}

func markOf(nr *api.NodeResult) resultMark {
	m := resultMark{status: nr.Status, attempts: nr.Attempts, events: len(nr.Events), output: len(nr.Output),
		errLen: len(nr.Error), changed: nr.Changed, progress: -1, duration: nr.Duration}
	if nr.Progress != nil {
		m.progress = *nr.Progress
	}
	return m
}

// headOf is the job without its results.
func headOf(j *api.Job) *api.Job {
	h := *j
	h.Results = nil
	return &h
}

// handleJobEvents streams a job as server-sent events: "job" with the whole
// job first, then "update" (a jobPatch) whenever it changes, and "end" once
// it is terminal, after which the stream closes. A client that loses the
// stream opens it again and starts from a fresh "job".
func (v *dashboardViews) handleJobEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j, err := v.live.currentJob(r.Context(), id)
	if err != nil {
		writeJobError(w, id, err)
		return
	}
	rc := http.NewResponseController(w)
	// The stream lives as long as the job runs; no write deadline applies.
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	es := &eventStream{w: w, rc: rc, idle: time.Now(), marks: map[int]map[string]resultMark{}}
	es.changedResults(j)
	if !es.send("job", j) {
		return
	}
	es.lastHead, _ = json.Marshal(headOf(j))
	tick := time.NewTicker(eventsInterval)
	defer tick.Stop()
	for !j.Status.Terminal() {
		select {
		case <-r.Context().Done():
			return
		case <-v.stopping:
			return
		case <-tick.C:
		}
		if lr := v.live.localRun(id); lr != nil {
			lr.mu.Lock()
			same := lr.job.UpdatedAt.Equal(j.UpdatedAt) && lr.job.Status == j.Status
			lr.mu.Unlock()
			if same {
				if !es.keepAlive() {
					return
				}
				continue
			}
		}
		cur, err := v.live.currentJob(r.Context(), id)
		if err != nil {
			// Gone (deleted) or the store is failing over: the client
			// opens the stream again.
			return
		}
		j = cur
		p := es.patch(j)
		if p.Job == nil && p.Results == nil {
			if !es.keepAlive() {
				return
			}
			continue
		}
		if !es.send("update", p) {
			return
		}
	}
	es.send("end", map[string]string{"status": string(j.Status)})
}

// eventStream is one client's job event stream: what it was last sent, so
// each update carries only what changed since.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// marks are the node results last sent, by flat step and node.
	marks map[int]map[string]resultMark
	// lastHead is the job's head last sent, encoded.
	lastHead []byte
	// idle is when the stream last wrote.
	idle time.Time
}

// send writes one event and flushes it; false when the client is gone.
func (es *eventStream) send(event string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if _, err := fmt.Fprintf(es.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return false
	}
	es.idle = time.Now()
	return es.rc.Flush() == nil
}

// keepAlive writes a comment when the stream has been quiet for
// eventsKeepAlive; false when the client is gone.
func (es *eventStream) keepAlive() bool {
	if time.Since(es.idle) <= eventsKeepAlive {
		return true
	}
	if _, err := fmt.Fprint(es.w, ": keep-alive\n\n"); err != nil || es.rc.Flush() != nil {
		return false
	}
	es.idle = time.Now()
	return true
}

// patch is what changed in j since the last event: its head when it
// differs, and the node results that differ.
func (es *eventStream) patch(j *api.Job) jobPatch {
	p := jobPatch{Results: es.changedResults(j)}
	head := headOf(j)
	if data, _ := json.Marshal(head); string(data) != string(es.lastHead) {
		p.Job, es.lastHead = head, data
	}
	return p
}

// changedResults returns the node results of j that differ from those
// last seen, and remembers them.
func (es *eventStream) changedResults(j *api.Job) map[int]map[string]*api.NodeResult {
	var changed map[int]map[string]*api.NodeResult
	for step, nodes := range j.Results {
		for node, nr := range nodes {
			if nr == nil {
				continue
			}
			m := markOf(nr)
			if es.marks[step] == nil {
				es.marks[step] = map[string]resultMark{}
			}
			if old, ok := es.marks[step][node]; ok && old == m {
				continue
			}
			es.marks[step][node] = m
			if changed == nil {
				changed = map[int]map[string]*api.NodeResult{}
			}
			if changed[step] == nil {
				changed[step] = map[string]*api.NodeResult{}
			}
			changed[step][node] = nr
		}
	}
	return changed
}

// writeJobError answers a failed job lookup.
func writeJobError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %s not found", id))
		return
	}
	writeError(w, http.StatusServiceUnavailable, err.Error())
}
