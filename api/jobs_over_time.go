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
