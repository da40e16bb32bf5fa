package controller_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Real agents at two sites: node-2's enrollment says paris (as the hub's
// enrollment through paris's relay records it), and the agent learns it
// when it enrolls. A site target runs on that site's agents only, a group
// narrowed to a site on the group's agents there, and each job names its
// nodes' sites.
func TestSiteTargetsRunOnTheirSitesAgents(t *testing.T) {
	f := siteFleetWith(t, fleet.Options{Agents: 2, Groups: func(int) []string { return []string{"web"} }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := f.Client()
	// A site's node has rights only while its site is live.
	createSite(t, f, "paris")
	if err := f.WaitOnline(ctx, "node-1", "node-2"); err != nil {
		t.Fatal(err)
	}
	if err := f.StopAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	enr := fleettest.Bucket(t, ctx, f, api.BucketEnrollments)
	e, err := enr.Get(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	var rec api.Enrollment
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Site = "paris"
	b, _ := json.Marshal(rec)
	if _, err := enr.Put(ctx, "node-2", b); err != nil {
		t.Fatal(err)
	}
	// node-2 again, with its key: it enrolls, and hears it is at paris.
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.Groups, cfg.NATSURLs = "node-2", []string{"web"}, []string{f.NATSURL()}
	cfg.DataDir = filepath.Join(f.DataDir(), "agents", "node-2")
	cfg.Sandbox = filepath.Join(cfg.DataDir, "sandbox")
	cfg.CAFile, cfg.JoinTokenFile = f.CAFile(), f.JoinTokenFile()
	cfg.HeartbeatInterval = agent.Duration(300 * time.Millisecond)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer func() { stop(); <-a.Done() }()
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "node-2 online at paris", func() bool {
		n, err := cl.GetNode(ctx, "node-2")
		return err == nil && n.Status == api.NodeOnline && n.Site == "paris"
	})

	run := func(target string) *api.Job {
		t.Helper()
		tgt, err := api.ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		j, err := cl.SubmitJob(ctx, &api.JobSpec{Target: tgt, Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": target}}}})
		if err != nil {
			t.Fatalf("submit %s: %v", target, err)
		}
		done, err := cl.WaitJob(ctx, j.ID)
		if err != nil {
			t.Fatalf("wait %s: %v", target, err)
		}
		return done
	}
	for _, tc := range []struct {
		target, nodes string
		sites         map[string]string
	}{
		{"site:paris", "node-2", map[string]string{"node-2": "paris"}},
		{"group:web@paris", "node-2", map[string]string{"node-2": "paris"}},
		{"site:default", "node-1", nil},
		{"group:web@default", "node-1", nil},
		{"group:web", "node-1,node-2", map[string]string{"node-2": "paris"}},
		{"all", "node-1,node-2", map[string]string{"node-2": "paris"}},
	} {
		j := run(tc.target)
		var ran []string
		for _, id := range []string{"node-1", "node-2"} {
			if r := j.Results.Node(0, id); r != nil {
				if r.Status != api.StepSuccess || !strings.Contains(r.Output, tc.target) {
					t.Errorf("%s on %s: %s %q %q", tc.target, id, r.Status, r.Output, r.Error)
				}
				ran = append(ran, id)
			}
		}
		if j.Status != api.JobCompleted || strings.Join(j.Expected, ",") != tc.nodes || strings.Join(ran, ",") != tc.nodes {
			t.Errorf("%s: %s, expected %v, ran on %v; want completed on %s", tc.target, j.Status, j.Expected, ran, tc.nodes)
		}
		if !mapsEqual(j.NodeSites, tc.sites) {
			t.Errorf("%s: node sites %v, want %v", tc.target, j.NodeSites, tc.sites)
		}
	}
}
