package controller_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Nodes of other sites are in the registry with the site of their
// enrollment: GET /nodes?site= lists one site's, and site:NAME,
// group:G@SITE, node:ID@SITE and any@SITE resolve to that site's nodes
// only, with each node's site in the job. A site no node is in is refused
// as a group no node is in is.
func TestSitesInTargets(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1}) // node-1: web.prod, default site
	js := fleettest.JetStream(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := f.Client()
	if err := f.AdmitSiteNodes(ctx, "paris", map[string][]string{"par-1": {"web.prod"}, "par-2": {"db"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.AdmitSiteNodes(ctx, "lyon", map[string][]string{"lyo-1": {"web"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	// The nodes' own records name another site (or none): what counts is
	// their enrollment.
	records := map[string]api.NodeInfo{
		"par-1": {ID: "par-1", Site: "lyon", Status: api.NodeOnline},
		"par-2": {ID: "par-2", Status: api.NodeOnline},
		"lyo-1": {ID: "lyo-1", Site: "paris", Status: api.NodeOnline},
	}
	var mu sync.Mutex
	silent := map[string]bool{}
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for id, n := range records {
				mu.Lock()
				quiet := silent[id]
				mu.Unlock()
				if quiet {
					continue
				}
				n.LastSeen = time.Now().UTC()
				b, _ := json.Marshal(n)
				if _, err := kv.Put(ctx, id, b); err != nil {
					if ctx.Err() == nil {
						t.Errorf("heartbeat put %s: %v", id, err)
					}
					return
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-beating }()

	ids := func(site string) string {
		t.Helper()
		nodes, err := cl.ListSiteNodes(ctx, site)
		if err != nil {
			t.Fatalf("list nodes of %q: %v", site, err)
		}
		var out []string
		for _, n := range nodes {
			if site != "" && api.SiteOf(n.Site) != site {
				t.Errorf("GET /nodes?site=%s listed %s of site %q", site, n.ID, n.Site)
			}
			out = append(out, n.ID)
		}
		return strings.Join(out, ",")
	}
	waitFor(t, 10*time.Second, "the site nodes to be listed", func() bool { return ids("") == "lyo-1,node-1,par-1,par-2" })
	for site, want := range map[string]string{"paris": "par-1,par-2", "lyon": "lyo-1", "default": "node-1", "nowhere": ""} {
		if got := ids(site); got != want {
			t.Errorf("GET /nodes?site=%s = %q, want %q", site, got, want)
		}
	}
	if _, err := cl.ListSiteNodes(ctx, "pa.ris"); !api.IsStatus(err, 400) {
		t.Errorf("GET /nodes?site=pa.ris: %v, want a 400", err)
	}

	// Jobs that wait for an hour are resolved at submission (what the
	// answer shows) and never sent to the nodes, which are records only.
	later := func(target string) (*api.Job, error) {
		tgt, err := api.ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		return cl.SubmitJob(ctx, &api.JobSpec{Target: tgt, NotBefore: "1h",
			Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	}
	type want struct {
		expected, unreachable string
		sites                 map[string]string
	}
	check := func(target string, w want) {
		t.Helper()
		j, err := later(target)
		if err != nil {
			t.Errorf("submit %s: %v", target, err)
			return
		}
		if got := strings.Join(j.Expected, ","); got != w.expected {
			t.Errorf("%s expects %q, want %q", target, got, w.expected)
		}
		if got := strings.Join(j.Unreachable, ","); got != w.unreachable {
			t.Errorf("%s has unreachable %q, want %q", target, got, w.unreachable)
		}
		if !mapsEqual(j.NodeSites, w.sites) {
			t.Errorf("%s node sites %v, want %v", target, j.NodeSites, w.sites)
		}
		stored, err := cl.GetJob(ctx, j.ID)
		if err != nil || !mapsEqual(stored.NodeSites, w.sites) {
			t.Errorf("%s stored node sites %v (%v), want %v", target, stored.NodeSites, err, w.sites)
		}
	}
	paris := map[string]string{"par-1": "paris", "par-2": "paris"}
	check("site:paris", want{expected: "par-1,par-2", sites: paris})
	check("all@paris", want{expected: "par-1,par-2", sites: paris})
	check("group:web@paris", want{expected: "par-1", sites: map[string]string{"par-1": "paris"}})
	check("group:web", want{expected: "lyo-1,node-1,par-1", sites: map[string]string{"par-1": "paris", "lyo-1": "lyon"}})
	check("group:web@default", want{expected: "node-1"})
	check("site:default", want{expected: "node-1"})
	check("node:lyo-1@lyon", want{expected: "lyo-1", sites: map[string]string{"lyo-1": "lyon"}})
	check("any@lyon", want{expected: "lyo-1", sites: map[string]string{"lyo-1": "lyon"}})
	check("all", want{expected: "lyo-1,node-1,par-1,par-2", sites: map[string]string{"par-1": "paris", "par-2": "paris", "lyo-1": "lyon"}})

	// A site, or a node at a site, that matches nothing is refused like a
	// group no node is in.
	_, groupErr := later("group:nosuch")
	if !api.IsStatus(groupErr, 400) {
		t.Fatalf("a group no node is in: %v, want a 400", groupErr)
	}
	for _, target := range []string{"site:nowhere", "node:lyo-1@paris", "group:db@lyon", "any@nowhere"} {
		_, err := later(target)
		if !api.IsStatus(err, 400) || !strings.Contains(err.Error(), "matches no node") {
			t.Errorf("submit %s: %v, want the refusal of an empty target (%v)", target, err, groupErr)
		}
	}

	// The site's nodes fall silent (their link is cut): a site target
	// still names them, unreachable, as a group target names its
	// offline nodes.
	mu.Lock()
	silent["par-1"], silent["par-2"] = true, true
	mu.Unlock()
	waitFor(t, 15*time.Second, "paris's nodes to go offline", func() bool {
		nodes, err := cl.ListSiteNodes(ctx, "paris")
		return err == nil && len(nodes) == 2 && !slices.ContainsFunc(nodes, func(n api.NodeInfo) bool { return n.Status != api.NodeOffline })
	})
	check("site:paris", want{unreachable: "par-1,par-2", sites: paris})

	// A site broadcast runs: the hub's own agent hears site:default.
	j, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeSite, Value: api.DefaultSite},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "hello default"}}}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := cl.WaitJob(ctx, j.ID)
	if err != nil || done.Status != api.JobCompleted || strings.Join(done.Expected, ",") != "node-1" || done.NodeSites != nil {
		t.Fatalf("site:default job: %+v %v; want completed on node-1 with no node sites", done, err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
