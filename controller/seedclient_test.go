package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// seedClient is a client written from seed 000's text alone ("API
// Endpoints", "Example: GET /job/:id", the Job type): POST /job with the
// job as JSON, GET /job/:id, GET /jobs, POST /job/:id/cancel, no token. It
// knows the job statuses pending | running | completed | failed |
// cancelled and the per-node statuses of the example (success, failed,
// running, pending), and fails the test on any other status anywhere in an
// answer: what the seed's client would not understand.
type seedClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

// seedJob is seed 000's Job as a client reads it.
type seedJob struct {
	ID       string   `json:"id"`
	Status   string   `json:"status"`
	Step     int      `json:"step"`
	Expected []string `json:"expected"`
	Results  map[string]map[string]struct {
		Status   string `json:"status"`
		Duration string `json:"duration"`
	} `json:"results"`
}

var (
	seedJobStatuses  = []string{"pending", "running", "completed", "failed", "cancelled"}
	seedTerminal     = []string{"completed", "failed", "cancelled"}
	seedNodeStatuses = []string{"success", "failed", "running", "pending"}
)

// call sends one request and returns the status code and the body.
func (c *seedClient) call(method, path string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if resp.StatusCode < 300 {
		c.checkStatuses(method+" "+path, data)
	}
	return resp.StatusCode, data
}

// checkStatuses fails the test if any "status" anywhere in an answer is
// one seed 000 does not define.
func (c *seedClient) checkStatuses(what string, data []byte) {
	c.t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		c.t.Fatalf("%s: answer is not JSON: %v: %s", what, err, data)
	}
	known := append(slices.Clone(seedJobStatuses), seedNodeStatuses...)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "status" && !slices.Contains(known, s) {
					c.t.Errorf("%s: %s.status is %q, which seed 000 does not define", what, path, s)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
}

func (c *seedClient) decode(what string, data []byte) seedJob {
	c.t.Helper()
	var j seedJob
	if err := json.Unmarshal(data, &j); err != nil {
		c.t.Fatalf("%s: %v: %s", what, err, data)
	}
	if !slices.Contains(seedJobStatuses, j.Status) {
		c.t.Fatalf("%s: job status %q is not one of seed 000's", what, j.Status)
	}
	for step, nodes := range j.Results {
		for n, r := range nodes {
			if !slices.Contains(seedNodeStatuses, r.Status) {
				c.t.Fatalf("%s: step %s node %s: status %q is not one of seed 000's", what, step, n, r.Status)
			}
		}
	}
	return j
}

// submit posts a job and returns its id.
func (c *seedClient) submit(jobJSON string) string {
	c.t.Helper()
	code, data := c.call(http.MethodPost, "/job", []byte(jobJSON))
	if code < 200 || code > 299 {
		c.t.Fatalf("POST /job: %d %s", code, data)
	}
	j := c.decode("POST /job", data)
	if j.ID == "" {
		c.t.Fatalf("POST /job: no id in %s", data)
	}
	return j.ID
}

func (c *seedClient) get(id string) seedJob {
	c.t.Helper()
	code, data := c.call(http.MethodGet, "/job/"+id, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET /job/%s: %d %s", id, code, data)
	}
	return c.decode("GET /job/"+id, data)
}

// wait polls GET /job/:id until the status is one of seed 000's terminal
// ones, for at most a minute.
func (c *seedClient) wait(id string) seedJob {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		j := c.get(id)
		if slices.Contains(seedTerminal, j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("job %s still %s after a minute", id, j.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cancel posts POST /job/:id/cancel; the seed's client takes 200 as done.
func (c *seedClient) cancel(id string) seedJob {
	c.t.Helper()
	code, data := c.call(http.MethodPost, "/job/"+id+"/cancel", nil)
	if code != http.StatusOK {
		c.t.Fatalf("POST /job/%s/cancel: %d %s, want 200", id, code, data)
	}
	return c.decode("POST /job/"+id+"/cancel", data)
}

func (c *seedClient) list(query string) []seedJob {
	c.t.Helper()
	code, data := c.call(http.MethodGet, "/jobs"+query, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET /jobs%s: %d %s", query, code, data)
	}
	var js []seedJob
	if err := json.Unmarshal(data, &js); err != nil {
		c.t.Fatalf("GET /jobs: %v: %s", err, data)
	}
	return js
}

// nodeStatuses returns node → status at one step of a job as the seed's
// client reads it.
func (j seedJob) nodeStatuses(step int) map[string]string {
	out := map[string]string{}
	for n, r := range j.Results[fmt.Sprint(step)] {
		out[n] = r.Status
	}
	return out
}

// seedFleet is a lab controller (insecure, anonymous_role operator) with
// three agents: node-1 and node-2 in group web share a sandbox, node-3 in
// group db has its own, so a file written in the shared one fails there.
func seedFleet(t *testing.T) (*fleet.Fleet, string) {
	t.Helper()
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	f := fleettest.Start(t, fleet.Options{Agents: 3,
		Groups: func(i int) []string {
			if i == 2 {
				return []string{"db"}
			}
			return []string{"web"}
		},
		Agent: func(i int, c *agent.Config) {
			if i != 2 {
				c.Sandbox = shared
			}
		},
		Controller: func(c *controller.Config) {
			c.Insecure = true
			c.AnonymousRole = api.RoleOperator
		}})
	return f, shared
}

// TestSeedClientRunsUnchanged drives a lab controller with seed 000's own
// client: the job-file scenarios of the seed (flat barrier steps, a
// pipeline then a barrier, conditions with on_failure under fail-fast, a
// node failing under continue) with harmless backends for apt and systemd,
// and a cancel of a running job. Every answer stays within seed 000's
// statuses; a token client sees the same jobs in GRID's own.
func TestSeedClientRunsUnchanged(t *testing.T) {
	f, shared := seedFleet(t)
	sc := &seedClient{t: t, base: f.APIURL(), hc: &http.Client{Timeout: 30 * time.Second}}
	if !strings.HasPrefix(sc.base, "http://") {
		t.Fatalf("the lab controller serves %s, want plain HTTP", sc.base)
	}
	admin := f.Client()
	ctx := context.Background()
	file := func(name string) string { return filepath.Join(shared, name) }
	web := []string{"node-1", "node-2"}
	all := []string{"node-1", "node-2", "node-3"}

	t.Run("flat barrier steps", func(t *testing.T) {
		sc.t = t
		id := sc.submit(fmt.Sprintf(`{
  "target": {"scope": "group", "value": "web"},
  "tasks": [
    {"backend": "ping", "action": "echo", "params": {"message": "update"}},
    {"backend": "file", "action": "write", "params": {"path": %q, "content": "nginx\n"}},
    {"backend": "ping", "action": "echo", "params": {"message": "start nginx"}}
  ]
}`, file("nginx.conf")))
		j := sc.wait(id)
		if j.Status != "completed" {
			t.Fatalf("status %s, want completed", j.Status)
		}
		if slices.Sort(j.Expected); !slices.Equal(j.Expected, web) {
			t.Fatalf("expected %v, want %v", j.Expected, web)
		}
		for step := range 3 {
			if got := j.nodeStatuses(step); len(got) != 2 || got["node-1"] != "success" || got["node-2"] != "success" {
				t.Fatalf("step %d: %v, want success on both web nodes", step, got)
			}
		}
	})

	t.Run("pipeline then barrier", func(t *testing.T) {
		sc.t = t
		id := sc.submit(fmt.Sprintf(`{
  "target": {"scope": "group", "value": "web"},
  "tasks": [
    {"tasks": [
      {"backend": "ping", "action": "echo", "params": {"message": "update"}},
      {"backend": "file", "action": "write", "params": {"path": %q, "content": "nginx\n"}},
      {"backend": "test", "action": "succeed", "params": {"message": "enabled"}}
    ]},
    {"backend": "ping", "action": "echo", "params": {"message": "start nginx"}}
  ]
}`, file("pipeline.conf")))
		j := sc.wait(id)
		if j.Status != "completed" {
			t.Fatalf("status %s, want completed", j.Status)
		}
		for step := range 4 {
			if got := j.nodeStatuses(step); len(got) != 2 || got["node-1"] != "success" || got["node-2"] != "success" {
				t.Fatalf("step %d: %v, want success on both web nodes", step, got)
			}
		}
	})

	t.Run("on_failure under fail-fast", func(t *testing.T) {
		sc.t = t
		id := sc.submit(fmt.Sprintf(`{
  "target": {"scope": "all"},
  "strategy": "fail-fast",
  "tasks": [
    {"backend": "file", "action": "write", "params": {"path": %q, "content": "myapp\n"}},
    {"backend": "ping", "action": "echo", "params": {"message": "start myapp"}},
    {"condition": "on_failure", "tasks": [
      {"backend": "ping", "action": "echo", "params": {"message": "remove myapp"}}
    ]}
  ]
}`, file("myapp.conf")))
		j := sc.wait(id)
		if j.Status != "failed" {
			t.Fatalf("status %s, want failed (fail-fast triggered)", j.Status)
		}
		if got := j.nodeStatuses(0); got["node-3"] != "failed" || got["node-1"] != "success" || got["node-2"] != "success" {
			t.Fatalf("step 0: %v, want node-3 failed, the web nodes success", got)
		}
		if got := j.nodeStatuses(1); len(got) != 0 {
			t.Fatalf("step 1 ran after fail-fast: %v", got)
		}
		got := j.nodeStatuses(2)
		if len(got) == 0 {
			t.Fatalf("the on_failure phase did not run: results %v", j.Results)
		}
		for n, st := range got {
			if st != "success" {
				t.Fatalf("on_failure step on %s: %s, want success", n, st)
			}
		}
		tj, err := admin.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tj.Status != api.JobFailed {
			t.Fatalf("token client sees %s, want failed", tj.Status)
		}
	})

	t.Run("a node failing under continue", func(t *testing.T) {
		sc.t = t
		id := sc.submit(fmt.Sprintf(`{
  "target": {"scope": "all"},
  "strategy": "continue",
  "tasks": [
    {"backend": "file", "action": "write", "params": {"path": %q, "content": "v2\n"}},
    {"backend": "ping", "action": "echo", "params": {"message": "restart"}}
  ]
}`, file("app.conf")))
		j := sc.wait(id)
		if j.Status != "completed" {
			t.Fatalf("status %s, want completed: seed 000 fails a job only when fail-fast triggers", j.Status)
		}
		if slices.Sort(j.Expected); !slices.Equal(j.Expected, all) {
			t.Fatalf("expected %v, want %v", j.Expected, all)
		}
		if got := j.nodeStatuses(0); got["node-3"] != "failed" || got["node-1"] != "success" || got["node-2"] != "success" {
			t.Fatalf("step 0: %v, want node-3 failed, the web nodes success", got)
		}
		if got := j.nodeStatuses(1); len(got) != 2 || got["node-1"] != "success" || got["node-2"] != "success" {
			t.Fatalf("step 1: %v, want the web nodes only (node-3 dropped), success", got)
		}
		// A token client sees GRID's own status, and who submitted it.
		tj, err := admin.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tj.Status != api.JobPartialFailure || tj.SubmittedBy != "anonymous" {
			t.Fatalf("token client sees %s submitted by %q, want partial_failure by anonymous", tj.Status, tj.SubmittedBy)
		}
		// GRID's long poll, asked without a token, answers the same view.
		code, data := sc.call(http.MethodGet, "/job/"+id+"?wait=5s", nil)
		if lj := sc.decode("GET /job?wait", data); code != http.StatusOK || lj.Status != "completed" {
			t.Fatalf("long poll: %d %s, want 200 completed", code, lj.Status)
		}
		// In the list too, and its filter takes the seed's statuses.
		var found bool
		for _, lj := range sc.list("") {
			if lj.ID == id {
				found = lj.Status == "completed"
			}
		}
		if !found {
			t.Fatalf("GET /jobs does not list %s as completed", id)
		}
		found = false
		for _, lj := range sc.list("?status=completed") {
			found = found || lj.ID == id
		}
		if !found {
			t.Fatalf("GET /jobs?status=completed leaves out %s", id)
		}
	})

	t.Run("cancel a running job", func(t *testing.T) {
		sc.t = t
		id := sc.submit(`{
  "target": {"scope": "group", "value": "web"},
  "tasks": [{"backend": "ping", "action": "sleep", "params": {"duration": "60s"}}]
}`)
		deadline := time.Now().Add(30 * time.Second)
		for {
			j := sc.get(id)
			if j.Status == "running" && len(j.nodeStatuses(0)) > 0 {
				break
			}
			if slices.Contains(seedTerminal, j.Status) || time.Now().After(deadline) {
				t.Fatalf("job %s: %s, want running with its step out to the nodes", id, j.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		if j := sc.cancel(id); j.ID != id {
			t.Fatalf("cancel answered job %q, want %s", j.ID, id)
		}
		j := sc.wait(id)
		if j.Status != "cancelled" {
			t.Fatalf("status %s after cancel, want cancelled", j.Status)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("cancel took %s", d)
		}
		// Cancelling it again is refused (it is over), in the seed's words.
		code, data := sc.call(http.MethodPost, "/job/"+id+"/cancel", nil)
		if code != http.StatusConflict || !strings.Contains(string(data), "already cancelled") {
			t.Fatalf("second cancel: %d %s, want 409 already cancelled", code, data)
		}
	})

	t.Run("a token client is unchanged", func(t *testing.T) {
		sc.t = t
		j, err := admin.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web"},
			Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "60s"}}}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, f.APIURL()+"/job/"+j.ID+"/cancel", nil)
		req.Header.Set("Authorization", "Bearer "+f.AdminToken())
		resp, err := sc.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cancel with a token: %d, want 202", resp.StatusCode)
		}
		if j.SubmittedBy == "anonymous" {
			t.Fatalf("a token's job is recorded as anonymous")
		}
	})
}
