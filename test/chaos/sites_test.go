package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// siteFleet is a hub of three clustered controllers with leaf ports and
// two sites, each with its relay process and agent processes that know
// only their relay. Site alpha's relay reaches each controller through a
// proxy of its own (its --hub URLs replace the credential's), so the test
// can cut alpha's link; site beta's relay uses the credential's URLs.
type siteFleet struct {
	dir     string
	specs   []*ctlSpec
	ctls    []*proc
	clients []*api.Client
	// dead marks the controllers killed so far.
	dead []bool

	alphaProxies []*tcpProxy
	relays       map[string]*proc
	agents       map[string]*proc
	// site and nodes of each agent.
	siteOf  map[string]string
	bySite  map[string][]string
	byGroup map[string][]string
}

const (
	siteAlpha = "alpha"
	siteBeta  = "beta"
)

func startSiteFleet(t *testing.T) *siteFleet {
	t.Helper()
	dir := t.TempDir()
	f := &siteFleet{dir: dir, specs: newCtlSpecs(t, dir, 3, 0), relays: map[string]*proc{}, agents: map[string]*proc{},
		siteOf: map[string]string{}, bySite: map[string][]string{}, byGroup: map[string][]string{}}
	leafPorts := make([]int, len(f.specs))
	for i, s := range f.specs {
		leafPorts[i] = freePort(t)
		// Nodes of a cut site must be given up on quickly; agents beat
		// every second.
		s.nodeOffline = "3s"
		s.extra = map[string]string{"leaf_addr": fmt.Sprintf("127.0.0.1:%d", leafPorts[i])}
	}
	startAt := time.Now()
	for _, s := range f.specs {
		f.ctls = append(f.ctls, startController(t, dir, s))
	}
	for _, s := range f.specs {
		waitReady(t, s, 90*time.Second)
		f.clients = append(f.clients, client(t, s))
	}
	f.dead = make([]bool, len(f.specs))
	t.Logf("hub of 3 ready in %s", time.Since(startAt).Round(time.Millisecond))

	// One agent of the hub's own, in group x like some of the sites'.
	var hubURLs []string
	for _, s := range f.specs {
		hubURLs = append(hubURLs, s.natsURL())
	}
	f.addAgent(t, "hub-1", api.DefaultSite, "x", hubURLs)

	for _, site := range []string{siteAlpha, siteBeta} {
		cred := filepath.Join(dir, site+".site.json")
		f.cli(t, 0, "site", "create", site, "--host", "127.0.0.1", "--out", cred)
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		args := []string{"site", "relay", "--credential", cred, "--listen", listen,
			"--data-dir", filepath.Join(dir, "relay-"+site+"-data"), "--log-format", "json"}
		if site == siteAlpha {
			for _, port := range leafPorts {
				p := newProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
				f.alphaProxies = append(f.alphaProxies, p)
				args = append(args, "--hub", "tls://"+p.ln.Addr().String())
			}
		}
		f.relays[site] = startProc(t, dir, "relay-"+site, args...)
		relayURL := []string{"tls://" + listen}
		f.addAgent(t, site[:1]+"-1", site, "x", relayURL)
		f.addAgent(t, site[:1]+"-2", site, "y", relayURL)
	}
	names := make([]string, 0, len(f.agents))
	for n := range f.agents {
		names = append(names, n)
	}
	waitNodes(t, f.clients[0], 60*time.Second, names...)
	t.Logf("hub, 2 relays and %d agents up in %s", len(names), time.Since(startAt).Round(time.Millisecond))
	return f
}

func (f *siteFleet) addAgent(t *testing.T, name, site, group string, urls []string) {
	t.Helper()
	f.agents[name] = startAgent(t, f.dir, name, []string{group}, urls, "1s")
	f.siteOf[name] = site
	f.bySite[site] = append(f.bySite[site], name)
	f.byGroup[group+"@"+site] = append(f.byGroup[group+"@"+site], name)
}

// cli runs the grid CLI against controller i as its admin. A command
// that fails is run again for a while: right after a controller's kill
// the survivors answer 503 until their streams have new leaders.
func (f *siteFleet) cli(t *testing.T, i int, args ...string) string {
	t.Helper()
	s := f.specs[i]
	tok, err := os.ReadFile(filepath.Join(s.dataDir, controller.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		cmd := exec.Command(gridBin, append([]string{"--addr", s.apiURL(), "--cacert", filepath.Join(s.dataDir, pki.CAFile)}, args...)...)
		cmd.Env = append(os.Environ(), "GRID_TOKEN="+strings.TrimSpace(string(tok)))
		out, err := cmd.CombinedOutput()
		if err == nil {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("grid %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("grid %s: %v: %s; trying again", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		time.Sleep(time.Second)
	}
}

// live is the client of a controller still running.
func (f *siteFleet) live() *api.Client {
	for i, c := range f.clients {
		if !f.dead[i] {
			return c
		}
	}
	return nil
}

// connectedAt is the controllers that hold a leaf connection of the site,
// as their GET /sites says.
func (f *siteFleet) connectedAt(site string) []int {
	var out []int
	for i, c := range f.clients {
		if f.dead[i] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ss, err := c.ListSites(ctx)
		cancel()
		if err != nil {
			continue
		}
		for _, s := range ss {
			if s.Name == site && s.Connected {
				out = append(out, i)
			}
		}
	}
	return out
}

func (f *siteFleet) cutAlpha(d time.Duration) {
	for _, p := range f.alphaProxies {
		p.cut(d)
	}
}

func (f *siteFleet) agentProcs() []*proc {
	out := make([]*proc, 0, len(f.agents))
	for _, p := range f.agents {
		out = append(out, p)
	}
	return out
}

func (f *siteFleet) submit(t *testing.T, target string, tasks ...api.Phase) *api.Job {
	t.Helper()
	tg, err := api.ParseTarget(target)
	if err != nil {
		t.Fatal(err)
	}
	spec := &api.JobSpec{Target: tg, Tasks: tasks, Strategy: api.StrategyContinue, Timeout: "2m"}
	// Right after a controller's kill the survivors' streams elect new
	// leaders: a submission may wait that out, so try each survivor in
	// turn for a while.
	deadline := time.Now().Add(45 * time.Second)
	for try := 0; ; try++ {
		i := f.liveIndex(try)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		j, err := f.clients[i].SubmitJob(ctx, spec)
		cancel()
		if err == nil {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit to %s: %v", target, err)
		}
		t.Logf("submit to %s through %s: %v; trying again", target, f.specs[i].name, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// liveIndex is the n-th (modulo) controller still running.
func (f *siteFleet) liveIndex(n int) int {
	var live []int
	for i := range f.clients {
		if !f.dead[i] {
			live = append(live, i)
		}
	}
	return live[n%len(live)]
}

func echo(msg string) api.Phase {
	return api.Phase{Backend: "ping", Action: "echo", Params: api.Params{"message": msg}}
}

// resultNodes are the nodes with a result for step 0, sorted.
func resultNodes(j *api.Job) []string {
	var out []string
	for n := range j.Results[0] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// nodeStatus is each node's status as a controller sees it.
func nodeStatus(t *testing.T, cl *api.Client) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n.ID] = n.Status
	}
	return out
}

// unreachableOn reports whether the job says it did not reach node: a
// result unreachable, or the node offline when the job resolved its target.
func unreachableOn(j *api.Job, node string) bool {
	if r := nodeResult(j, 0, node); r != nil {
		return r.Status == api.StepUnreachable
	}
	return slices.Contains(j.Unreachable, node)
}

// Two sites reach a hub of three controllers through their relays:
//
//	targets: site:alpha and group:x@beta run on exactly the site's nodes,
//	  whose records name their site;
//	cut: alpha's link is cut mid-job for longer than node_offline_after:
//	  the job ends with alpha's nodes unreachable before the link returns,
//	  beta runs a job meanwhile, alpha's nodes come back without enrolling
//	  again and never run the step given up on during the cut;
//	controller kill: the controller alpha's relay is linked to is killed
//	  with SIGKILL; the relay links to another and alpha runs jobs again;
//	revoke: grid site revoke beta cuts beta's relay off; its nodes go
//	  offline and a job to site:beta ends unreachable.
func TestSites(t *testing.T) {
	needChaos(t)
	start := time.Now()
	f := startSiteFleet(t)
	defer func() { t.Logf("sites chaos test: %s in all", time.Since(start).Round(time.Millisecond)) }()

	t.Run("targets", func(t *testing.T) {
		nodes, err := f.live().ListNodes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if want, ok := f.siteOf[n.ID]; ok && api.SiteOf(n.Site) != want {
				t.Errorf("node %s is at site %q, want %q", n.ID, api.SiteOf(n.Site), want)
			}
		}
		cases := []struct{ target, want string }{
			{"site:" + siteAlpha, "site:" + siteAlpha},
			{"group:x@" + siteBeta, "x@" + siteBeta},
			{"group:x", ""},
		}
		for _, tc := range cases {
			j := waitJob(t, f.live(), f.submit(t, tc.target, echo(tc.target)).ID, 30*time.Second)
			var want []string
			switch {
			case strings.HasPrefix(tc.want, "site:"):
				want = f.bySite[strings.TrimPrefix(tc.want, "site:")]
			case tc.want != "":
				want = f.byGroup[tc.want]
			default:
				// group:x without a site: every site's x nodes.
				for k, v := range f.byGroup {
					if strings.HasPrefix(k, "x@") {
						want = append(want, v...)
					}
				}
			}
			if got := resultNodes(j); j.Status != api.JobCompleted || !slices.Equal(got, sorted(want)) {
				t.Errorf("%s: job %s %s on %v, want completed on %v %s", tc.target, j.ID, j.Status, got, sorted(want), describeFailures(j))
			}
			// The job names each node's site.
			for _, n := range resultNodes(j) {
				if got := j.NodeSite(n); got != f.siteOf[n] {
					t.Errorf("%s: job %s names %s's site %q, want %q", tc.target, j.ID, n, got, f.siteOf[n])
				}
			}
			t.Logf("%s: %s on %v (sites %v)", tc.target, j.Status, resultNodes(j), j.NodeSites)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("cut", func(t *testing.T) {
		alpha := f.bySite[siteAlpha]
		running := f.submit(t, "site:"+siteAlpha, api.Phase{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "10s"}, Timeout: "60s"})
		waitStep(t, f.live(), running.ID, 0, alpha, api.StepRunning)
		const cutFor = 9 * time.Second
		cutAt := time.Now()
		f.cutAlpha(cutFor)
		healAt := cutAt.Add(cutFor)
		time.Sleep(200 * time.Millisecond)
		// A command alpha cannot hear: the hub must give up on it and the
		// agent must never run it once the link is back.
		missed := f.submit(t, "node:a-1@"+siteAlpha, echo("too late"))
		// Beta is not affected.
		onBeta := waitJob(t, f.live(), f.submit(t, "site:"+siteBeta, echo("during the cut")).ID, 20*time.Second)
		if onBeta.Status != api.JobCompleted || !slices.Equal(resultNodes(onBeta), sorted(f.bySite[siteBeta])) {
			t.Errorf("job on beta during alpha's cut: %s on %v %s", onBeta.Status, resultNodes(onBeta), describeFailures(onBeta))
		}
		if onBeta.FinishedAt == nil || !onBeta.FinishedAt.Before(healAt) {
			t.Errorf("job on beta did not finish during alpha's cut (finished %v, heal at %v)", onBeta.FinishedAt, healAt)
		}
		j1 := waitJob(t, f.live(), running.ID, 30*time.Second)
		j2 := waitJob(t, f.live(), missed.ID, 30*time.Second)
		for _, j := range []*api.Job{j1, j2} {
			t.Logf("job %s %s %s after the cut: %s", j.ID, j.Status, j.FinishedAt.Sub(cutAt).Round(time.Millisecond), describeFailures(j))
			if j.FinishedAt == nil || !j.FinishedAt.Before(healAt) {
				t.Errorf("job %s waited for alpha's link: finished %v, the link came back at %v", j.ID, j.FinishedAt, healAt)
			}
			if j.Status != api.JobFailed {
				t.Errorf("job %s on alpha during the cut: %s, want failed", j.ID, j.Status)
			}
		}
		for _, n := range alpha {
			if !unreachableOn(j1, n) {
				t.Errorf("job running across the cut: node %s %+v, want unreachable", n, nodeResult(j1, 0, n))
			}
		}
		if !unreachableOn(j2, "a-1") {
			t.Errorf("job sent during the cut: %+v, want unreachable", nodeResult(j2, 0, "a-1"))
		}
		st := nodeStatus(t, f.live())
		for _, n := range alpha {
			if time.Now().Before(healAt) && st[n] == api.NodeOnline {
				t.Errorf("node %s still online during the cut", n)
			}
		}
		for _, n := range f.bySite[siteBeta] {
			if st[n] != api.NodeOnline {
				t.Errorf("beta's node %s is %s during alpha's cut", n, st[n])
			}
		}

		// Healed: alpha's nodes come back without enrolling again and run
		// jobs.
		waitNodes(t, f.live(), 40*time.Second, alpha...)
		t.Logf("alpha's nodes online again %s after the heal", time.Since(healAt).Round(time.Millisecond))
		after := waitJob(t, f.live(), f.submit(t, "site:"+siteAlpha, echo("after the cut")).ID, 30*time.Second)
		if after.Status != api.JobCompleted || !slices.Equal(resultNodes(after), sorted(alpha)) {
			t.Errorf("job on alpha after the heal: %s on %v %s", after.Status, resultNodes(after), describeFailures(after))
		}
		for _, n := range alpha {
			admitted := 0
			for _, l := range f.agents[n].logLines(t) {
				if l["msg"] == "agent admitted" {
					admitted++
				}
			}
			if admitted != 1 || !f.agents[n].running() {
				t.Errorf("agent %s: admitted %d times, running %v; want once, still running", n, admitted, f.agents[n].running())
			}
		}
		time.Sleep(3 * time.Second) // anything late would have arrived by now
		runs, perStep := taskRuns(t, f.agentProcs())
		if n := perStep[taskKey{job: missed.ID, step: 0, node: "a-1"}]; n != 0 {
			t.Errorf("a-1 ran the step the hub gave up on during the cut (%d times)", n)
		}
		for k, n := range runs {
			if n > 1 {
				t.Errorf("%+v ran %d times", k, n)
			}
		}
		accepts := 0
		for _, p := range f.alphaProxies {
			accepts += p.connections()
		}
		if accepts < 2 {
			t.Errorf("alpha's relay did not link again through the proxies (%d connections in all)", accepts)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("controller kill", func(t *testing.T) {
		var at []int
		waitFor(t, 20*time.Second, "alpha's relay linked to one controller", func() bool {
			at = f.connectedAt(siteAlpha)
			return len(at) == 1
		})
		victim := at[0]
		f.ctls[victim].kill9()
		f.dead[victim] = true
		killedAt := time.Now()
		waitFor(t, 30*time.Second, "alpha's relay linked to another controller", func() bool {
			at = f.connectedAt(siteAlpha)
			return len(at) == 1
		})
		t.Logf("killed %s; alpha's relay linked to %s %s later", f.specs[victim].name, f.specs[at[0]].name, time.Since(killedAt).Round(time.Millisecond))
		waitNodes(t, f.live(), 30*time.Second, f.bySite[siteAlpha]...)
		j := waitJob(t, f.live(), f.submit(t, "site:"+siteAlpha, echo("after the kill")).ID, 30*time.Second)
		if j.Status != api.JobCompleted || !slices.Equal(resultNodes(j), sorted(f.bySite[siteAlpha])) {
			t.Errorf("job on alpha after its controller's kill: %s on %v %s", j.Status, resultNodes(j), describeFailures(j))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("revoke", func(t *testing.T) {
		live := slices.Index(f.dead, false)
		waitFor(t, 20*time.Second, "beta's relay linked", func() bool { return len(f.connectedAt(siteBeta)) == 1 })
		f.cli(t, live, "site", "revoke", siteBeta)
		revokedAt := time.Now()
		waitFor(t, 20*time.Second, "beta's relay cut off", func() bool { return len(f.connectedAt(siteBeta)) == 0 })
		j := waitJob(t, f.live(), f.submit(t, "site:"+siteBeta, echo("after the revoke")).ID, 30*time.Second)
		for _, n := range f.bySite[siteBeta] {
			if !unreachableOn(j, n) {
				t.Errorf("job on revoked beta: node %s %+v, want unreachable", n, nodeResult(j, 0, n))
			}
		}
		if j.Status == api.JobCompleted {
			t.Errorf("job on revoked beta completed")
		}
		waitFor(t, 20*time.Second, "beta's nodes offline", func() bool {
			st := nodeStatus(t, f.live())
			for _, n := range f.bySite[siteBeta] {
				if st[n] == api.NodeOnline {
					return false
				}
			}
			return st != nil
		})
		t.Logf("beta revoked: its job %s %s, its nodes offline %s after the revoke", j.ID, j.Status, time.Since(revokedAt).Round(time.Millisecond))
		// The relay stays refused.
		time.Sleep(2 * time.Second)
		if at := f.connectedAt(siteBeta); len(at) != 0 {
			t.Errorf("revoked beta's relay linked again to %v", at)
		}
		// Alpha is unaffected.
		a := waitJob(t, f.live(), f.submit(t, "site:"+siteAlpha, echo("after beta's revoke")).ID, 30*time.Second)
		if a.Status != api.JobCompleted {
			t.Errorf("job on alpha after beta's revoke: %s %s", a.Status, describeFailures(a))
		}
	})
}
