package controller

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// touched is what the job index keeps of the nodes a job ran on: their
// ids, sorted (searched by halving), and once the job has ended each one's
// outcome. It is read from the stored job at most a few times per job (see
// jobIndex.put), never per request, so a node's recent jobs are found in
// memory without reading any job's results.
type touched struct {
	nodes []string
	// outcomes is parallel to nodes once the job is terminal (nil before).
	outcomes []nodeOutcome
	target   string
	final    bool
}

// nodeOutcome is one node's outcome in a finished job: the worst status
// of its steps, and whether any changed something.
type nodeOutcome struct {
	status  uint8
	changed bool
}

// outcomeNames are the outcomes, from best to worst; a node's is the worst
// of its steps' (a step skipped by its condition is no worse than one
// that succeeded, so it counts only when every step was skipped).
var outcomeNames = []string{"skipped", "success", "not_run", "pending", "running", "cancelled", "unreachable", "failed"}

func outcomeCode(status string) uint8 {
	switch status {
	case "dispatched", "waiting":
		status = "running"
	}
	if i := slices.Index(outcomeNames, status); i >= 0 {
		return uint8(i)
	}
	return uint8(slices.Index(outcomeNames, "failed"))
}

// needsNodes reports whether a put of a job in status st should read its
// nodes: none known yet, or the job has just ended.
func (e *indexEntry) needsNodes(st api.JobStatus) bool {
	return !e.final && (len(e.nodes) == 0 || st.Terminal())
}

// touchedFields are the fields of a stored job its nodes come from.
type touchedFields struct {
	Target      api.Target `json:"target"`
	Expected    []string   `json:"expected"`
	Unreachable []string   `json:"unreachable"`
}

// touchedResults are a finished job's results, reduced to what an outcome
// needs.
type touchedResults struct {
	Results map[string]map[string]struct {
		Status  string `json:"status"`
		Changed bool   `json:"changed"`
	} `json:"results"`
}

// readTouched reads a stored job's nodes, and their outcomes when it is
// terminal; nil when the job names none yet.
func readTouched(data []byte, st api.JobStatus) *touched {
	var f touchedFields
	if json.Unmarshal(data, &f) != nil {
		return nil
	}
	t := &touched{target: f.Target.String()}
	t.nodes = append(append(t.nodes, f.Expected...), f.Unreachable...)
	if len(t.nodes) == 0 && !st.Terminal() {
		return nil
	}
	slices.Sort(t.nodes)
	t.nodes = slices.Compact(t.nodes)
	if !st.Terminal() {
		return t
	}
	t.final = true
	var r touchedResults
	_ = json.Unmarshal(data, &r)
	t.outcomes = make([]nodeOutcome, len(t.nodes))
	seen := make([]bool, len(t.nodes))
	for _, byNode := range r.Results {
		for node, res := range byNode {
			i, ok := slices.BinarySearch(t.nodes, node)
			if !ok {
				continue
			}
			o := &t.outcomes[i]
			if c := outcomeCode(res.Status); !seen[i] || c > o.status {
				o.status = c
			}
			seen[i] = true
			o.changed = o.changed || res.Changed
		}
	}
	notRun := outcomeCode("not_run")
	for i := range t.outcomes {
		if !seen[i] {
			t.outcomes[i].status = notRun
		}
	}
	for _, u := range f.Unreachable {
		if i, ok := slices.BinarySearch(t.nodes, u); ok {
			t.outcomes[i].status = outcomeCode("unreachable")
		}
	}
	return t
}

// setTouched stores a job's nodes in its entry, interning their ids;
// x.mu is held.
func (x *jobIndex) setTouched(e *indexEntry, t *touched) {
	for i, n := range t.nodes {
		if have, ok := x.names[n]; ok {
			t.nodes[i] = have
		} else {
			x.names[n] = n
		}
	}
	e.touched = *t
}

// nodeJob is one of a node's recent jobs: the job's summary and the node's
// outcome in it (empty while the job runs).
type nodeJob struct {
	ID         string        `json:"id"`
	Status     api.JobStatus `json:"status"`
	Target     string        `json:"target"`
	Tasks      []string      `json:"tasks"`
	CreatedAt  string        `json:"created_at"`
	FinishedAt string        `json:"finished_at,omitempty"`
	Outcome    string        `json:"outcome,omitempty"`
	Changed    bool          `json:"changed,omitempty"`
}

// nodeJobs returns the newest jobs that touched a node, at most limit,
// and how many there are in all.
func (x *jobIndex) nodeJobs(node string, limit int) ([]nodeJob, int) {
	type hit struct {
		e *indexEntry
		i int
	}
	x.mu.RLock()
	var hits []hit
	for _, e := range x.entries {
		if i, ok := slices.BinarySearch(e.nodes, node); ok {
			hits = append(hits, hit{e, i})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := b.e.created.Compare(a.e.created); c != 0 {
			return c
		}
		return strings.Compare(b.e.id, a.e.id)
	})
	out := make([]nodeJob, 0, min(limit, len(hits)))
	for _, h := range hits[:min(limit, len(hits))] {
		j := nodeJob{ID: h.e.id, Status: h.e.status, Target: h.e.target, Tasks: slices.Clone(h.e.ops),
			CreatedAt: h.e.created.UTC().Format(timeJSON)}
		if !h.e.finished.IsZero() {
			j.FinishedAt = h.e.finished.UTC().Format(timeJSON)
		}
		if h.e.outcomes != nil {
			o := h.e.outcomes[h.i]
			j.Outcome, j.Changed = outcomeNames[o.status], o.changed
		}
		if j.Tasks == nil {
			j.Tasks = []string{}
		}
		out = append(out, j)
	}
	x.mu.RUnlock()
	return out, len(hits)
}

// timeJSON is how encoding/json writes a time.
const timeJSON = "2006-01-02T15:04:05.999999999Z07:00"
