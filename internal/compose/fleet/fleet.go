// Package fleet starts a controller and agents in one process: the local
// fleet behind `grid dev` and every integration test.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// Options shape a fleet.
type Options struct {
	// Agents is how many agents to start (named node-1, node-2, …).
	Agents int
	// Groups gives agent i (from 0) its groups; nil uses DefaultGroups.
	Groups func(i int) []string
	// DataDir holds the controller's store and one sandbox per agent; empty
	// makes a temporary directory that Stop removes.
	DataDir string
	// APIAddr is the controller's API address ("127.0.0.1:0" picks a port).
	APIAddr string
	// Logger receives every component's logs; nil discards them.
	Logger *slog.Logger
	// Controller and Agent adjust the configs before start.
	Controller func(*controller.Config)
	Agent      func(i int, cfg *agent.Config)
}

// DefaultGroups spreads agents over web and db, both under prod
// (web.prod, db.prod), so group:web, group:db and group:web.prod all select
// something.
func DefaultGroups(i int) []string {
	if i%2 == 0 {
		return []string{"web.prod"}
	}
	return []string{"db.prod"}
}

// DevCheckOnly are the backends a dev fleet's agents run only in check
// mode: they act on the real host, so there they report what they would
// change and change nothing.
var DevCheckOnly = []string{"apt", "package", "rke2", "systemd", "user", "firewall"}

// DevAgent configures an agent of grid dev so that it never changes the
// host: apt, package, rke2, systemd, user and firewall run in check mode
// only; file, config and net's resolver file stay in the agent's sandbox
// (every fleet agent has one); dangerous actions stay off (no allow list)
// and exec has no programs.
func DevAgent(_ int, cfg *agent.Config) {
	cfg.CheckOnly = DevCheckOnly
	cfg.Allow = nil
	cfg.Backends.Programs = nil
}

// Fleet is a running controller with its agents.
type Fleet struct {
	Controller *controller.Controller

	opts    Options
	dataDir string
	tempDir bool
	log     *slog.Logger
	client  *api.Client
	// ctlDataDir is the controller's data dir (CA, join token).
	ctlDataDir string

	mu     sync.Mutex
	agents map[string]*member
	next   int
}

type member struct {
	agent  *agent.Agent
	cancel context.CancelFunc
}

// Start brings up the controller and the agents and returns once every agent
// is online. The fleet stops when ctx ends; Wait reports when it has.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	f := &Fleet{opts: opts, agents: map[string]*member{}, log: opts.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.dataDir = opts.DataDir
	if f.dataDir == "" {
		dir, err := os.MkdirTemp("", "grid-dev-")
		if err != nil {
			return nil, fmt.Errorf("fleet data dir: %w", err)
		}
		f.dataDir, f.tempDir = dir, true
	}
	cfg := controller.DefaultConfig()
	cfg.DataDir = filepath.Join(f.dataDir, "controller")
	cfg.NATSAddr = "127.0.0.1:0"
	cfg.APIAddr = "127.0.0.1:0"
	if opts.APIAddr != "" {
		cfg.APIAddr = opts.APIAddr
	}
	cfg.Logger = f.log
	if opts.Controller != nil {
		opts.Controller(&cfg)
	}
	f.ctlDataDir = cfg.DataDir
	ctl, err := controller.New(cfg)
	if err != nil {
		return nil, err
	}
	// The controller outlives the agents so they can deregister through it.
	ctlCtx, stopCtl := context.WithCancel(context.Background())
	if err := ctl.Start(ctlCtx); err != nil {
		stopCtl()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		members := make([]*member, 0, len(f.agents))
		for _, m := range f.agents {
			members = append(members, m)
		}
		f.mu.Unlock()
		deadline := time.After(15 * time.Second)
		for _, m := range members {
			select {
			case <-m.agent.Done():
			case <-deadline:
			}
		}
		stopCtl()
	}()
	f.Controller = ctl
	f.client, err = api.NewClient(f.ClientConfig(ctl.AdminToken()))
	if err != nil {
		stopCtl()
		return nil, err
	}
	var names []string
	for range opts.Agents {
		a, err := f.AddAgent(ctx, nil)
		if err != nil {
			return nil, err
		}
		names = append(names, a.ID())
	}
	if err := f.WaitOnline(ctx, names...); err != nil {
		return nil, err
	}
	go func() {
		<-ctl.Done()
		if f.tempDir {
			_ = os.RemoveAll(f.dataDir)
		}
	}()
	return f, nil
}

// CAFile is the controller's CA certificate, which agents trust for the
// bus and clients for the HTTPS API (one CA for both).
func (f *Fleet) CAFile() string { return filepath.Join(f.ctlDataDir, pki.CAFile) }

// ClientConfig is an API client config for the controller that sends tok
// and trusts the controller's CA (nothing to trust when the API is plain
// HTTP, insecure).
func (f *Fleet) ClientConfig(tok string) api.ClientConfig { return f.Controller.APIClientConfig(tok) }

// HTTPClient is an *http.Client that trusts the controller's CA, for
// tests that call the API without api.Client. It sends no token.
func (f *Fleet) HTTPClient() *http.Client {
	hc, err := f.Controller.APIHTTPClient()
	if err != nil {
		// The CA file was readable a moment ago, at start; a client that
		// trusts nothing extra fails closed.
		return &http.Client{Timeout: 30 * time.Second}
	}
	return hc
}

// JoinTokenFile holds the controller's agent join token.
func (f *Fleet) JoinTokenFile() string { return filepath.Join(f.ctlDataDir, pki.JoinTokenFile) }

// NATSOptions connect to the fleet's NATS as its controller does (see
// controller.NATSOptions); tests use them to look at or attack the bus.
func (f *Fleet) NATSOptions() []nats.Option { return f.Controller.NATSOptions() }

// APIURL is the controller's API base URL.
func (f *Fleet) APIURL() string { return f.Controller.APIURL() }

// NATSURL is the embedded NATS server's client URL.
func (f *Fleet) NATSURL() string { return f.Controller.NATSURL() }

// Client is an API client for the controller, with the admin token.
func (f *Fleet) Client() *api.Client { return f.client }

// AdminToken is the controller's admin API token (also in its data dir,
// file controller.AdminTokenFile).
func (f *Fleet) AdminToken() string { return f.Controller.AdminToken() }

// ClientWithToken is an API client for the controller that sends tok.
func (f *Fleet) ClientWithToken(tok string) *api.Client {
	c, _ := api.NewClient(f.ClientConfig(tok))
	return c
}

// DataDir is where the fleet keeps its state.
func (f *Fleet) DataDir() string { return f.dataDir }

// Done is closed once the controller has stopped.
func (f *Fleet) Done() <-chan struct{} { return f.Controller.Done() }

// AddAgent starts one more agent. groups nil uses Options.Groups (or
// DefaultGroups) for its index. It runs until ctx ends or StopAgent.
func (f *Fleet) AddAgent(ctx context.Context, groups []string) (*agent.Agent, error) {
	f.mu.Lock()
	i := f.next
	f.next++
	f.mu.Unlock()
	if groups == nil {
		gf := f.opts.Groups
		if gf == nil {
			gf = DefaultGroups
		}
		groups = gf(i)
	}
	name := fmt.Sprintf("node-%d", i+1)
	cfg := agent.DefaultConfig()
	cfg.Name = name
	cfg.Groups = groups
	cfg.NATSURLs = []string{f.NATSURL()}
	cfg.DataDir = filepath.Join(f.dataDir, "agents", name)
	// File-touching backends stay inside the agent's own directory.
	cfg.Sandbox = filepath.Join(cfg.DataDir, "sandbox")
	cfg.Logger = f.log
	// A secured controller admits its own fleet: its CA and join token.
	if f.Controller.NATSOptions() != nil {
		cfg.CAFile, cfg.JoinTokenFile = f.CAFile(), f.JoinTokenFile()
	}
	if f.opts.Agent != nil {
		f.opts.Agent(i, &cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	if err := a.Start(actx); err != nil {
		cancel()
		return nil, fmt.Errorf("start agent %s: %w", name, err)
	}
	f.mu.Lock()
	f.agents[a.ID()] = &member{agent: a, cancel: cancel}
	f.mu.Unlock()
	return a, nil
}

// Agent returns a running agent by name.
func (f *Fleet) Agent(name string) *agent.Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.agents[name]; m != nil {
		return m.agent
	}
	return nil
}

// StopAgent shuts an agent down gracefully and waits for it.
func (f *Fleet) StopAgent(name string) error {
	m, err := f.takeAgent(name)
	if err != nil {
		return err
	}
	m.cancel()
	<-m.agent.Done()
	return nil
}

// KillAgent drops an agent's connection without deregistering, as a crash
// would.
func (f *Fleet) KillAgent(name string) error {
	m, err := f.takeAgent(name)
	if err != nil {
		return err
	}
	m.agent.Kill()
	m.cancel()
	return nil
}

// takeAgent removes a running agent from the fleet and returns it.
func (f *Fleet) takeAgent(name string) (*member, error) {
	f.mu.Lock()
	m := f.agents[name]
	delete(f.agents, name)
	f.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("no agent %s", name)
	}
	return m, nil
}

// WaitOnline waits until the controller sees every named node online.
func (f *Fleet) WaitOnline(ctx context.Context, names ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		nodes, err := f.client.ListNodes(ctx)
		if err == nil {
			online := map[string]bool{}
			for _, n := range nodes {
				if n.Status == api.NodeOnline {
					online[n.ID] = true
				}
			}
			missing := 0
			for _, n := range names {
				if !online[n] {
					missing++
				}
			}
			if missing == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("agents not online: %v", names), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// AdmitNode records node id as admitted with these groups under a fresh
// key, as an approval would, so a test may write the node's record itself
// (a secured controller ignores records of nodes not admitted). Nothing
// to do when the controller is insecure.
func (f *Fleet) AdmitNode(ctx context.Context, id string, groups []string) error {
	return f.AdmitNodes(ctx, map[string][]string{id: groups})
}

// AdmitNodes is AdmitNode for many nodes (node id → groups) over one
// connection; it returns once the controller has applied every admission.
func (f *Fleet) AdmitNodes(ctx context.Context, nodes map[string][]string) error {
	return f.AdmitSiteNodes(ctx, "", nodes)
}

// AdmitSiteNodes is AdmitNodes for nodes of a site (empty: the default
// site), as the hub's enrollment through that site's relay would record
// them: the registry takes each node's site from its enrollment.
func (f *Fleet) AdmitSiteNodes(ctx context.Context, site string, nodes map[string][]string) error {
	if f.NATSOptions() == nil || len(nodes) == 0 {
		return nil
	}
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		return fmt.Errorf("connect NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, api.BucketEnrollments)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	keys := make(map[string]string, len(nodes))
	for id, groups := range nodes {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return err
		}
		pub, _ := kp.PublicKey()
		keys[id] = pub
		b, _ := json.Marshal(api.Enrollment{NodeID: id, PublicKey: pub, Groups: groups, Site: site, Status: api.EnrollAdmitted, RequestedAt: now, DecidedAt: now})
		if _, err := kv.Put(ctx, id, b); err != nil {
			return fmt.Errorf("admit %s: %w", id, err)
		}
	}
	// The controller's watch applies them shortly after.
	for {
		list, err := f.client.ListEnrollments(ctx, api.EnrollAdmitted)
		if err == nil {
			applied := 0
			for _, e := range list {
				if keys[e.NodeID] == e.PublicKey {
					applied++
				}
			}
			if applied == len(keys) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
