package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Every GRID status becomes one of seed 000's: the job's among pending,
// running, completed, failed and cancelled; a node's step among success,
// failed, running and pending, or no entry where seed 000 would record
// none.
func TestSeedStatus(t *testing.T) {
	seedJob := []api.JobStatus{api.JobPending, api.JobRunning, api.JobCompleted, api.JobFailed, api.JobCancelled}
	seedStep := []string{api.StepSuccess, api.StepFailed, api.StepRunning, api.StepPending}
	jobs := []struct {
		in, want api.JobStatus
	}{
		{api.JobPending, api.JobPending},
		{api.JobWaiting, api.JobPending},
		{api.JobRunning, api.JobRunning},
		{api.JobCompleted, api.JobCompleted},
		{api.JobFailed, api.JobFailed},
		{api.JobCancelled, api.JobCancelled},
		// Seed 000 fails a job only when fail-fast triggers.
		{api.JobPartialFailure, api.JobCompleted},
		// A status added later is never shown as it is.
		{"paused", api.JobRunning},
	}
	for _, tc := range jobs {
		got, _, _ := seedStatus(tc.in, api.StepSuccess)
		if got != tc.want || !slices.Contains(seedJob, got) {
			t.Errorf("job %q: %q, want %q", tc.in, got, tc.want)
		}
	}
	steps := []struct {
		in, want string
		keep     bool
	}{
		{api.StepPending, api.StepPending, true},
		{api.StepDispatched, api.StepRunning, true},
		{api.StepRunning, api.StepRunning, true},
		{api.StepSuccess, api.StepSuccess, true},
		{api.StepFailed, api.StepFailed, true},
		{api.StepCancelled, api.StepFailed, true},
		{api.StepUnreachable, api.StepFailed, true},
		{api.StepSkipped, "", false},
		{api.StepNotStarted, "", false},
		{"throttled", api.StepFailed, true},
	}
	for _, tc := range steps {
		_, got, keep := seedStatus(api.JobRunning, tc.in)
		if got != tc.want || keep != tc.keep || (keep && !slices.Contains(seedStep, got)) {
			t.Errorf("step %q: %q (kept %v), want %q (kept %v)", tc.in, got, keep, tc.want, tc.keep)
		}
	}
	// The tables cover every status GRID has.
	for _, s := range []api.JobStatus{api.JobPending, api.JobWaiting, api.JobRunning, api.JobCompleted, api.JobFailed, api.JobCancelled, api.JobPartialFailure} {
		if _, ok := seedJobStatuses[s]; !ok {
			t.Errorf("job status %q has no seed mapping", s)
		}
	}
}

// seedView copies: the job a run or a token client sees keeps GRID's
// statuses and timelines.
func TestSeedViewLeavesJobAlone(t *testing.T) {
	now := time.Now()
	j := &api.Job{ID: "job-1", Status: api.JobPartialFailure, Results: api.JobResults{
		0: {"a": {Status: api.StepSuccess, Events: []api.Event{{Status: api.StepDispatched, Time: now}}},
			"b": {Status: api.StepFailed, Error: "boom"}},
		1: {"a": {Status: api.StepSuccess}, "b": {Status: api.StepSkipped}},
		2: {"b": {Status: api.StepNotStarted}},
	}}
	v := seedView(j)
	if v.Status != api.JobCompleted || v.Results[0]["a"].Events != nil || v.Results[0]["b"].Error != "boom" {
		t.Fatalf("seed view %+v", v)
	}
	if _, ok := v.Results[1]["b"]; ok {
		t.Errorf("skipped entry kept: %+v", v.Results[1])
	}
	if _, ok := v.Results[2]; ok {
		t.Errorf("a step with no entry left is kept: %+v", v.Results[2])
	}
	if j.Status != api.JobPartialFailure || j.Results[1]["b"].Status != api.StepSkipped || len(j.Results[0]["a"].Events) != 1 {
		t.Fatalf("seedView changed the job: %+v", j)
	}
	if jobView(principal{Name: "ci", Role: api.RoleOperator}, j) != j {
		t.Errorf("a token's view is not the job itself")
	}
	if jobView(principal{Name: anonymousName, Anonymous: true}, j).Status != api.JobCompleted {
		t.Errorf("the anonymous view is not the seed's")
	}
}

// anonymous_role needs insecure and is one of read, operator, admin.
func TestValidateAnonymousRole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		insecure bool
		role     api.Role
		want     string
	}{
		{"secure", false, api.RoleOperator, "needs insecure: true"},
		{"secure admin", false, api.RoleAdmin, "needs insecure: true"},
		{"metrics", true, api.RoleMetrics, "want read, operator or admin"},
		{"unknown", true, "root", "want read, operator or admin"},
		{"lab read", true, api.RoleRead, ""},
		{"lab operator", true, api.RoleOperator, ""},
		{"secure none", false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Insecure, cfg.AnonymousRole = tc.insecure, tc.role
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "anonymous_role") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming anonymous_role: %s", err, tc.want)
			}
		})
	}
}

// authenticate lets a request without a token in only on an insecure
// controller with anonymous_role, even if a config skipped Validate.
func TestAuthenticateAnonymous(t *testing.T) {
	c := &Controller{}
	c.cfg.AnonymousRole = api.RoleOperator
	if p, code, _ := c.authenticate("", "GET /jobs", api.RoleRead); code != 401 || p.Anonymous {
		t.Fatalf("secure controller with anonymous_role: %d %+v, want 401", code, p)
	}
	c.cfg.Insecure = true
	if p, code, msg := c.authenticate("", "GET /jobs", api.RoleRead); code != 0 || !p.Anonymous || p.Name != anonymousName || p.Role != api.RoleOperator {
		t.Fatalf("lab controller: %d %q %+v", code, msg, p)
	}
	if _, code, msg := c.authenticate("", "POST /token", api.RoleAdmin); code != 403 || !strings.Contains(msg, "anonymous_role") || !strings.Contains(msg, "needs role admin") {
		t.Fatalf("admin route: %d %q, want 403 naming anonymous_role and the role", code, msg)
	}
	c.cfg.AnonymousRole = ""
	if _, code, _ := c.authenticate("", "GET /jobs", api.RoleRead); code != 401 {
		t.Fatalf("lab controller without anonymous_role: %d, want 401", code)
	}
}
