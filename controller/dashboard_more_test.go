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
