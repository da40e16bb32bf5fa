package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// dashboardGet is this file's one way to call the API over raw HTTP (the
// dashboard's routes have no client methods), so a token can be added in
// one place.
func dashboardGet(t *testing.T, ctx context.Context, f *fleet.Fleet, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.APIURL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	res, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

func dashboardJSON[T any](t *testing.T, ctx context.Context, f *fleet.Fleet, path string) T {
	t.Helper()
	res := dashboardGet(t, ctx, f, path) //nolint:bodyclose // dashboardGet closes it when the test ends
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: decode: %v\n%s", path, err, body)
	}
	return v
}

// Node records are put in the registry directly: GET /fleet pages, filters
// and counts them on the server, and GET /nodes keeps its plain list.
func TestFleetRoutePagesFiltersAndCounts(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Controller: func(c *controller.Config) {
		c.NodeOfflineAfter = config.Duration(10 * time.Minute)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := fleettest.Bucket(t, ctx, f, api.BucketNodes)
	now := time.Now().UTC()
	admit, paris := map[string][]string{}, map[string][]string{}
	for i := range 25 {
		switch {
		case i < 10:
			admit[fmt.Sprintf("n-%02d", i)] = []string{"web.prod", "web.canary"}
		case i < 20:
			admit[fmt.Sprintf("n-%02d", i)] = []string{"db.prod"}
		default:
			paris[fmt.Sprintf("n-%02d", i)] = nil // enrolled through the paris relay
		}
	}
	// A secured controller takes a node's record only once it is admitted.
	if err := f.AdmitNodes(ctx, admit); err != nil {
		t.Fatal(err)
	}
	if err := f.AdmitSiteNodes(ctx, "paris", paris); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		n := api.NodeInfo{ID: fmt.Sprintf("n-%02d", i), Hostname: fmt.Sprintf("host-%02d", i), Status: api.NodeOnline,
			Backends: []string{"ping"}, Version: "v1", OnlineSince: now, LastSeen: now}
		switch {
		case i < 10:
			n.Groups = []string{"web.prod", "web.canary"} // counts once toward web
		case i < 20:
			n.Groups = []string{"db.prod"}
			n.Backends = append(n.Backends, "apt")
		}
		if i%5 == 0 {
			n.Status = api.NodeOffline
			n.Version = "v0"
		}
		b, _ := json.Marshal(n)
		if _, err := kv.Put(ctx, n.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "25 nodes in the registry", func() bool {
		return dashboardJSON[api.FleetPage](t, ctx, f, "/fleet?limit=1").Total == 25
	})

	p := dashboardJSON[api.FleetPage](t, ctx, f, "/fleet?limit=10&offset=20")
	if p.Total != 25 || p.Online != 20 || p.Offline != 5 || p.Matched != 25 || len(p.Nodes) != 5 || p.Nodes[0].ID != "n-20" {
		t.Fatalf("page 3 of 10: total %d online %d offline %d matched %d, %d nodes from %v", p.Total, p.Online, p.Offline, p.Matched, len(p.Nodes), ids(p.Nodes))
	}
	groups := map[string]api.GroupCount{}
	for _, g := range p.Groups {
		groups[g.Group] = g
	}
	for name, want := range map[string]api.GroupCount{
		"web":        {Group: "web", Total: 10, Online: 8, Offline: 2},
		"web.prod":   {Group: "web.prod", Total: 10, Online: 8, Offline: 2},
		"web.canary": {Group: "web.canary", Total: 10, Online: 8, Offline: 2},
		"db":         {Group: "db", Total: 10, Online: 8, Offline: 2},
	} {
		if groups[name] != want {
			t.Errorf("group %s: %+v, want %+v", name, groups[name], want)
		}
	}
	if !slices.Contains(p.Backends, api.NameCount{Name: "apt", Nodes: 10}) || !slices.Contains(p.Versions, api.NameCount{Name: "v0", Nodes: 5}) {
		t.Errorf("backends %v, versions %v", p.Backends, p.Versions)
	}
	if want := []api.NameCount{{Name: api.DefaultSite, Nodes: 20}, {Name: "paris", Nodes: 5}}; !slices.Equal(p.Sites, want) {
		t.Errorf("sites %v, want %v", p.Sites, want)
	}

	for _, tc := range []struct {
		query string
		want  int
		first string
	}{
		{"group=web", 10, "n-00"},
		{"group=db.prod&status=offline", 2, "n-10"},
		{"status=online&limit=1", 20, "n-01"},
		{"q=HOST-2", 5, "n-20"}, // host-20…24, case aside
		{"q=canary", 10, "n-00"},
		{"backend=apt&offset=9", 10, "n-19"},
		{"q=nothing-like-it", 0, ""},
		{"site=paris", 5, "n-20"},
		{"site=default&group=db", 10, "n-10"},
		{"site=paris&status=offline", 1, "n-20"},
		{"site=nowhere", 0, ""},
		{"q=PARIS", 5, "n-20"},
	} {
		p := dashboardJSON[api.FleetPage](t, ctx, f, "/fleet?"+tc.query)
		first := ""
		if len(p.Nodes) > 0 {
			first = p.Nodes[0].ID
		}
		if p.Matched != tc.want || first != tc.first || p.Total != 25 {
			t.Errorf("%s: matched %d first %q total %d, want %d %q 25", tc.query, p.Matched, first, p.Total, tc.want, tc.first)
		}
	}

	for query, field := range map[string]string{"limit=0": "limit", "limit=5000": "limit", "offset=-1": "offset", "status=asleep": "status", "site=pa.ris": "site"} {
		res := dashboardGet(t, ctx, f, "/fleet?"+query) //nolint:bodyclose // dashboardGet closes it when the test ends
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), field) {
			t.Errorf("%s: %d %s, want 400 naming %s", query, res.StatusCode, body, field)
		}
	}

	// GET /nodes answers as before: every node, a JSON array.
	nodes, err := f.Client().ListNodes(ctx)
	if err != nil || len(nodes) != 25 {
		t.Fatalf("GET /nodes: %d nodes, %v", len(nodes), err)
	}
}

func ids(nodes []api.NodeInfo) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

func TestJobsPageListsSummariesNewestFirst(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var submitted []string
	for i := range 3 {
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": fmt.Sprint(i)}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Client().WaitJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		submitted = append(submitted, j.ID)
		time.Sleep(5 * time.Millisecond) // distinct creation times
	}
	// A job recorded with its submitter, as a controller that checks tokens
	// stores it.
	old := time.Now().Add(-time.Hour).UTC()
	stored, _ := json.Marshal(map[string]any{"id": "byci", "status": "failed", "target": map[string]string{"scope": "group", "value": "web"},
		"tasks": []api.Phase{{Backend: "ping", Action: "sleep"}}, "submitted_by": "ci", "expected": []string{"a", "b", "c"},
		"created_at": old, "updated_at": old})
	if _, err := fleettest.Bucket(t, ctx, f, api.BucketJobs).Put(ctx, "byci", stored); err != nil {
		t.Fatal(err)
	}

	p := dashboardJSON[api.JobPage](t, ctx, f, "/jobs/page?limit=2")
	if p.Total != 4 || p.Matched != 4 || len(p.Jobs) != 2 || p.Jobs[0].ID != submitted[2] || p.Jobs[1].ID != submitted[1] {
		t.Fatalf("first page of 2: total %d matched %d jobs %v", p.Total, p.Matched, p.Jobs)
	}
	if h := p.Jobs[0]; h.Status != api.JobCompleted || h.Nodes != 2 || !slices.Equal(h.Tasks, []string{"ping.echo"}) ||
		h.Target.Scope != api.ScopeAll || h.StartedAt == nil || h.FinishedAt == nil {
		t.Errorf("summary %+v", h)
	}
	if p.Counts["completed"] != 3 || p.Counts["failed"] != 1 {
		t.Errorf("counts %v", p.Counts)
	}
	for query, want := range map[string][]string{
		"status=completed&offset=2": {submitted[0]},
		"submitter=ci":              {"byci"},
		"q=group:web":               {"byci"},
		"q=" + submitted[1]:         {submitted[1]},
		"status=running":            {},
	} {
		p := dashboardJSON[api.JobPage](t, ctx, f, "/jobs/page?"+query)
		var got []string
		for _, h := range p.Jobs {
			got = append(got, h.ID)
		}
		if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Errorf("%s: %v, want %v", query, got, want)
		}
	}
	if h := dashboardJSON[api.JobPage](t, ctx, f, "/jobs/page?submitter=ci").Jobs[0]; h.SubmittedBy != "ci" || h.Nodes != 3 {
		t.Errorf("stored submitter: %+v", h)
	}
	res := dashboardGet(t, ctx, f, "/jobs/page?limit=x") //nolint:bodyclose // dashboardGet closes it when the test ends
	if body, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "limit") {
		t.Errorf("limit=x: %d %s", res.StatusCode, body)
	}
}

type sseEvent struct {
	name string
	data string
}

// readEvents parses a server-sent event stream until it ends.
func readEvents(r io.Reader, out chan<- sseEvent) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				out <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// The events route sends the job, then what changes while it runs (each
// node's step going running, then success), then its end, and closes.
func TestJobEventsStreamARunToItsEnd(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if res := dashboardGet(t, ctx, f, "/job/nosuchjob/events"); res.StatusCode != http.StatusNotFound { //nolint:bodyclose // dashboardGet closes it when the test ends
		t.Errorf("unknown job: %d, want 404", res.StatusCode)
	}
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
		{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1s"}},
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "done"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res := dashboardGet(t, ctx, f, "/job/"+j.ID+"/events") //nolint:bodyclose // dashboardGet closes it when the test ends
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events := make(chan sseEvent)
	go readEvents(res.Body, events)

	var names []string
	seen := map[string]bool{} // "step/node/status"
	status := api.JobStatus("")
	for ev := range events {
		names = append(names, ev.name)
		switch ev.name {
		case "job":
			var job api.Job
			if err := json.Unmarshal([]byte(ev.data), &job); err != nil || job.ID != j.ID {
				t.Fatalf("job event: %v %s", err, ev.data)
			}
			status = job.Status
		case "update":
			var p struct {
				Job     *api.Job                           `json:"job"`
				Results map[int]map[string]*api.NodeResult `json:"results"`
			}
			if err := json.Unmarshal([]byte(ev.data), &p); err != nil {
				t.Fatalf("update event: %v %s", err, ev.data)
			}
			if p.Job != nil {
				if p.Job.Results != nil {
					t.Errorf("an update's job carries results again")
				}
				status = p.Job.Status
			}
			for step, nodes := range p.Results {
				for node, r := range nodes {
					seen[fmt.Sprintf("%d/%s/%s", step, node, r.Status)] = true
					if step == 1 && r.Status == api.StepSuccess && r.Output != "done" {
						t.Errorf("step 1 on %s: output %q", node, r.Output)
					}
				}
			}
		case "end":
			if !strings.Contains(ev.data, string(api.JobCompleted)) {
				t.Errorf("end event %s", ev.data)
			}
		}
	}
	if len(names) < 3 || names[0] != "job" || names[len(names)-1] != "end" {
		t.Fatalf("events %v: want job, updates, end", names)
	}
	if status != api.JobCompleted {
		t.Errorf("last status %q", status)
	}
	for _, want := range []string{"0/node-1/running", "0/node-2/running", "0/node-1/success", "1/node-2/success"} {
		if !seen[want] {
			t.Errorf("no update %s; saw %v", want, seen)
		}
	}
}
