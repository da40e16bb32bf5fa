package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// TestRetentionRemovesFinishedJobs: with a short job_retention a finished
// job is removed from the bucket; a running one stays.
func TestRetentionRemovesFinishedJobs(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) {
		c.JobRetention = config.Duration(time.Second)
	}})
	ctx := context.Background()
	done := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]")
	long := submit(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: sleep, params: {duration: 20s}}]")
	waitFor(t, 15*time.Second, "the finished job removed", func() bool {
		_, err := f.Client().GetJob(ctx, done.ID)
		return api.IsStatus(err, 404)
	})
	if j, err := f.Client().GetJob(ctx, long.ID); err != nil || j.Status.Terminal() {
		t.Fatalf("running job: %+v %v", j, err)
	}
	st, err := f.Client().Status(ctx)
	if err != nil || st.Jobs.Total != 1 || st.Jobs.StatusCounts["completed"] != 0 {
		t.Fatalf("status after retention: %+v %v", st.Jobs, err)
	}
	if _, err := f.Client().CancelJob(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
}

// TestListJobsPages: GET /jobs pages with limit and cursor and filters by
// status; /status counts match.
func TestListJobsPages(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	var ids []string
	for range 5 {
		ids = append(ids, submitWait(t, f, "target: {scope: all}\ntasks: [{backend: ping, action: echo}]").ID)
	}
	failed := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: fail}]")
	ids = append(ids, failed.ID)

	var seen []string
	q := api.JobQuery{Limit: 2}
	for page := 0; ; page++ {
		jobs, err := f.Client().ListJobsPage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) > 2 {
			t.Fatalf("page of %d jobs with limit 2", len(jobs))
		}
		for _, j := range jobs {
			seen = append(seen, j.ID)
		}
		if len(jobs) < 2 {
			break
		}
		q.Cursor = api.JobCursor(&jobs[len(jobs)-1])
		if page > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("paged through %d jobs, want %d: %v", len(seen), len(ids), seen)
	}
	for i := range ids {
		if seen[i] != ids[len(ids)-1-i] {
			t.Fatalf("order %v, want newest first of %v", seen, ids)
		}
	}
	only, err := f.Client().ListJobsPage(ctx, api.JobQuery{Status: api.JobFailed})
	if err != nil || len(only) != 1 || only[0].ID != failed.ID {
		t.Fatalf("status filter: %v %v", only, err)
	}
	none, err := f.Client().ListJobsPage(ctx, api.JobQuery{SubmittedBy: "nobody"})
	if err != nil || len(none) != 0 {
		t.Fatalf("submitted_by filter: %v %v", none, err)
	}
	if _, err := f.Client().ListJobsPage(ctx, api.JobQuery{Limit: 5000}); !api.IsStatus(err, 400) {
		t.Fatalf("limit 5000: %v, want a 400", err)
	}
	if _, err := f.Client().ListJobsPage(ctx, api.JobQuery{Status: "done"}); !api.IsStatus(err, 400) {
		t.Fatalf("status done: %v, want a 400", err)
	}
	st, err := f.Client().Status(ctx)
	if err != nil || st.Jobs.Total != 6 || st.Jobs.StatusCounts["completed"] != 5 || st.Jobs.StatusCounts["failed"] != 1 ||
		st.Jobs.OperationCounts["ping.echo"] != 5 {
		t.Fatalf("status %+v %v", st.Jobs, err)
	}
}
