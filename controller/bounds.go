package controller

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Bounds that keep every job writable. A job lives in one KV entry, and a
// KV write is one NATS message: a job whose JSON outgrows the server's
// max_payload can never be written again, so it would stay "running" and
// hold its max_concurrent slot for ever. Agents cap each task's output
// (max_output_bytes), submissions that could not fit are refused, and a
// run that still outgrows the limit (many nodes with large outputs) cuts
// its stored outputs until it fits.

const (
	// payloadMargin is left of max_payload for the message's headers and
	// the KV subject.
	payloadMargin = 64 << 10
	// minResultBytes is about the least a node's result of one step takes
	// in the stored job (status, attempts and a timeline of three events).
	minResultBytes = 400
	// expectedIDBytes is about what a node id takes in the expected list.
	expectedIDBytes = 40
)

// maxJobBytes is the most a stored job may take: the bus's payload limit
// less a margin.
func (c *Controller) maxJobBytes() int {
	limit := int(c.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20 // the NATS default, when the server did not say
	}
	return limit - payloadMargin
}

// checkJobSize refuses a submission whose stored form could outgrow the
// bus limit once every node it targets now has a result for every step.
func (c *Controller) checkJobSize(job *api.Job) error {
	b, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	nodes := 1
	if job.Target.Scope != api.ScopeAny {
		nodes = max(c.reg.countMatching(job.Target), 1)
	}
	steps := api.LeafCount(job.Tasks)
	estimate := len(b) + nodes*expectedIDBytes + steps*nodes*minResultBytes
	if limit := c.maxJobBytes(); estimate > limit {
		return &api.ValidationError{Field: "tasks", Msg: fmt.Sprintf(
			"%d steps on %d nodes would take about %d bytes once stored with their results, more than the bus limit of %d bytes (NATS max_payload less %d); split the job or target fewer nodes",
			steps, nodes, estimate, limit, payloadMargin)}
	}
	return nil
}

// shrinkCaps are the successive caps on each stored output, error and
// progress message that shrinkResults tries.
var shrinkCaps = []int{16 << 10, 4 << 10, 1 << 10, 256, 0}

// shrinkResults cuts the stored outputs, errors and facts of a job's node
// results until its encoding fits in limit bytes, dropping their cached
// encodings; it returns the new encoding. Callers hold the run's lock.
func shrinkResults(j *api.Job, enc *jobEncoder, limit int) ([]byte, error) {
	var data []byte
	for _, cp := range shrinkCaps {
		for _, m := range j.Results {
			for _, res := range m {
				changed := false
				if len(res.Output) > cp {
					res.Output = cutText(res.Output, cp)
					changed = true
				}
				if len(res.Error) > cp {
					res.Error = cutText(res.Error, cp)
					changed = true
				}
				if len(res.ProgressMessage) > cp {
					res.ProgressMessage = cutText(res.ProgressMessage, cp)
					changed = true
				}
				if res.Facts != nil && cp < 4<<10 {
					res.Facts = nil
					changed = true
				}
				if cp == 0 && len(res.Events) > 1 {
					res.Events = res.Events[len(res.Events)-1:]
					changed = true
				}
				if changed {
					delete(enc.final, res)
				}
			}
		}
		var err error
		if data, err = enc.encode(j); err != nil {
			return nil, err
		}
		if len(data) <= limit {
			break
		}
	}
	return data, nil
}

// cutText keeps at most n bytes of s (at a UTF-8 boundary) and says so.
func cutText(s string, n int) string {
	keep := n
	for keep > 0 && keep < len(s) && s[keep]&0xC0 == 0x80 {
		keep--
	}
	return s[:keep] + fmt.Sprintf("…(truncated by the controller: %d bytes, kept %d to fit the job under the bus limit)", len(s), keep)
}

// countMatching counts the online nodes a target selects (resolve without
// the sorting, and under the read lock: it runs on every submission).
func (r *registry) countMatching(t api.Target) int {
	now := time.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t.Scope == api.ScopeNode {
		if n := r.nodes[t.Value]; n != nil && r.isOnline(n, now) && t.Matches(n.ID, n.Site, n.Groups) {
			return 1
		}
		return 0
	}
	count := 0
	for _, n := range r.nodes {
		if r.isOnline(n, now) && t.Matches(n.ID, n.Site, n.Groups) {
			count++
		}
	}
	return count
}

// Caps on what a node's report may bring into a job, whatever the node's
// own max_output_bytes: its output and error (the agent's largest
// max_output_bytes) and a progress message (a status line). A report that
// could not fit is dropped before it is decoded.
const (
	maxReportText      = 1 << 20
	maxProgressMessage = 4 << 10
	maxProgressReport  = 64 << 10
)

// capReport cuts a report's text to the caps above.
func capReport(tr *api.TaskResult) {
	limit := maxReportText
	if tr.Status == api.ResultProgress || tr.Status == api.ResultRunning {
		limit = maxProgressMessage
	}
	if len(tr.Output) > limit {
		tr.Output = cutText(tr.Output, limit)
	}
	if len(tr.Error) > limit {
		tr.Error = cutText(tr.Error, limit)
	}
}
