package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/relay"
)

// Site is a site of the bench: its name and the relay its agents connect
// to.
type Site struct {
	Name string
	// URL is the relay's agent port (tls://127.0.0.1:PORT).
	URL string
}

// StartSites creates n sites through the API and runs a relay for each —
// a process (this binary's "grid site relay", from the credential written
// to the bench's data dir), or with inProcess a relay.Relay in this
// process — and returns once every relay is linked to the embedded
// controller. Needs Options.Sites.
func (e *Env) StartSites(ctx context.Context, n int, inProcess bool) ([]Site, error) {
	if e.fleet == nil || !e.opts.Sites {
		return nil, errors.New("sites need the embedded controller with its leaf port (Options.Sites)")
	}
	self, err := os.Executable()
	if err != nil && !inProcess {
		return nil, fmt.Errorf("relay binary: %w", err)
	}
	dir := filepath.Join(e.dir, "sites")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var sites []Site
	for i := range n {
		name := fmt.Sprintf("bench-%s-s%d", e.runID, i+1)
		cred, err := e.client.CreateSite(ctx, api.SiteCreateRequest{Name: name, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			return nil, fmt.Errorf("create site %s: %w", name, err)
		}
		if inProcess {
			s, err := e.startRelay(ctx, &cred)
			if err != nil {
				return nil, err
			}
			sites = append(sites, s)
			continue
		}
		b, err := json.Marshal(cred)
		if err != nil {
			return nil, err
		}
		credFile := filepath.Join(dir, name+".json")
		if err := os.WriteFile(credFile, b, 0o600); err != nil {
			return nil, err
		}
		port, err := freeLoopbackPort()
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		p, _, err := e.startProc(self, "relay-"+name, filepath.Join(dir, name+".log"), nil,
			"site", "relay", "--credential", credFile, "--listen", listen, "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		e.relays = append(e.relays, p)
		e.mu.Unlock()
		sites = append(sites, Site{Name: name, URL: "tls://" + listen})
	}
	for _, s := range sites {
		deadline := time.After(30 * time.Second)
		for {
			if _, ok := e.linkOf(s.Name); ok {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-deadline:
				return nil, fmt.Errorf("site %s: its relay did not link to the controller within 30s (a relay process logs to %s)", s.Name, filepath.Join(dir, s.Name+".log"))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return sites, nil
}

// startRelay runs a site's relay in this process.
func (e *Env) startRelay(ctx context.Context, cred *api.SiteCredential) (Site, error) {
	cfg := relay.DefaultConfig()
	cfg.Credential, cfg.Listen, cfg.Logger = cred, "127.0.0.1:0", e.log
	r, err := relay.New(cfg)
	if err != nil {
		return Site{}, fmt.Errorf("relay of site %s: %w", cred.Site, err)
	}
	if err := r.Start(ctx); err != nil {
		return Site{}, fmt.Errorf("relay of site %s: %w", cred.Site, err)
	}
	e.mu.Lock()
	e.inRelays = append(e.inRelays, r)
	e.mu.Unlock()
	return Site{Name: cred.Site, URL: r.URL()}, nil
}

func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (e *Env) stopRelays() {
	e.mu.Lock()
	ps, rs := e.relays, e.inRelays
	e.relays, e.inRelays = nil, nil
	e.mu.Unlock()
	stopProcs(ps, 10*time.Second)
	for _, r := range rs {
		r.Close()
	}
}

// LinkCounters are what crossed a site's link, as the hub's end of the
// leaf connection counts it: In from the site, Out to it.
type LinkCounters struct {
	// ID is the leaf connection's: counters of two connections do not
	// subtract.
	ID                uint64
	InMsgs, OutMsgs   int64
	InBytes, OutBytes int64
}

func (c LinkCounters) sub(o LinkCounters) LinkCounters {
	return LinkCounters{InMsgs: c.InMsgs - o.InMsgs, OutMsgs: c.OutMsgs - o.OutMsgs,
		InBytes: c.InBytes - o.InBytes, OutBytes: c.OutBytes - o.OutBytes}
}

// linkOf reads the site's leaf connection's counters on the embedded
// controller's server; ok is false while the relay is not linked.
func (e *Env) linkOf(site string) (LinkCounters, bool) {
	lz, err := e.fleet.Controller.NATSServer().Leafz(&server.LeafzOptions{})
	if err != nil {
		return LinkCounters{}, false
	}
	for _, l := range lz.Leafs {
		if relay.IsServerOf(l.Name, site) {
			return LinkCounters{ID: l.ID, InMsgs: l.InMsgs, OutMsgs: l.OutMsgs, InBytes: l.InBytes, OutBytes: l.OutBytes}, true
		}
	}
	return LinkCounters{}, false
}

// LinkResult is what crossed one site's link during a one-step broadcast
// to its agents, and during an idle window as long, for comparison.
type LinkResult struct {
	Agents int
	Job    LinkCounters
	Idle   LinkCounters
	Window time.Duration
}

// SiteBroadcast submits a one-step ping echo to every node of the site
// (target site:NAME), waits for it and checks that every one of nodes
// answered; it reads the site link's counters before and after, then
// again over an idle window of the same length, so that what the agents
// send anyway (heartbeats, the relay's roster requests) can be told apart.
//
// The hub closes a site's link whenever the site's nodes change (and the
// relay links again at once), so a measurement across two connections is
// taken again, a few times at most.
func (e *Env) SiteBroadcast(ctx context.Context, site string, nodes []string) (LinkResult, error) {
	for try := 0; ; try++ {
		res, err := e.siteBroadcast(ctx, site, nodes)
		if !errors.Is(err, errLinkChanged) || try == 4 {
			return res, err
		}
		e.printf("  the site's link was renewed during the measurement; again")
		time.Sleep(2 * time.Second)
	}
}

var errLinkChanged = errors.New("the site's link was renewed during the measurement")

func (e *Env) siteBroadcast(ctx context.Context, site string, nodes []string) (LinkResult, error) {
	res := LinkResult{Agents: len(nodes)}
	c0, ok := e.linkOf(site)
	if !ok {
		return res, fmt.Errorf("site %s: its relay is not linked", site)
	}
	start := time.Now()
	j, err := e.client.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeSite, Value: site},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": echoMessage}}}, Timeout: "10m"})
	if err != nil {
		return res, fmt.Errorf("submit: %w", err)
	}
	done, err := e.client.WaitJob(ctx, j.ID)
	if err != nil {
		return res, fmt.Errorf("wait for job %s: %w", j.ID, err)
	}
	// The last result's answer (the hub's "stored") is on its way back
	// when the job completes; let it cross before reading.
	time.Sleep(100 * time.Millisecond)
	c1, ok1 := e.linkOf(site)
	res.Window = time.Since(start)
	if done.Status != api.JobCompleted {
		return res, fmt.Errorf("job %s on site %s ended %s: %s", j.ID, site, done.Status, done.Error)
	}
	if err := e.VerifyStored(ctx, j.ID, nodes); err != nil {
		return res, err
	}
	time.Sleep(res.Window)
	c2, ok2 := e.linkOf(site)
	if !ok1 || !ok2 || c1.ID != c0.ID || c2.ID != c0.ID {
		return res, errLinkChanged
	}
	res.Job, res.Idle = c1.sub(c0), c2.sub(c1)
	return res, nil
}

// StopAgents stops every agent, in this process and as processes, and
// forgets their names: the agents started next are the only ones Names
// and Fanout count.
func (e *Env) StopAgents() {
	e.stopAgentProcs()
	e.cancelAgents()
	e.mu.Lock()
	agents := e.agents
	e.retired += len(e.names)
	e.agents, e.names = nil, nil
	e.mu.Unlock()
	deadline := time.After(60 * time.Second)
wait:
	for _, a := range agents {
		select {
		case <-a.Done():
		case <-deadline:
			break wait
		}
	}
	e.agentsCtx, e.cancelAgents = context.WithCancel(context.Background())
}
