package api

// jobStatuses lists every job state in lifecycle order.
var jobStatuses = []JobStatus{JobPending, JobRunning, JobCompleted, JobFailed, JobCancelled, JobPartialFailure}

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
)

// RetryRequest is the optional body of POST /job/{id}/retry.
type RetryRequest struct {
	// FailedOnly retries only on the nodes that failed, were cancelled or
	// unreachable, or never answered.
	FailedOnly bool `json:"failed_only,omitempty"`
}
