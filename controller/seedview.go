package controller

import (
	"github.com/gridfleet/terraform-provider-grid/api"
)

// The seed-000 view of a job: what the job routes answer a request without
// a token on a lab controller (anonymous_role). That caller is the seed's
// own client, which knows seed 000's job statuses (pending, running,
// completed, failed, cancelled) and per-node statuses (success, failed,
// running, pending) and nothing else; GRID's own clients always send a
// token and get the job unchanged. See DESIGN.md, "Anonymous access".

// seedJobStatuses maps every job status to seed 000's set. waiting (a
// not_before still to come) has not started: pending. partial_failure is
// completed: seed 000's walker makes a job failed only when fail-fast was
// triggered (or it timed out), so a continue job whose nodes partly failed
// ends completed there.
var seedJobStatuses = map[api.JobStatus]api.JobStatus{
	api.JobPending:        api.JobPending,
	api.JobWaiting:        api.JobPending,
	api.JobRunning:        api.JobRunning,
	api.JobCompleted:      api.JobCompleted,
	api.JobFailed:         api.JobFailed,
	api.JobCancelled:      api.JobCancelled,
	api.JobPartialFailure: api.JobCompleted,
}

// seedStepStatuses maps every per-node step status to seed 000's. An empty
// value drops the node's entry from that step: seed 000 records no result
// for a node a step did not reach (a phase skipped by its condition or by
// fail-fast, a node dropped by continue, a node a stopped rollout never
// started).
var seedStepStatuses = map[string]string{
	api.StepPending:     api.StepPending,
	api.StepDispatched:  api.StepRunning,
	api.StepRunning:     api.StepRunning,
	api.StepSuccess:     api.StepSuccess,
	api.StepFailed:      api.StepFailed,
	api.StepCancelled:   api.StepFailed,
	api.StepUnreachable: api.StepFailed,
	api.StepSkipped:     "",
	api.StepNotStarted:  "",
}

// seedStatus maps a job status and a per-node step status to seed 000's
// (see the tables above). A status the tables do not know (one added
// later) is running while it is not terminal and failed once it is, for a
// job; failed for a step: never a status the seed's client does not know.
func seedStatus(job api.JobStatus, step string) (api.JobStatus, string, bool) {
	js, ok := seedJobStatuses[job]
	if !ok {
		js = api.JobRunning
		if job.Terminal() {
			js = api.JobFailed
		}
	}
	ss, ok := seedStepStatuses[step]
	if !ok {
		ss = api.StepFailed
	}
	return js, ss, ss != ""
}

// seedView returns a copy of j as seed 000 shows it: the job's status and
// every node's step status mapped by seedStatus, entries the seed has none
// for dropped, and the node timelines (whose entries carry GRID's step
// statuses) left out. j itself is not changed.
func seedView(j *api.Job) *api.Job {
	if j == nil {
		return nil
	}
	out := *j
	out.Status, _, _ = seedStatus(j.Status, api.StepSuccess)
	if j.Results == nil {
		return &out
	}
	out.Results = make(api.JobResults, len(j.Results))
	for step, nodes := range j.Results {
		m := make(map[string]*api.NodeResult, len(nodes))
		for node, r := range nodes {
			if r == nil {
				continue
			}
			_, st, keep := seedStatus(j.Status, r.Status)
			if !keep {
				continue
			}
			nr := *r
			nr.Status, nr.Events = st, nil
			m[node] = &nr
		}
		if len(m) > 0 {
			out.Results[step] = m
		}
	}
	return &out
}

// jobView is the job as the caller of a request sees it: seed 000's view
// for an anonymous caller, else the job itself.
func jobView(p principal, j *api.Job) *api.Job {
	if p.Anonymous {
		return seedView(j)
	}
	return j
}
