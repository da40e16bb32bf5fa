// Package api is the contract every GRID component shares: the job model,
// node and result types, backend action schemas, validation, NATS subject
// builders and the HTTP client. It imports no other GRID package.
package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Scope says which nodes a Target selects.
type Scope string

// Target scopes.
const (
	ScopeAll   Scope = "all"   // every online node
	ScopeGroup Scope = "group" // nodes in a group or any of its sub-groups
	ScopeNode  Scope = "node"  // one node by id
	ScopeAny   Scope = "any"   // one online node, chosen by the controller
	ScopeSite  Scope = "site"  // every online node of one site
)

// Target selects the nodes a job runs on.
type Target struct {
	Scope Scope  `json:"scope" yaml:"scope"`
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	// Site narrows a group, node or any target to one site's nodes
	// (group:web@paris). A whole site is ScopeSite (site:paris).
	Site string `json:"site,omitempty" yaml:"site,omitempty"`
}

// String renders a target the way the CLI accepts it (group:web,
// group:web@paris, site:paris).
func (t Target) String() string {
	s := string(t.Scope)
	if t.Value != "" {
		s += ":" + t.Value
	}
	if t.Site != "" {
		s += "@" + t.Site
	}
	return s
}

// Condition gates a phase on the outcome of earlier steps.
type Condition string

// Conditions. The empty condition means ConditionAlways.
const (
	ConditionAlways    Condition = "always"
	ConditionOnSuccess Condition = "on_success"
	ConditionOnFailure Condition = "on_failure"
)

// Strategy says what a failure on one node does to the rest of the job.
type Strategy string

// Strategies. The empty strategy means StrategyFailFast.
const (
	// StrategyFailFast stops the job after the first failed step; only
	// on_failure phases still run.
	StrategyFailFast Strategy = "fail-fast"
	// StrategyContinue drops failed nodes from later steps and carries on
	// with the others.
	StrategyContinue Strategy = "continue"
)

// JobStatus is the lifecycle state of a job.
type JobStatus string

// Job states.
const (
	JobPending JobStatus = "pending"
	// JobWaiting: submitted with a not_before still to come.
	JobWaiting        JobStatus = "waiting"
	JobRunning        JobStatus = "running"
	JobCompleted      JobStatus = "completed"
	JobFailed         JobStatus = "failed"
	JobCancelled      JobStatus = "cancelled"
	JobPartialFailure JobStatus = "partial_failure"
)

// Terminal reports whether a job in this state will not change again.
func (s JobStatus) Terminal() bool {
	switch s {
	case JobCompleted, JobFailed, JobCancelled, JobPartialFailure:
		return true
	}
	return false
}

// Task is one backend action: what a leaf phase runs and what a command
// carries to an agent.
type Task struct {
	Backend    string    `json:"backend" yaml:"backend"`
	Action     string    `json:"action" yaml:"action"`
	Params     Params    `json:"params,omitempty" yaml:"params,omitempty"`
	Timeout    string    `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	MaxRetries int       `json:"max_retries,omitempty" yaml:"max_retries,omitempty"`
	Condition  Condition `json:"condition,omitempty" yaml:"condition,omitempty"`
}

// Name is "backend.action".
func (t Task) Name() string { return t.Backend + "." + t.Action }

// Job is a tree of phases run against a target. Top-level phases are
// barrier steps; a phase with nested tasks is a per-node pipeline.
type Job struct {
	ID        string   `json:"id"`
	Target    Target   `json:"target"`
	Tasks     []Phase  `json:"tasks"`
	Strategy  Strategy `json:"strategy,omitempty"`
	Timeout   string   `json:"timeout,omitempty"`
	CheckMode bool     `json:"check_mode,omitempty"`
	// MaxConcurrency and MaxErrors are the rolling limits of every
	// top-level phase that sets none of its own (nil: no limit).
	MaxConcurrency *Limit    `json:"max_concurrency,omitempty"`
	MaxErrors      *Limit    `json:"max_errors,omitempty"`
	Status         JobStatus `json:"status"`
	// Step is the flat index of the step in progress (or the last one run).
	Step int `json:"step"`
	// Expected holds the node ids the target resolved to.
	Expected []string `json:"expected"`
	// Unreachable holds the node ids the target matched that were offline
	// when it was resolved: the job did not run on them.
	Unreachable []string `json:"unreachable,omitempty"`
	// NodeSites names the site of each node of Expected and Unreachable
	// that is not in DefaultSite, set when the target is resolved. A node
	// it does not name is in DefaultSite, so a job of a fleet without
	// sites carries none (see NodeSite).
	NodeSites map[string]string `json:"node_sites,omitempty"`
	// Summary counts the nodes by outcome once the job is terminal.
	Summary *JobSummary `json:"summary,omitempty"`
	// Results is keyed by flat step index, then node id.
	Results JobResults `json:"results,omitempty"`
	// Error says why a job failed or was cancelled as a whole.
	Error string `json:"error,omitempty"`
	// Owner is the controller running the job.
	Owner string `json:"owner,omitempty"`
	// SubmittedBy is the name of the API token that submitted the job; the
	// controller sets it, a submission cannot.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// CancelledBy is the name of the API token that cancelled the job.
	CancelledBy string `json:"cancelled_by,omitempty"`
	TraceID     string `json:"trace_id,omitempty"`
	// TraceParent is the W3C traceparent of the request that submitted the
	// job; the controller that runs it continues that trace.
	TraceParent string    `json:"trace_parent,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// StartedAt is set when a controller claims the job.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// FinishedAt is set once the job is terminal.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Nodes, when set, narrows the target to these node ids (a retry of
	// only the nodes that failed).
	Nodes []string `json:"nodes,omitempty"`
	// RetryOf is the job this one retries (POST /job/{id}/retry).
	RetryOf string `json:"retry_of,omitempty"`
	// ScheduleID is the schedule whose tick submitted the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// Priority orders jobs waiting for a free slot: MinPriority (0) to
	// MaxPriority (9), higher first; first in, first out within one.
	Priority int `json:"priority,omitempty"`
	// NotBefore, when set, is the earliest time the job may start; until
	// then it is JobWaiting.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// StatusReason says why a running job is not making progress though
	// nothing failed: its nodes wait for a rate limit (see RateLimited).
	// Empty when nothing holds it back.
	StatusReason string `json:"status_reason,omitempty"`
}

// JobCursor is the GET /jobs cursor that continues after j: the next page
// holds the jobs created before it (newest first).
func JobCursor(j *Job) string {
	return strconv.FormatInt(j.CreatedAt.UnixNano(), 10) + "-" + j.ID
}

// JobResults maps flat step index → node id → result.
type JobResults map[int]map[string]*NodeResult

// Node returns the result of one node at one step, or nil.
func (r JobResults) Node(step int, node string) *NodeResult {
	if r == nil {
		return nil
	}
	return r[step][node]
}

// Per-node step states.
const (
	StepPending    = "pending"
	StepDispatched = "dispatched"
	StepRunning    = "running"
	StepSuccess    = "success"
	StepFailed     = "failed"
	StepSkipped    = "skipped"
	StepCancelled  = "cancelled"
	// StepUnreachable: the node went away while the step was out to it.
	StepUnreachable = "unreachable"
	// StepNotStarted: a rollout stopped (max_errors exceeded) before the
	// node started the step.
	StepNotStarted = "not_started"
)

// StepTerminal reports whether a per-node step state is final.
func StepTerminal(s string) bool {
	switch s {
	case StepSuccess, StepFailed, StepSkipped, StepCancelled, StepUnreachable, StepNotStarted:
		return true
	}
	return false
}

// NodeResult is what one node did for one step.
type NodeResult struct {
	Status   string         `json:"status"`
	Output   string         `json:"output,omitempty"`
	Error    string         `json:"error,omitempty"`
	Changed  bool           `json:"changed,omitempty"`
	Facts    map[string]any `json:"facts,omitempty"`
	Duration Duration       `json:"duration,omitempty"`
	Attempts int            `json:"attempts,omitempty"`
	// Progress is the last progress percentage a long task reported.
	Progress *int `json:"progress,omitempty"`
	// ProgressMessage is the message of the last progress report; it stays
	// after the task ends.
	ProgressMessage string `json:"progress_message,omitempty"`
	// Events is the node's timeline for this step.
	Events []Event `json:"events,omitempty"`
	// StatusReason says why a pending step has not started on the node
	// (a rate limit); cleared when it is dispatched.
	StatusReason string `json:"status_reason,omitempty"`
}

// Event is one entry in a node's timeline for a step.
type Event struct {
	Status  string    `json:"status"`
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt,omitempty"`
	Message string    `json:"message,omitempty"`
}

// Duration is a time.Duration that reads and writes as "1.5s" in JSON and
// also accepts a number of nanoseconds.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string. The string
// holds digits, '.', '-', unit letters and 'µ', none of which JSON
// escapes, so it only needs quotes (strconv.Quote takes a slow path for
// the 'µ' of every sub-millisecond duration).
func (d Duration) MarshalJSON() ([]byte, error) {
	var buf [40]byte
	b := append(buf[:0], '"')
	b = append(b, time.Duration(d).String()...)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts "1.5s" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		s, err := strconv.Unquote(string(b))
		if err != nil {
			return err
		}
		if s == "" {
			*d = 0
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string like \"1.5s\" or nanoseconds", b)
	}
	*d = Duration(n)
	return nil
}

// String renders the duration as Go does.
func (d Duration) String() string { return time.Duration(d).String() }

// TaskResult is what an agent reports for one (job, step, attempt). An agent
// sends one with status "running" once a task has run for a moment (or
// reports progress), optional "progress" ones, and one with "success" or
// "failed" at the end.
type TaskResult struct {
	JobID     string         `json:"job_id"`
	TaskIndex int            `json:"task_index"`
	NodeID    string         `json:"node_id"`
	Attempt   int            `json:"attempt"`
	Status    string         `json:"status"`
	Output    string         `json:"output,omitempty"`
	Error     string         `json:"error,omitempty"`
	Changed   bool           `json:"changed,omitempty"`
	Facts     map[string]any `json:"facts,omitempty"`
	Progress  *int           `json:"progress,omitempty"`
	// Cancelled says the task stopped because its job was cancelled.
	Cancelled bool `json:"cancelled,omitempty"`
	// Truncated says the agent cut the output, error or facts to its
	// max_output_bytes (the text says where).
	Truncated bool     `json:"truncated,omitempty"`
	Duration  Duration `json:"duration"`
	// StartedAt, on a final result, is when the backend started; absent
	// when it never did. A task that ends quickly sends no "running"
	// report, so this is where its start is recorded.
	StartedAt *time.Time `json:"started_at,omitempty"`
	Timestamp time.Time  `json:"timestamp"`
}

// Result statuses an agent reports besides the terminal StepSuccess and
// StepFailed.
const (
	ResultRunning  = "running"
	ResultProgress = "progress"
)

// Command is what the controller sends to agents for one step.
type Command struct {
	JobID     string `json:"job_id"`
	TaskIndex int    `json:"task_index"`
	Attempt   int    `json:"attempt"`
	Task      Task   `json:"task"`
	CheckMode bool   `json:"check_mode,omitempty"`
	// Timeout bounds the backend run on the agent ("" means the agent's
	// default).
	Timeout string `json:"timeout,omitempty"`
	// Exclude lists nodes that a broadcast reaches by subject but that must
	// not run it (nodes dropped from the job by an earlier failure).
	Exclude []string `json:"exclude,omitempty"`
	// ResolvedAt is when the target was resolved: an agent that came online
	// later was not expected and ignores a broadcast.
	ResolvedAt time.Time `json:"resolved_at"`
	// Sealed holds the sensitive params' values (Task.Params holds
	// SensitiveValue for them), each sealed for the one node the command
	// goes to; see SealContext.
	Sealed map[string]string `json:"sealed,omitempty"`
}

// SealContext binds a sealed param value to its job, step, node and param,
// so it cannot be replayed into another command.
func SealContext(job string, step int, node, param string) []byte {
	return []byte(job + "/" + strconv.Itoa(step) + "/" + node + "/" + param)
}

// Node states.
const (
	NodeOnline  = "online"
	NodeOffline = "offline"
)

// NodeInfo is what an agent registers about itself.
type NodeInfo struct {
	ID       string   `json:"id"`
	Hostname string   `json:"hostname"`
	Groups   []string `json:"groups"`
	// Site is the node's site, from its enrollment (the controller sets it;
	// empty means DefaultSite).
	Site     string   `json:"site,omitempty"`
	Backends []string `json:"backends"`
	// Schemas are the action schemas of the node's enabled backends. In the
	// nodes bucket only SchemaDigest is kept; the schemas themselves are
	// stored once per digest in the schemas bucket, so heartbeats stay small.
	Schemas      []BackendSchema `json:"schemas,omitempty"`
	SchemaDigest string          `json:"schema_digest,omitempty"`
	// SealKey is the agent's public key (X25519) that sensitive params are
	// sealed for.
	SealKey string `json:"seal_key,omitempty"`
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
	// HeartbeatInterval is how often the agent re-sends its record; a
	// controller warns when it is too long for its node_offline_after.
	HeartbeatInterval Duration `json:"heartbeat_interval,omitempty"`
	// OnlineSince is when the agent's current session registered.
	OnlineSince time.Time `json:"online_since"`
	LastSeen    time.Time `json:"last_seen"`
}

// ControllerInfo is what a controller registers about itself.
type ControllerInfo struct {
	ID      string `json:"id"`
	APIAddr string `json:"api_addr"`
	NATSURL string `json:"nats_url"`
	// LeafURL is where sites' relays connect to this controller (empty:
	// it accepts none).
	LeafURL  string    `json:"leaf_url,omitempty"`
	Status   string    `json:"status"`
	Running  int       `json:"running"`
	Started  time.Time `json:"started"`
	LastSeen time.Time `json:"last_seen"`
}

// Status is the cluster view served by GET /status.
type Status struct {
	Nodes       NodeCounts     `json:"nodes"`
	Controllers int            `json:"controllers"`
	Jobs        QueueStats     `json:"jobs"`
	Time        time.Time      `json:"time"`
	Limits      map[string]int `json:"limits,omitempty"`
	// Replicas is the count the answering controller creates and raises
	// streams and buckets to; Streams is each one's replication state.
	Replicas int            `json:"replicas,omitempty"`
	Streams  []StreamHealth `json:"streams,omitempty"`
}

// NodeCounts counts nodes by state.
type NodeCounts struct {
	Total   int `json:"total"`
	Online  int `json:"online"`
	Offline int `json:"offline"`
}

// QueueStats are job counts by status and by backend.action.
type QueueStats struct {
	Total           int            `json:"total_jobs"`
	StatusCounts    map[string]int `json:"status_counts"`
	OperationCounts map[string]int `json:"operation_counts"`
}

// ErrorBody is the JSON body of every API error.
type ErrorBody struct {
	Error string `json:"error"`
}

// SubmitResponse is the body of a 202 from POST /job.
type SubmitResponse = Job

// NodeRegistration is what an agent sends on NodeRegisterSubject: its
// record (SchemaDigest set, Schemas empty) and its schema set as encoded,
// whose digest (SchemaDigestOf) the controller computes and compares with
// the record's before it stores the set under it.
type NodeRegistration struct {
	Node    NodeInfo        `json:"node"`
	Schemas json.RawMessage `json:"schemas"`
}

// StoreReply is a controller's answer to an agent's report, registration
// or heartbeat: empty once stored, or why it was not.
type StoreReply struct {
	Error string `json:"error,omitempty"`
}
