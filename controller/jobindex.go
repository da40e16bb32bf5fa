package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// jobIndex is a compact in-memory view of the jobs bucket, fed by a watch
// of it: what GET /jobs filters and pages on, what GET /status counts, and
// what the retention sweep looks at. A job's full JSON (megabytes for a
// big one) is read only for the jobs a page returns.
type jobIndex struct {
	mu      sync.RWMutex
	entries map[string]*indexEntry
	// Counters kept as entries come and go, so /status scans nothing.
	status map[api.JobStatus]int
	ops    map[string]int
	// ready is closed once the watch has delivered the bucket's contents.
	ready chan struct{}
	// names interns node ids, so the jobs that touched a node share its
	// id's bytes.
	names map[string]string
}

type indexEntry struct {
	id          string
	status      api.JobStatus
	created     time.Time
	finished    time.Time
	submittedBy string
	scheduleID  string
	owner       string
	ops         []string
	// rev is the revision of the job the entry was last taken from.
	rev uint64
	// The nodes the job touched and its outcome on each, for a node's
	// recent jobs (jobindex_nodes.go).
	touched
}

// indexFields are the fields of a stored job the index keeps.
type indexFields struct {
	ID          string        `json:"id"`
	Status      api.JobStatus `json:"status"`
	SubmittedBy string        `json:"submitted_by"`
	ScheduleID  string        `json:"schedule_id"`
	Owner       string        `json:"owner"`
	CreatedAt   time.Time     `json:"created_at"`
	FinishedAt  *time.Time    `json:"finished_at"`
}

// indexTasks are the fields a job's operation counts come from, read once
// per job (its tasks never change).
type indexTasks struct {
	Tasks []api.Phase `json:"tasks"`
}

func newJobIndex() *jobIndex {
	return &jobIndex{entries: map[string]*indexEntry{}, status: map[api.JobStatus]int{}, ops: map[string]int{},
		ready: make(chan struct{}), names: map[string]string{}}
}

// watch follows the jobs bucket until ctx ends, from goroutines counted in
// wg.
func (x *jobIndex) watch(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue, log *slog.Logger) error {
	ready, err := follow(ctx, wg, kv, log, "jobs", func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			x.remove(e.Key())
			return
		}
		x.put(e.Key(), e.Value(), e.Created(), e.Revision())
	})
	if err != nil {
		return err
	}
	wg.Go(func() {
		select {
		case <-ready:
			close(x.ready)
		case <-ctx.Done():
		}
	})
	return nil
}

// statusOf returns a job's status as the index last saw it.
func (x *jobIndex) statusOf(id string) (api.JobStatus, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.entries[id]
	if e == nil {
		return "", false
	}
	return e.status, true
}

// waitReady waits for the index to hold the bucket's contents.
func (x *jobIndex) waitReady(ctx context.Context) error {
	select {
	case <-x.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("jobs index not ready: %w", ctx.Err())
	}
}

// put records revision rev of a job. Besides the watch, this controller
// puts what it has just written itself (a job it stored, a run's final
// state), so a list or count right after includes it however far the
// watch lags; an entry never goes back to an older revision.
func (x *jobIndex) put(key string, data []byte, written time.Time, rev uint64) {
	var f indexFields
	if json.Unmarshal(data, &f) != nil {
		return
	}
	x.mu.Lock()
	e := x.entries[key]
	// The nodes are read while the job has none yet (it has not started)
	// and once more when it ends, with each node's outcome.
	readNodes := e == nil || e.needsNodes(f.Status)
	x.mu.Unlock()
	var ops []string
	var nodes *touched
	if readNodes {
		nodes = readTouched(data, f.Status)
	}
	if e == nil {
		var t indexTasks
		_ = json.Unmarshal(data, &t)
		for _, s := range api.Flatten(t.Tasks) {
			ops = append(ops, s.Task.Name())
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if e = x.entries[key]; e == nil {
		e = &indexEntry{id: key, ops: ops, created: f.CreatedAt, submittedBy: f.SubmittedBy, scheduleID: f.ScheduleID}
		x.entries[key] = e
		for _, op := range ops {
			x.ops[op]++
		}
	} else {
		if rev <= e.rev {
			return
		}
		x.status[e.status]--
	}
	e.rev = rev
	if nodes != nil {
		x.setTouched(e, nodes)
	}
	e.status = f.Status
	e.owner = f.Owner
	x.status[e.status]++
	switch {
	case f.FinishedAt != nil:
		e.finished = *f.FinishedAt
	case e.status.Terminal() && e.finished.IsZero():
		e.finished = written
	}
}

func (x *jobIndex) remove(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.entries[key]
	if e == nil {
		return
	}
	delete(x.entries, key)
	x.status[e.status]--
	for _, op := range e.ops {
		if x.ops[op]--; x.ops[op] <= 0 {
			delete(x.ops, op)
		}
	}
}

// stats are the job counts of GET /status.
func (x *jobIndex) stats() api.QueueStats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	qs := api.QueueStats{Total: len(x.entries), StatusCounts: map[string]int{}, OperationCounts: map[string]int{}}
	for s, n := range x.status {
		if n > 0 {
			qs.StatusCounts[string(s)] = n
		}
	}
	for op, n := range x.ops {
		qs.OperationCounts[op] = n
	}
	return qs
}

// jobQuery selects a page of jobs, newest first.
type jobQuery struct {
	limit       int
	after       *cursor
	status      api.JobStatus
	submittedBy string
	scheduleID  string
	// seed: status is one of seed 000's, matched against each job's
	// status as seedView shows it (completed takes partial_failure in).
	seed bool
}

// matches reports whether a job with status st passes the status filter.
func (q jobQuery) matches(st api.JobStatus) bool {
	if q.status == "" {
		return true
	}
	if q.seed {
		st, _, _ = seedStatus(st, api.StepSuccess)
	}
	return st == q.status
}

// cursor is a position in the newest-first order: a job's creation time
// and id. It is written as "<unix nanoseconds>-<id>" (api.JobCursor).
type cursor struct {
	created int64
	id      string
}

func parseCursor(s string) (*cursor, error) {
	ns, id, ok := strings.Cut(s, "-")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !api.ValidToken(id) {
		return nil, errors.New("cursor: want the value of the last job of the previous page (<unix nanoseconds>-<job id>)")
	}
	return &cursor{created: n, id: id}, nil
}

// before reports whether e comes after c in the newest-first order.
func (c *cursor) before(e *indexEntry) bool {
	n := e.created.UnixNano()
	return n < c.created || (n == c.created && e.id < c.id)
}

// page returns the ids of the jobs q selects, newest first.
func (x *jobIndex) page(q jobQuery) []string {
	x.mu.RLock()
	sel := make([]*indexEntry, 0, min(len(x.entries), 4*q.limit))
	for _, e := range x.entries {
		if !q.matches(e.status) {
			continue
		}
		if q.submittedBy != "" && e.submittedBy != q.submittedBy {
			continue
		}
		if q.scheduleID != "" && e.scheduleID != q.scheduleID {
			continue
		}
		if q.after != nil && !q.after.before(e) {
			continue
		}
		sel = append(sel, e)
	}
	x.mu.RUnlock()
	slices.SortFunc(sel, func(a, b *indexEntry) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	ids := make([]string, 0, min(len(sel), q.limit))
	for _, e := range sel[:min(len(sel), q.limit)] {
		ids = append(ids, e.id)
	}
	return ids
}

// running returns the id and owner of every running job.
func (x *jobIndex) running() []api.Job {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []api.Job
	for _, e := range x.entries {
		if e.status == api.JobRunning {
			out = append(out, api.Job{ID: e.id, Owner: e.owner, Status: e.status})
		}
	}
	return out
}

// expired returns the ids of finished jobs that finished before cutoff.
func (x *jobIndex) expired(cutoff time.Time) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var ids []string
	for _, e := range x.entries {
		if e.status.Terminal() && !e.finished.IsZero() && e.finished.Before(cutoff) {
			ids = append(ids, e.id)
		}
	}
	return ids
}
