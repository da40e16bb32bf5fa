// Package relay runs a site's relay: a NATS server the site's agents
// connect to as they would to a controller, joined to the hub (the
// controllers' cluster) as a leaf node over one TLS link authenticated
// with the site's key. It gives each agent connection exactly the rights
// a controller would (internal/busperm), from the site's roster the hub
// sends it, and passes agents' enrollment requests on to the hub.
package relay

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// serverName names the relay's server to the hub: the site, for people
// reading the hub's leaf list, and a random part, since the hub refuses a
// leaf whose name another site's relay holds: a name another site could
// guess, it could take first while this relay is cut off and so keep it
// out.
func serverName(site string) string {
	return "grid-relay-" + site + "-" + rand.Text()[:serverNameRandom]
}

// serverNameRandom is the length of a server name's random part.
const serverNameRandom = 12

// IsServerOf reports whether a leaf connection's server name (the hub's
// Leafz) is that of a relay of site.
func IsServerOf(name, site string) bool {
	prefix := "grid-relay-" + site + "-"
	return len(name) == len(prefix)+serverNameRandom && strings.HasPrefix(name, prefix)
}

// Relay is a site's relay.
type Relay struct {
	cfg   Config
	log   *slog.Logger
	cred  *credential
	opts  *server.Options
	auth  *auth
	ros   *roster
	cache rosterCache
	// self signs the relay's own client's connection.
	self nkeys.KeyPair

	ns    *server.Server
	nc    *nats.Conn
	proxy *enrollProxy
	// kick asks the roster loop for the roster now.
	kick chan struct{}
	// fetchMu orders roster fetches, so an older answer is never applied
	// over a newer one.
	fetchMu sync.Mutex

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// maxSubs caps the subscriptions of one connection: each costs the
// relay's memory, and an agent holds a few dozen (its commands, groups,
// cancellations and inbox), so without a cap one stranger could take the
// relay down. It counts the link's too (the hub's interest in what the
// site sends, a handful of wildcard subjects per controller), hence the
// margin.
const maxSubs = 10000

// New checks the config, loads the credential and prepares the server;
// Start runs it.
func New(cfg Config) (*Relay, error) {
	def := DefaultConfig()
	if cfg.RosterEvery == 0 {
		cfg.RosterEvery = def.RosterEvery
	}
	if cfg.EnrollTimeout == 0 {
		cfg.EnrollTimeout = def.EnrollTimeout
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	cred, err := loadCredential(cfg)
	if err != nil {
		return nil, err
	}
	log := config.Logger(cfg.Logger).With("site", cred.site)
	self, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("relay key: %w", err)
	}
	selfKey, err := self.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("relay key: %w", err)
	}
	r := &Relay{cfg: cfg, log: log, cred: cred, self: self, cache: rosterCache{dir: cfg.DataDir, key: cacheKey(cred.seed)},
		kick: make(chan struct{}, 1)}
	r.ros = newRoster(cred.site, log)
	r.auth = &auth{log: log, roster: r.ros, selfKey: selfKey, sources: &sources{}}
	r.opts = &server.Options{
		ServerName: serverName(cred.site),
		NoSigs:     true,
		NoLog:      !cfg.Debug,
		MaxPayload: 8 << 20,
		MaxSubs:    maxSubs,
	}
	for _, step := range []func() error{r.setupListen, r.setupTLS, r.setupAuth, r.setupLeaf} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// setupListen is the agents' port. The relay listens for nothing else:
// no cluster, no gateway, no leaf port, no monitoring.
func (r *Relay) setupListen() error {
	host, port, err := splitListen(r.cfg.Listen)
	if err != nil {
		return err
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	r.opts.Host, r.opts.Port = host, port
	return nil
}

// setupTLS requires TLS of every agent, with the certificate the hub's CA
// issued for the relay, so agents trust it by the hub's ca.pem. (The
// relay's own in-process client needs none.)
func (r *Relay) setupTLS() error {
	r.opts.TLS = true
	r.opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{r.cred.cert}, MinVersion: tls.VersionTLS12}
	r.opts.TLSTimeout = 5
	return nil
}

// setupAuth makes every connection go through auth.Check, with a nonce
// for NKey holders to sign.
func (r *Relay) setupAuth() error {
	r.opts.CustomClientAuthentication = r.auth
	r.opts.AlwaysEnableNonce = true
	return nil
}

// setupLeaf joins the hub as a leaf node: every hub URL, failing over,
// over TLS checked against the hub's CA, authenticated with the site's
// key. Enrollment subjects never cross the link: an agent's own request
// is answered by the proxy here (the hub would enroll it at no site), and
// the hub's agents' requests are not the proxy's to answer.
//
// Only the URLs given are tried, never the leaf addresses the hub's
// servers advertise for themselves: the credential names every
// controller already, and --hub replaces them because the way from the
// site differs (a proxy, a NAT, another name); an advertised address may
// not be reachable from the site, or may go around the way chosen.
func (r *Relay) setupLeaf() error {
	r.opts.LeafNode = server.LeafNodeOpts{
		ReconnectInterval: time.Second,
		Remotes: []*server.RemoteLeafOpts{{
			URLs:                    r.cred.hubURLs,
			IgnoreDiscoveredServers: true,
			Nkey:                    r.cred.seed,
			TLS:                     true,
			TLSConfig:               &tls.Config{RootCAs: r.cred.caPool, MinVersion: tls.VersionTLS12},
			TLSTimeout:              5,
			DenyImports:             []string{"grid.enroll.>"},
			DenyExports:             []string{"grid.enroll.>"},
		}},
	}
	return nil
}

// Start loads the cached roster, starts the server, connects the relay's
// own client and starts the enrollment proxy and the roster loop. ctx
// bounds the start only; Close stops the relay.
func (r *Relay) Start(ctx context.Context) error {
	if sr, ok, err := r.cache.load(r.cred.site); err != nil {
		r.log.Warn("not using the cached roster", "err", err)
	} else if ok {
		r.ros.replace(sr.Enrollments)
		r.log.Info("roster loaded from the data dir until the hub answers", "enrollments", len(sr.Enrollments))
	}
	ns, err := server.NewServer(r.opts)
	if err != nil {
		return fmt.Errorf("relay server: %w", err)
	}
	if r.cfg.Debug {
		ns.ConfigureLogger()
	}
	r.ns = ns
	r.auth.ns.Store(ns)
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return fmt.Errorf("relay server: not accepting connections on %s within 15s", r.cfg.Listen)
	}
	if err := ctx.Err(); err != nil {
		ns.Shutdown()
		return err
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("grid-relay "+r.cred.site),
		nats.Nkey(r.auth.selfKey, r.self.Sign),
		nats.CustomInboxPrefix(api.SiteInboxPrefix(r.cred.site)),
		nats.MaxReconnects(-1))
	if err != nil {
		ns.Shutdown()
		return fmt.Errorf("relay client: %w", err)
	}
	r.nc = nc
	r.proxy = newEnrollProxy(r.cred.site, nc, r.log, r.ros, r.cfg.EnrollTimeout, r.refreshNow)
	r.proxy.sources = r.auth.sources
	r.proxy.flooding = r.auth.cutOff
	if err := r.proxy.start(); err != nil {
		nc.Close()
		ns.Shutdown()
		return fmt.Errorf("enrollment proxy: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.rosterLoop(loopCtx) }()
	go func() { defer r.wg.Done(); r.watchLeaf(loopCtx) }()
	r.log.Info("relay listening for agents", "addr", r.Addr(), "hub", r.hubURLs())
	return nil
}

// Close stops the roster loop, the enrollment proxy, the relay's client
// and the server, in that order.
func (r *Relay) Close() {
	r.closeOnce.Do(func() {
		if r.cancel != nil {
			r.cancel()
			r.wg.Wait()
		}
		if r.proxy != nil {
			r.proxy.stop()
		}
		if r.nc != nil {
			r.nc.Close()
		}
		if r.ns != nil {
			r.ns.Shutdown()
			r.ns.WaitForShutdown()
		}
		r.self.Wipe()
	})
}

// Site is the relay's site.
func (r *Relay) Site() string { return r.cred.site }

// Addr is the host:port agents connect to (the port picked when the
// config gave 0); empty before Start.
func (r *Relay) Addr() string {
	if r.ns == nil {
		return ""
	}
	a, ok := r.ns.Addr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	host := r.opts.Host
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// URL is the tls:// URL agents connect to.
func (r *Relay) URL() string { return "tls://" + r.Addr() }

// LeafConnected reports whether the link to the hub is up.
func (r *Relay) LeafConnected() bool { return r.ns != nil && r.ns.NumLeafNodes() > 0 }

func (r *Relay) hubURLs() []string {
	out := make([]string, len(r.cred.hubURLs))
	for i, u := range r.cred.hubURLs {
		out[i] = u.String()
	}
	return out
}

// rosterLoop asks for the roster now, every RosterEvery, and whenever
// kicked (a leaf reconnect, an admission passed on); after a failure it
// asks again sooner, up to RosterEvery.
func (r *Relay) rosterLoop(ctx context.Context) {
	wait := time.Duration(0)
	failed := 0
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.kick:
			timer.Stop()
		case <-timer.C:
		}
		if err := r.refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failed++
			// While the link is down the failures are expected (the leaf
			// watch says so); with the link up they are worth a line.
			if failed == 3 && r.LeafConnected() {
				r.log.Warn("the hub does not answer the roster; agents keep the rights of the last one", "err", err)
			} else {
				r.log.Debug("roster not refreshed", "err", err)
			}
			wait = min(max(2*wait, 250*time.Millisecond), r.cfg.RosterEvery)
			continue
		}
		failed = 0
		wait = r.cfg.RosterEvery
	}
}

// refreshNow fetches the roster at once (an admission is being passed on:
// the agent's next connection must find it admitted).
func (r *Relay) refreshNow(ctx context.Context) {
	if err := r.refresh(ctx); err != nil {
		r.log.Warn("roster not refreshed after an admission; the agent's next connection may have to wait for the next one", "err", err)
	}
}

// refresh fetches the roster, installs it, closes the connections whose
// rights it changed and saves it in the data dir.
func (r *Relay) refresh(ctx context.Context) error {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	sr, err := fetchRoster(ctx, r.nc, r.cred.site, r.cfg.EnrollTimeout)
	if err != nil {
		return err
	}
	for _, ch := range r.ros.replace(sr.Enrollments) {
		r.auth.disconnect(ch)
	}
	if err := r.cache.save(sr); err != nil {
		r.log.Warn("roster not saved in the data dir", "err", err)
	}
	return nil
}

// kickRoster asks the roster loop for the roster now.
func (r *Relay) kickRoster() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// leafWatchEvery is how often the link's state is looked at.
const leafWatchEvery = 500 * time.Millisecond

// watchLeaf logs the link to the hub going up and down, and asks for the
// roster on every new link: the hub closes a site's link when the site's
// membership changes, so a new link may mean a new roster.
func (r *Relay) watchLeaf(ctx context.Context) {
	t := time.NewTicker(leafWatchEvery)
	defer t.Stop()
	var cur uint64
	for {
		id, hub := r.leafLink()
		switch {
		case id != 0 && id != cur:
			r.log.Info("connected to the hub", "hub", hub)
			r.kickRoster()
		case id == 0 && cur != 0:
			r.log.Warn("disconnected from the hub; agents stay connected here, and the relay reconnects by itself")
		}
		cur = id
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leafLink is the connection id and the address of the link to the hub;
// 0 when there is none.
func (r *Relay) leafLink() (uint64, string) {
	lz, err := r.ns.Leafz(nil)
	if err != nil || len(lz.Leafs) == 0 {
		return 0, ""
	}
	l := lz.Leafs[0]
	return l.ID, net.JoinHostPort(l.IP, strconv.Itoa(l.Port))
}

// errNotStarted is returned by what needs a running relay.
var errNotStarted = errors.New("relay not started")

// RefreshRoster fetches the site's roster from the hub now and applies it.
func (r *Relay) RefreshRoster(ctx context.Context) error {
	if r.nc == nil {
		return errNotStarted
	}
	return r.refresh(ctx)
}
