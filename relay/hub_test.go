package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// A real hub: a controller with a leaf port and one agent of its own; a
// site created through the API; its relay started from the credential;
// an agent that knows only the relay's address, the hub's CA and the join
// token enrolls through the relay into the site, comes online, and runs
// the jobs that target it, and only those.
func TestAgentEnrollsThroughTheRelayAndRunsJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 1, nil)
	r := startLinkedRelay(t, &cred, t.TempDir())

	cfg := siteAgentConfig(t, f, r, "p-1")
	cfg.Groups = []string{"web"}
	cfg.JoinTokenFile = f.JoinTokenFile()
	startSiteAgent(t, cfg)
	if err := f.WaitOnline(ctx, "p-1"); err != nil {
		t.Fatal(err)
	}
	nodes, err := f.Client().ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if want := map[string]string{"p-1": site, "node-1": api.DefaultSite}[n.ID]; api.SiteOf(n.Site) != want {
			t.Errorf("node %s at site %q, want %q", n.ID, n.Site, want)
		}
	}

	cases := []struct {
		target string
		nodes  []string
	}{
		{"{scope: site, value: " + site + "}", []string{"p-1"}},
		{"{scope: all}", []string{"node-1", "p-1"}},
		{"{scope: node, value: p-1}", []string{"p-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			spec, err := api.ParseJobSpec([]byte("target: " + tc.target + "\ntasks:\n  - {backend: ping, action: echo}\n"))
			if err != nil {
				t.Fatal(err)
			}
			j, err := f.Client().SubmitJob(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if j, err = f.Client().WaitJob(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			if j.Status != api.JobCompleted {
				t.Fatalf("job %s", j.Status)
			}
			for _, n := range tc.nodes {
				if r := j.Results.Node(0, n); r == nil || r.Status != api.StepSuccess {
					t.Errorf("node %s: result %+v, want success", n, r)
				}
			}
			if other := map[bool]string{true: "node-1", false: ""}[len(tc.nodes) == 1]; other != "" && j.Results.Node(0, other) != nil {
				t.Errorf("node %s ran a job that targeted %s", other, tc.target)
			}
		})
	}
}

// A revoked site's relay is cut off the hub and gets nothing from it
// after.
func TestRevokedSitesRelayIsCutOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 0, nil)
	r := startRelay(t, &cred, "")
	waitLinked(t, r)
	if _, err := f.Client().RevokeSite(ctx, site); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, 20*time.Millisecond, "the revoked site's link to go", func() bool {
		return f.Controller.NATSServer().NumLeafNodes() == 0 && !r.LeafConnected()
	})
	if err := r.RefreshRoster(ctx); err == nil {
		t.Fatal("a revoked site's relay still gets its roster")
	}
}

// An agent of the site waiting for approval comes online once an operator
// approves it: the hub relinks the site with the node's rights, the relay
// learns of the admission from its roster, and the agent's next question
// is answered "admitted".
func TestSiteAgentWaitsForApprovalThroughTheRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 0, func(c *controller.Config) { c.AutoAdmit = new(bool) })
	r := startLinkedRelay(t, &cred, "")

	cfg := siteAgentConfig(t, f, r, "p-2")
	cfg.JoinTokenFile = f.JoinTokenFile()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- a.Start(actx) }()
	t.Cleanup(func() {
		stopAgent()
		if err := <-started; err == nil {
			<-a.Done()
		}
	})
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "the site's agent pending", func() bool {
		es, err := f.Client().ListEnrollments(ctx, api.EnrollPending)
		return err == nil && len(es) == 1 && es[0].NodeID == "p-2" && es[0].Site == site
	})
	if _, err := f.Client().ApproveNode(ctx, "p-2"); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitOnline(ctx, "p-2"); err != nil {
		t.Fatal(err)
	}
}

// A join token scoped to a site enrolls agents through that site's relay
// only.
func TestSiteScopedJoinTokenThroughTheRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 0, nil)
	if _, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: "lyon"}); err != nil {
		t.Fatalf("create site: %v", err)
	}
	r := startLinkedRelay(t, &cred, "")

	cases := []struct {
		node, tokenSite string
		admitted        bool
	}{
		{"p-lyon", "lyon", false},
		{"p-paris", site, true},
	}
	for _, tc := range cases {
		t.Run(tc.node, func(t *testing.T) {
			tok, err := f.Client().CreateJoinToken(ctx, api.JoinTokenRequest{Site: tc.tokenSite, TTL: api.Duration(time.Hour), Uses: 1})
			if err != nil {
				t.Fatal(err)
			}
			cfg := siteAgentConfig(t, f, r, tc.node)
			cfg.JoinToken = tok.Token
			a, err := agent.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			actx, stopAgent := context.WithCancel(ctx)
			defer stopAgent()
			err = a.Start(actx)
			if err == nil {
				defer func() { stopAgent(); <-a.Done() }()
			}
			if (err == nil) != tc.admitted || (err != nil && !strings.Contains(err.Error(), "site "+tc.tokenSite+" only")) {
				t.Fatalf("start with a token of site %s through %s's relay: %v, want admitted %v", tc.tokenSite, site, err, tc.admitted)
			}
		})
	}
}
