package controller

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// jobEncoder writes a run's job as the exact JSON json.Marshal gives, but
// encodes each final node result only once: a final result (success,
// failed, skipped, cancelled) never changes again, while the job — with a
// result per node and step, megabytes for a step on 10,000 nodes — is
// written on every flush. The run's lock guards it.
type jobEncoder struct {
	// final holds the encoding of node results that are final.
	final map[*api.NodeResult][]byte
	// order holds each step's node ids, sorted, as of when the step had
	// that many results (results are only ever added).
	order map[int][]string
	// last is the size of the last encoding, to allocate the next at once.
	last int
	// check makes every encoding compare itself with json.Marshal (tests).
	check bool
}

// checkEncoding is set by the package's tests.
var checkEncoding = false

func newJobEncoder() *jobEncoder {
	return &jobEncoder{final: map[*api.NodeResult][]byte{}, order: map[int][]string{}, check: checkEncoding}
}

// jobHead and jobTail are api.Job's fields before and after Results, in
// order and with the same tags (a test holds them to it).
type jobHead struct {
	ID        string       `json:"id"`
	Target    api.Target   `json:"target"`
	Tasks     []api.Phase  `json:"tasks"`
	Strategy  api.Strategy `json:"strategy,omitempty"`
	Timeout   string       `json:"timeout,omitempty"`
	CheckMode bool         `json:"check_mode,omitempty"`
	// MaxConcurrency and MaxErrors: see api.Job.
	MaxConcurrency *api.Limit        `json:"max_concurrency,omitempty"`
	MaxErrors      *api.Limit        `json:"max_errors,omitempty"`
	Status         api.JobStatus     `json:"status"`
	Step           int               `json:"step"`
	Expected       []string          `json:"expected"`
	Unreachable    []string          `json:"unreachable,omitempty"`
	NodeSites      map[string]string `json:"node_sites,omitempty"`
	Summary        *api.JobSummary   `json:"summary,omitempty"`
}

type jobTail struct {
	Error       string     `json:"error,omitempty"`
	Owner       string     `json:"owner,omitempty"`
	SubmittedBy string     `json:"submitted_by,omitempty"`
	CancelledBy string     `json:"cancelled_by,omitempty"`
	TraceID     string     `json:"trace_id,omitempty"`
	TraceParent string     `json:"trace_parent,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Nodes       []string   `json:"nodes,omitempty"`
	RetryOf     string     `json:"retry_of,omitempty"`
	ScheduleID  string     `json:"schedule_id,omitempty"`
	Priority    int        `json:"priority,omitempty"`
	NotBefore   *time.Time `json:"not_before,omitempty"`
	// StatusReason: see api.Job.
	StatusReason string `json:"status_reason,omitempty"`
}

// encode returns the job's JSON.
func (e *jobEncoder) encode(j *api.Job) ([]byte, error) {
	head, err := json.Marshal(jobHead{ID: j.ID, Target: j.Target, Tasks: j.Tasks, Strategy: j.Strategy, Timeout: j.Timeout,
		CheckMode: j.CheckMode, MaxConcurrency: j.MaxConcurrency, MaxErrors: j.MaxErrors, Status: j.Status, Step: j.Step,
		Expected: j.Expected, Unreachable: j.Unreachable, NodeSites: j.NodeSites, Summary: j.Summary})
	if err != nil {
		return nil, err
	}
	tail, err := json.Marshal(jobTail{Error: j.Error, Owner: j.Owner, SubmittedBy: j.SubmittedBy, CancelledBy: j.CancelledBy, TraceID: j.TraceID, TraceParent: j.TraceParent,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Nodes: j.Nodes, RetryOf: j.RetryOf, ScheduleID: j.ScheduleID, Priority: j.Priority, NotBefore: j.NotBefore, StatusReason: j.StatusReason})
	if err != nil {
		return nil, err
	}
	// head is {"id":…,"expected":…} and tail {"created_at":…}: neither is
	// empty, as id and created_at are always written.
	b := make([]byte, 0, max(e.last+e.last/8, len(head)+len(tail)+sizeHint(j.Results)))
	b = append(b, head[:len(head)-1]...)
	if len(j.Results) > 0 {
		b = append(b, `,"results":`...)
		if b, err = e.appendResults(b, j.Results); err != nil {
			return nil, err
		}
	}
	b = append(b, ',')
	b = append(b, tail[1:]...)
	e.last = len(b)
	if e.check {
		if std, _ := json.Marshal(j); string(std) != string(b) {
			panic("jobEncoder: encoding differs from json.Marshal:\n" + string(b) + "\n" + string(std))
		}
	}
	return b, nil
}

// sizeHint guesses the size of the results' JSON (a few hundred bytes a
// node result).
func sizeHint(res api.JobResults) int {
	n := 0
	for _, m := range res {
		n += len(m) * 320
	}
	return n
}

// appendResults writes results as encoding/json writes a map: keys sorted
// as strings.
func (e *jobEncoder) appendResults(b []byte, res api.JobResults) ([]byte, error) {
	steps := make([]int, 0, len(res))
	for s := range res {
		steps = append(steps, s)
	}
	slices.SortFunc(steps, func(a, b int) int { return strings.Compare(strconv.Itoa(a), strconv.Itoa(b)) })
	b = append(b, '{')
	for i, s := range steps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(s), 10)
		b = append(b, `":`...)
		m := res[s]
		if m == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '{')
		for k, id := range e.nodes(s, m) {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendKey(b, id)
			r := m[id]
			if r == nil {
				b = append(b, "null"...)
				continue
			}
			enc := e.final[r]
			if enc == nil {
				var err error
				if enc, err = json.Marshal(r); err != nil {
					return nil, err
				}
				if api.StepTerminal(r.Status) {
					e.final[r] = enc
				}
			}
			b = append(b, enc...)
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// nodes returns the node ids of a step's results, sorted.
func (e *jobEncoder) nodes(step int, m map[string]*api.NodeResult) []string {
	if ids := e.order[step]; len(ids) == len(m) {
		return ids
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	e.order[step] = ids
	return ids
}

// appendKey writes a map key as encoding/json does. Node ids are tokens
// (letters, digits, '-', '_', '.'), which need no escaping; anything else
// goes through json.Marshal.
func appendKey(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainKeyByte(s[i]) {
			q, _ := json.Marshal(s)
			b = append(b, q...)
			return append(b, ':')
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"', ':')
}

// plainKeyByte reports whether c may appear in a JSON string as is.
func plainKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}
