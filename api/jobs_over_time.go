package api

import (
	"fmt"
	"strings"
	"time"
)

// jobStatuses lists every job state in lifecycle order.
var jobStatuses = []JobStatus{JobWaiting, JobPending, JobRunning, JobCompleted, JobFailed, JobCancelled, JobPartialFailure}

// KnownJobStatus reports whether s is a job state.
func KnownJobStatus(s JobStatus) bool {
	for _, k := range jobStatuses {
		if k == s {
			return true
		}
	}
	return false
}

// JobStatusNames are the job states as strings, for help and errors.
func JobStatusNames() []string {
	out := make([]string, len(jobStatuses))
	for i, s := range jobStatuses {
		out[i] = string(s)
	}
	return out
}

// A message on cancel.<job> stops the job's tasks everywhere. Its
// StopReasonHeader says why: absent for a cancel by request,
// StopReasonJobTimeout when the job's timeout passed.
const (
	StopReasonHeader     = "Grid-Stop-Reason"
	StopReasonJobTimeout = "job-timeout"
	// StoppedByJobTimeout is what a node's result says of a task the job's
	// timeout stopped.
	StoppedByJobTimeout = "stopped by the job's timeout"
	// CancelledByHeader names the API token of a cancel by request, which
	// the job's owner stores as its cancelled_by.
	CancelledByHeader = "Grid-Cancelled-By"
)

// RetryRequest is the optional body of POST /job/{id}/retry.
type RetryRequest struct {
	// FailedOnly retries only on the nodes that failed, were cancelled or
	// unreachable, or never answered.
	FailedOnly bool `json:"failed_only,omitempty"`
}

// Job priorities: a job waiting for a free slot (max_concurrent) starts
// before every waiting job of a lower priority, on whichever controller of
// the cluster has the slot; jobs of one priority start in submission order.
const (
	MinPriority     = 0
	MaxPriority     = 9
	DefaultPriority = 5
)

// PriorityRequestSubject is where a submitted job of a priority is queued:
// request.<priority>.<job>. Schedulers pull the subjects of higher
// priorities first.
func PriorityRequestSubject(priority int, jobID string) string {
	return fmt.Sprintf("request.%d.%s", priority, jobID)
}

// PriorityRequests filters the requests of one priority: request.<p>.*.
func PriorityRequests(priority int) string { return fmt.Sprintf("request.%d.*", priority) }

// RequestJobID is the job id a request subject names (request.<job> or
// request.<priority>.<job>).
func RequestJobID(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// validateOverTime checks the fields that say when and in which order a
// job runs.
func (j *Job) validateOverTime() error {
	if j.Priority < MinPriority || j.Priority > MaxPriority {
		return invalid("priority", "%d is out of range (want %d, lowest, to %d, highest; default %d)", j.Priority, MinPriority, MaxPriority, DefaultPriority)
	}
	return nil
}

// ParseNotBefore reads a job's not_before: an RFC 3339 time, or a positive
// duration counted from now. Empty is nil (no delay).
func ParseNotBefore(s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		t = t.UTC()
		return &t, nil
	}
	d, err := ParsePositiveDuration(s)
	if err != nil {
		return nil, invalid("not_before", "%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration (10m)", s)
	}
	t := now.Add(d).UTC()
	return &t, nil
}

// StreamDeadLetters holds job requests no controller could claim after
// max_deliveries deliveries, on dlq.<job>.
const StreamDeadLetters = "dlq"

// DeadLetterSubject is where a job's dead request is kept.
func DeadLetterSubject(jobID string) string { return "dlq." + jobID }

// DeadLetterPrefix starts the error of a job whose request was dead-lettered.
const DeadLetterPrefix = "dead letter: "

// DeadLetter is one entry of GET /dlq.
type DeadLetter struct {
	JobID      string    `json:"job_id"`
	Reason     string    `json:"reason"`
	Deliveries int       `json:"deliveries"`
	Subject    string    `json:"subject"`
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
}
