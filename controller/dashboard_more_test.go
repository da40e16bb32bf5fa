package controller_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// TestNodePageRoutes runs a job on one node of a real fleet and reads what
// the dashboard's node page, schedules view and launcher read: the node's
// recent jobs with its outcome, one node's enrollment, the last job of a
// schedule and the caller's role; bad input is a 400 naming it.
func TestNodePageRoutes(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}, {Backend: "test", Action: "fail"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().WaitJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}

	type nodeJobs struct {
		Node  string `json:"node"`
		Total int    `json:"total"`
		Jobs  []struct {
			ID      string `json:"id"`
			Status  string `json:"status"`
			Target  string `json:"target"`
			Outcome string `json:"outcome"`
		} `json:"jobs"`
	}
	// The index follows the bucket by a watch: wait for the finished job.
	var p nodeJobs
	for {
		p = dashboardJSON[nodeJobs](t, ctx, f, "/node/node-1/jobs?limit=5")
		if len(p.Jobs) == 1 && p.Jobs[0].Outcome != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node-1's jobs: %+v", p)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if p.Total != 1 || p.Jobs[0].ID != j.ID || p.Jobs[0].Outcome != "failed" || p.Jobs[0].Target != "node:node-1" {
		t.Errorf("node-1's jobs: %+v", p)
	}
	if p := dashboardJSON[nodeJobs](t, ctx, f, "/node/node-2/jobs"); p.Total != 0 || len(p.Jobs) != 0 {
		t.Errorf("node-2 ran nothing, yet: %+v", p)
	}

	enr := dashboardJSON[[]api.Enrollment](t, ctx, f, "/enrollments?node=node-2")
	if len(enr) != 1 || enr[0].NodeID != "node-2" || enr[0].Status != api.EnrollAdmitted {
		t.Errorf("node-2's enrollment: %+v", enr)
	}
	if enr := dashboardJSON[[]api.Enrollment](t, ctx, f, "/enrollments?node=node-9"); len(enr) != 0 {
		t.Errorf("an unknown node's enrollment: %+v", enr)
	}

	type who struct {
		Name   string   `json:"name"`
		Role   api.Role `json:"role"`
		Submit bool     `json:"submit"`
		Admin  bool     `json:"admin"`
	}
	if w := dashboardJSON[who](t, ctx, f, "/whoami"); w.Role != api.RoleAdmin || !w.Submit || !w.Admin {
		t.Errorf("whoami: %+v", w)
	}

	for _, tc := range []struct{ path, want string }{
		{"/node/node-1/jobs?limit=0", "limit"},
		{"/node/node-1/jobs?limit=201", "limit"},
		{"/node/no%20such/jobs", "node id"},
	} {
		res := dashboardGet(t, ctx, f, tc.path) //nolint:bodyclose // closed when the test ends
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: %d %s, want 400 naming %s", tc.path, res.StatusCode, body, tc.want)
		}
	}
}

// TestJobStatsRoute runs jobs on a real fleet and reads the overview's
// chart data: the jobs submitted and ended this hour and day by outcome,
// in the current bucket, and the failure listed with its target and
// error; a window other than 1h or 24h is a 400 naming it.
func TestJobStatsRoute(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(tasks ...api.Phase) *api.Job {
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		done, err := f.Client().WaitJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	ok1 := run(api.Phase{Backend: "ping", Action: "echo"})
	ok2 := run(api.Phase{Backend: "ping", Action: "echo"})
	bad := run(api.Phase{Backend: "test", Action: "fail"})
	if ok1.Status != api.JobCompleted || ok2.Status != api.JobCompleted || bad.Status != api.JobFailed {
		t.Fatalf("jobs ended %s, %s, %s; want completed, completed, failed", ok1.Status, ok2.Status, bad.Status)
	}

	type bucket struct {
		Start          time.Time `json:"start"`
		Submitted      int       `json:"submitted"`
		Completed      int       `json:"completed"`
		Failed         int       `json:"failed"`
		PartialFailure int       `json:"partial_failure"`
		Cancelled      int       `json:"cancelled"`
	}
	type stats struct {
		Window         string    `json:"window"`
		BucketSeconds  int       `json:"bucket_seconds"`
		From           time.Time `json:"from"`
		To             time.Time `json:"to"`
		Buckets        []bucket  `json:"buckets"`
		Totals         bucket    `json:"totals"`
		Active         int       `json:"active"`
		RecentFailures []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Target string `json:"target"`
			Tasks  []string
			Error  string `json:"error"`
		} `json:"recent_failures"`
	}
	for _, tc := range []struct {
		window  string
		buckets int
		width   int
	}{{"", 60, 60}, {"1h", 60, 60}, {"24h", 96, 900}} {
		path := "/jobs/stats?window=" + tc.window
		// The index follows the bucket by a watch: wait for the third end.
		var s stats
		for {
			s = dashboardJSON[stats](t, ctx, f, path)
			if s.Totals.Completed+s.Totals.Failed >= 3 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("GET %s: %+v", path, s.Totals)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if len(s.Buckets) != tc.buckets || s.BucketSeconds != tc.width {
			t.Errorf("GET %s: %d buckets of %ds, want %d of %ds", path, len(s.Buckets), s.BucketSeconds, tc.buckets, tc.width)
		}
		want := bucket{Submitted: 3, Completed: 2, Failed: 1}
		if s.Totals != want || s.Active != 0 {
			t.Errorf("GET %s: totals %+v active %d, want %+v and none active", path, s.Totals, s.Active, want)
		}
		// Each job is counted in the bucket its end falls in.
		width := time.Duration(s.BucketSeconds) * time.Second
		ends := map[int]bucket{}
		for _, j := range []*api.Job{ok1, ok2, bad} {
			i := int(j.FinishedAt.Sub(s.From) / width)
			b := ends[i]
			if j.Status == api.JobFailed {
				b.Failed++
			} else {
				b.Completed++
			}
			ends[i] = b
		}
		for i, b := range s.Buckets {
			if b.Completed != ends[i].Completed || b.Failed != ends[i].Failed {
				t.Errorf("GET %s: bucket %d (%s) has %+v, want %+v", path, i, b.Start, b, ends[i])
			}
		}
		if len(s.RecentFailures) != 1 || s.RecentFailures[0].ID != bad.ID || s.RecentFailures[0].Status != "failed" ||
			s.RecentFailures[0].Target != "all" || s.RecentFailures[0].Error == "" {
			t.Errorf("GET %s: recent failures %+v, want %s with its target and error", path, s.RecentFailures, bad.ID)
		}
	}

	res := dashboardGet(t, ctx, f, "/jobs/stats?window=7d") //nolint:bodyclose // closed when the test ends
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "window") {
		t.Errorf("GET /jobs/stats?window=7d: %d %s, want 400 naming the window", res.StatusCode, body)
	}
}
