package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func putJob(t testing.TB, x *jobIndex, j *api.Job, rev uint64) {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	x.put(j.ID, b, j.CreatedAt, rev)
}

// TestNodeJobsIndex follows jobs through the index as the watch sees
// them (pending, running, finished) and checks what a node's recent jobs
// say: which jobs touched it, newest first, and its outcome in each.
func TestNodeJobsIndex(t *testing.T) {
	x := newJobIndex()
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	res := func(st string, changed bool) *api.NodeResult { return &api.NodeResult{Status: st, Changed: changed} }
	two := []api.Phase{{Backend: "ping", Action: "echo"}, {Backend: "ping", Action: "sleep"}}

	// job-a: both nodes, node-1 fails its second step, node-2 changes.
	a := &api.Job{ID: "job-a", Target: api.Target{Scope: api.ScopeAll}, Tasks: two, Status: api.JobPending, CreatedAt: t0}
	putJob(t, x, a, 1)
	if got, n := x.nodeJobs("node-1", 10); n != 0 || len(got) != 0 {
		t.Fatalf("a pending job with no nodes yet is listed: %v", got)
	}
	a.Status, a.Expected = api.JobRunning, []string{"node-2", "node-1"}
	a.Results = api.JobResults{0: {"node-1": res("success", false)}}
	putJob(t, x, a, 2)
	got, _ := x.nodeJobs("node-1", 10)
	if len(got) != 1 || got[0].Status != api.JobRunning || got[0].Outcome != "" || got[0].Target != "all" {
		t.Fatalf("running job: %+v", got)
	}
	fin := t0.Add(time.Minute)
	a.Status, a.FinishedAt = api.JobPartialFailure, &fin
	a.Results = api.JobResults{
		0: {"node-1": res("success", false), "node-2": res("success", true)},
		1: {"node-1": res("failed", false), "node-2": res("success", false)},
	}
	putJob(t, x, a, 3)

	// job-b: node-1 alone, cancelled before its step ran there.
	b := &api.Job{ID: "job-b", Target: api.Target{Scope: api.ScopeNode, Value: "node-1"}, Tasks: two, Status: api.JobCancelled,
		Expected: []string{"node-1"}, CreatedAt: t0.Add(2 * time.Minute), FinishedAt: &fin}
	putJob(t, x, b, 4)
	// job-c: a group node-3 was offline for.
	c := &api.Job{ID: "job-c", Target: api.Target{Scope: api.ScopeGroup, Value: "db"}, Tasks: two, Status: api.JobCompleted,
		Expected: []string{"node-2"}, Unreachable: []string{"node-3"}, CreatedAt: t0.Add(3 * time.Minute), FinishedAt: &fin,
		Results: api.JobResults{0: {"node-2": res("success", false)}, 1: {"node-2": res("skipped", false)}}}
	putJob(t, x, c, 5)

	type row struct{ id, outcome string }
	rows := func(node string, limit int) ([]row, int) {
		js, total := x.nodeJobs(node, limit)
		var out []row
		for _, j := range js {
			out = append(out, row{j.ID, j.Outcome + map[bool]string{true: "+changed"}[j.Changed]})
		}
		return out, total
	}
	for _, tc := range []struct {
		node  string
		limit int
		want  []row
		total int
	}{
		{"node-1", 10, []row{{"job-b", "not_run"}, {"job-a", "failed"}}, 2},
		{"node-1", 1, []row{{"job-b", "not_run"}}, 2},
		{"node-2", 10, []row{{"job-c", "success"}, {"job-a", "success+changed"}}, 2},
		{"node-3", 10, []row{{"job-c", "unreachable"}}, 1},
		{"node-4", 10, nil, 0},
	} {
		got, total := rows(tc.node, tc.limit)
		if !slices.Equal(got, tc.want) || total != tc.total {
			t.Errorf("%s limit %d: %v of %d, want %v of %d", tc.node, tc.limit, got, total, tc.want, tc.total)
		}
	}

	// A later write of a finished job (a retention mark, say) keeps what
	// was read; removal forgets the job.
	x.remove("job-a")
	if got, _ := rows("node-1", 10); !slices.Equal(got, []row{{"job-b", "not_run"}}) {
		t.Errorf("after removing job-a: %v", got)
	}
	// The ids of a node are shared by the jobs that touched it.
	if len(x.names) != 3 {
		t.Errorf("%d interned names, want 3", len(x.names))
	}
}

// TestNodeJobsIndexScale measures a node's recent jobs over an index of
// 50 finished jobs across a 10,000-node fleet (each on all of it); the
// figures are logged, and the lookup must not read a job.
func TestNodeJobsIndexScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 50 jobs of 10,000 nodes")
	}
	const nodes, jobs = 10000, 50
	ids := make([]string, nodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%05d", i)
	}
	x := newJobIndex()
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var putTime time.Duration
	for k := range jobs {
		fin := t0.Add(time.Duration(k)*time.Minute + time.Second)
		j := &api.Job{ID: fmt.Sprintf("job-%03d", k), Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}},
			Status: api.JobCompleted, Expected: ids, CreatedAt: t0.Add(time.Duration(k) * time.Minute), FinishedAt: &fin,
			Results: api.JobResults{0: {}}}
		for _, id := range ids {
			j.Results[0][id] = &api.NodeResult{Status: "success"}
		}
		b, _ := json.Marshal(j)
		start := time.Now()
		x.put(j.ID, b, j.CreatedAt, 1)
		putTime += time.Since(start)
	}
	start := time.Now()
	const lookups = 100
	for i := range lookups {
		got, total := x.nodeJobs(ids[(i*97)%nodes], 20)
		if total != jobs || len(got) != 20 || got[0].ID != "job-049" || got[0].Outcome != "success" {
			t.Fatalf("lookup: %d of %d, first %+v", len(got), total, got[0])
		}
	}
	t.Logf("%d jobs × %d nodes: a finished job's put %v; a node's 20 recent jobs %v per lookup",
		jobs, nodes, putTime/jobs, time.Since(start)/lookups)
}
