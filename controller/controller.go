// Package controller runs GRID's control plane: an embedded NATS server with
// JetStream, the node registry, the job scheduler and the HTTP API.
package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
	"github.com/gridfleet/terraform-provider-grid/internal/seal"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

// Controller is one GRID controller.
type Controller struct {
	cfg Config
	id  string
	log *slog.Logger

	ns   *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	reg  *registry
	jobs *jobStore
	// nodesKV holds the node records the registry follows.
	nodesKV jetstream.KeyValue
	// sec is the embedded server's TLS and authentication; nil when
	// insecure or on an external NATS.
	sec *security
	// replies answers requests in their sender's own inbox only.
	replies *replies
	// natsOpts connect to NATS as this controller.
	natsOpts []nats.Option
	// tokens are the API tokens; adminToken is the one in the data dir.
	tokens     *tokenStore
	adminToken string
	// allow is the controller's allow list of submittable actions; nil
	// allows every action online nodes offer.
	allow *backends.Allowlist
	// jobIdx is the compact view of the jobs bucket that lists, counts and
	// retention use.
	jobIdx *jobIndex
	// box encrypts sensitive params at rest (the cluster key); secretsKV
	// holds them while their job may run.
	box       *seal.Box
	secretsKV jetstream.KeyValue
	// limits are the configured rate limits (nil: none); rates holds
	// their windows, shared by the cluster.
	limits *rateLimits
	rates  *rateWindows
	// scheds are the cron schedules (schedules.go); scheduleClaimed, when
	// set, is called after this controller claims a tick and before it
	// submits the tick's job, and returning true stops there (tests
	// simulate a crash in between with it).
	scheds          *scheduleStore
	scheduleClaimed atomic.Pointer[func(jobID string) bool]

	// views serve the dashboard's data routes (dashboard.go).
	views *dashboardViews

	httpSrv  *http.Server
	debugSrv *http.Server
	// apiHTTP is APIHTTPClient's client, made on first use.
	apiHTTP apiHTTPClient
	apiURL  string
	natsURL string
	// leafURL is where sites' relays connect to this controller ("" when
	// it takes none).
	leafURL  string
	debugURL string

	mu   sync.Mutex
	runs map[string]*run
	// starts holds, by job id, channels closed when a run of the job
	// starts here: long polls of a pending job wait on them.
	starts map[string]*startWait
	// livePeers is how many other controllers were alive at the last look;
	// -1 until the first.
	livePeers atomic.Int32
	// slots bounds concurrently running jobs (max_concurrent).
	slots chan struct{}

	started time.Time
	ready   bool
	done    chan struct{}
	// stopping is closed (under mu) when shutdown begins; writes that would
	// otherwise retry until they land give up then (a restart or a peer
	// resumes), and no run starts after it.
	stopping chan struct{}
	// runWG counts the goroutines of started runs; intake counts the loops
	// that start runs (scheduler, recovery); loops counts the others
	// (heartbeat). Shutdown stops and waits for them in that order.
	runWG  sync.WaitGroup
	intake sync.WaitGroup
	loops  sync.WaitGroup

	// replicas is the count streams and buckets are created and raised to.
	replicas int
	// topo is the topology the streams and buckets were set up with (the
	// dead-letter stream is made again from it if it is gone).
	topo bus.Topology

	metrics *metrics
	// audit appends to the audit trail (audit.go).
	audit    *auditLog
	pending  pendingEstimate
	catCache catalogCache
	tracer   trace.Tracer
}

// New checks the config and returns a controller ready to Start.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controller config: %w", err)
	}
	c := &Controller{cfg: cfg, log: cfg.logger(), runs: map[string]*run{}, starts: map[string]*startWait{},
		slots: make(chan struct{}, cfg.MaxConcurrent), done: make(chan struct{}), stopping: make(chan struct{}),
		tracer: telemetry.Tracer(cfg.TracerProvider)}
	c.metrics = newMetrics(c)
	c.livePeers.Store(-1)
	// Validate has checked the entries.
	c.allow, _ = parseAllow(cfg.Allow)
	c.limits = newRateLimits(cfg.RateLimits)
	return c, nil
}

// Busy reports whether the controller is running jobs.
func (c *Controller) Busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs) > 0
}

// ID is the controller's name among its peers.
func (c *Controller) ID() string { return c.id }

// APIURL is the base URL of the HTTP API.
func (c *Controller) APIURL() string { return c.apiURL }

// NATSURL is the client URL of the embedded NATS server.
func (c *Controller) NATSURL() string { return c.natsURL }

// NATSOptions connect to the controller's NATS as the controller does
// (its client certificate and CA): for tools and tests that need to see
// everything. Nil when insecure.
func (c *Controller) NATSOptions() []nats.Option { return c.natsOpts }

// DebugURL is the base URL of the debug server (pprof), empty unless
// debug_addr is set.
func (c *Controller) DebugURL() string { return c.debugURL }

// Kill drops the controller's NATS connection at once, as a crash would:
// nothing more is written, heartbeats stop, and peers take over its jobs.
// The controller still stops properly when its context ends.
func (c *Controller) Kill() { c.nc.Close() }

// Done is closed once the controller has stopped after its context ended.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Start brings up NATS, the topology, the registry, the scheduler and the
// API, and returns when the controller is ready. Everything stops when ctx
// ends; Done reports when that has finished.
//
// It runs named steps, each of which registers how to undo what it
// started; when a step fails, what the steps before it started is undone
// in reverse order and the error names the step.
func (c *Controller) Start(ctx context.Context) (err error) {
	s := &startup{}
	defer func() {
		if err != nil {
			s.undo()
		}
	}()
	// The server outlives ctx slightly: it stops after the API and the
	// scheduler, in shutdown.
	setupCtx, cancelSetup := context.WithTimeout(ctx, bus.ClusterFormTimeout+30*time.Second)
	defer cancelSetup()
	steps := []struct {
		name string
		run  func(context.Context, *startup) error
	}{
		{"identity", c.setupIdentity},
		{"security", c.setupSecurity},
		{"NATS", c.setupNATS},
		{"streams and buckets", c.setupTopology},
		{"secrets and limits", c.setupStores},
		{"nodes", c.setupNodes},
		{"tokens", c.setupTokens},
		{"jobs", c.setupJobs},
		{"agent intake", c.setupIntake},
		{"API", c.setupAPI},
	}
	for _, step := range steps {
		if err := step.run(setupCtx, s); err != nil {
			// The steps' errors say what failed already; the step name is
			// for the log, where a start failure is read.
			c.log.Error("controller start failed", "step", step.name, "err", err)
			return err
		}
	}
	if _, err := c.deadControllers(setupCtx); err != nil {
		c.log.Warn("list controllers", "err", err)
	}
	c.startLoops(s)
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	c.log.Info("controller ready", "api", c.apiURL, "nats", c.natsURL, "data_dir", c.cfg.DataDir)
	go func() {
		<-ctx.Done()
		c.shutdown(s)
	}()
	return nil
}

// startup is what Start's steps started: how to undo it when a later step
// fails, and what shutdown stops in order.
type startup struct {
	// undos run in reverse order when a step fails.
	undos []func()
	// stopNATS stops the embedded server (a no-op on an external NATS).
	stopNATS context.CancelFunc
	// runCtx lives as long as the controller's runs and watches; stopRuns
	// ends it. stopIntake ends the loops that take work.
	runCtx     context.Context
	stopRuns   context.CancelFunc
	stopIntake context.CancelFunc
	// subs are the core subscriptions unsubscribed at shutdown.
	subs []*nats.Subscription
}

func (s *startup) onUndo(f func()) { s.undos = append(s.undos, f) }

func (s *startup) undo() {
	for i := len(s.undos) - 1; i >= 0; i-- {
		s.undos[i]()
	}
}

// setupIdentity fixes the controller's id and its log.
func (c *Controller) setupIdentity(context.Context, *startup) error {
	id, err := c.cfg.controllerID()
	if err != nil {
		return err
	}
	c.id = id
	c.log = c.log.With("controller", id)
	c.replies = &replies{log: c.log}
	c.started = time.Now().UTC()
	if off := c.cfg.NodeOfflineAfter.D(); off < 2*api.DefaultHeartbeatInterval {
		c.log.Warn("node_offline_after is less than twice the agents' default heartbeat_interval: agents left at their default will flap offline between beats; raise it or lower the agents' heartbeat_interval",
			"node_offline_after", off, "default_heartbeat_interval", api.DefaultHeartbeatInterval)
	}
	return nil
}

// setupSecurity loads the CA, certificates and join token of the embedded
// server, or the credentials of an external NATS.
func (c *Controller) setupSecurity(context.Context, *startup) error {
	var err error
	switch {
	case c.cfg.Insecure:
		c.log.Warn("INSECURE: NATS runs without TLS or authentication and the HTTP API serves plain HTTP (tokens in clear); anyone who reaches NATS controls every node. Use this in a lab only.")
		if c.cfg.AnonymousRole != "" {
			c.log.Warn("ANONYMOUS: requests without a token are let in with role "+string(c.cfg.AnonymousRole)+" (anonymous_role); their job answers use the seed's statuses", "role", c.cfg.AnonymousRole)
		}
	case len(c.cfg.NATSURLs) == 0:
		if c.sec, err = newSecurity(c.cfg, c.log); err != nil {
			return err
		}
		c.sec.record = c.record
		c.natsOpts = c.sec.clientOptions()
	default:
		if c.natsOpts, err = bus.CredentialOptions(c.cfg.NATSCreds, c.cfg.NATSCAFile); err != nil {
			return err
		}
	}
	return nil
}

// setupNATS starts the embedded server (unless NATS is external) and
// connects to it.
func (c *Controller) setupNATS(_ context.Context, s *startup) error {
	nsCtx, stopNATS := context.WithCancel(context.Background())
	s.stopNATS = stopNATS
	s.onUndo(func() {
		stopNATS()
		if c.ns != nil {
			c.ns.WaitForShutdown()
		}
	})
	urls := c.cfg.NATSURLs
	if len(urls) == 0 {
		ns, err := c.startNATS(nsCtx, c.id)
		if err != nil {
			return err
		}
		c.ns = ns
		c.natsURL = ns.ClientURL()
		if c.sec != nil {
			c.sec.ns.Store(ns)
		}
		urls = []string{c.natsURL}
	} else {
		c.natsURL = strings.Join(urls, ",")
	}
	var err error
	if c.nc, err = bus.Connect("grid-controller-"+c.id, urls, c.log, c.natsOpts...); err != nil {
		return err
	}
	s.onUndo(c.nc.Close)
	if c.js, err = jetstream.New(c.nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// setupTopology creates or updates the streams and buckets, and opens the
// jobs bucket and the cluster key.
func (c *Controller) setupTopology(ctx context.Context, _ *startup) error {
	topo := bus.DefaultTopology()
	topo.Replicas, topo.NeverLower = c.cfg.replicas()
	topo.Limits = c.cfg.limits(c.nc.MaxPayload())
	topo.AuditMaxAge = c.cfg.AuditRetention.D()
	c.topo = topo
	c.replicas = topo.Replicas
	c.logReplicas(topo.Replicas, topo.NeverLower)
	if err := bus.EnsureTopologyRetry(ctx, c.js, topo, bus.ClusterFormTimeout, c.log); err != nil {
		return fmt.Errorf("set up streams and buckets: %w", err)
	}
	jobsKV, err := c.js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		return err
	}
	c.audit = &auditLog{js: c.js, controller: c.id}
	c.jobs = newJobStore(jobsKV, "jobs_max_bytes")
	c.jobIdx = newJobIndex()
	keysKV, err := c.js.KeyValue(ctx, api.BucketKeys)
	if err != nil {
		return err
	}
	if c.box, err = loadClusterKey(ctx, keysKV); err != nil {
		return err
	}
	return nil
}

// setupStores opens the buckets of sensitive params, rate limits and
// schedules, and starts the context the runs and watches live in.
func (c *Controller) setupStores(ctx context.Context, s *startup) error {
	var err error
	if c.secretsKV, err = c.js.KeyValue(ctx, api.BucketJobSecrets); err != nil {
		return err
	}
	rateKV, err := c.js.KeyValue(ctx, api.BucketRateLimits)
	if err != nil {
		return err
	}
	c.rates = &rateWindows{kv: rateKV, log: c.log}
	schedsKV, err := c.js.KeyValue(ctx, api.BucketSchedules)
	if err != nil {
		return err
	}
	c.scheds = &scheduleStore{kv: schedsKV}
	s.runCtx, s.stopRuns = context.WithCancel(context.Background())
	s.onUndo(func() {
		s.stopRuns()
		c.loops.Wait()
		if c.reg != nil {
			c.reg.loops.Wait()
		}
	})
	return nil
}

// setupNodes loads the enrollments (the registry takes only admitted
// nodes), answers enrollment requests, and follows the node records.
func (c *Controller) setupNodes(ctx context.Context, s *startup) error {
	nodesKV, err := c.js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		return err
	}
	schemasKV, err := c.js.KeyValue(ctx, api.BucketSchemas)
	if err != nil {
		return err
	}
	c.nodesKV = nodesKV
	c.reg = newRegistry(c.log, c.cfg.NodeOfflineAfter.D(), schemasKV)
	c.reg.heartbeats = c.metrics.heartbeats
	if c.sec != nil {
		c.reg.admitted = c.sec.admitted
		c.sec.forget = c.reg.forget
		c.sec.replies = c.replies
		enrollKV, err := c.js.KeyValue(ctx, api.BucketEnrollments)
		if err == nil {
			err = c.sec.watch(s.runCtx, &c.loops, enrollKV)
		}
		var joinKV jetstream.KeyValue
		if err == nil {
			joinKV, err = c.js.KeyValue(ctx, api.BucketJoinTokens)
		}
		if err == nil {
			c.sec.joins, err = openJoinTokens(s.runCtx, &c.loops, joinKV, c.log)
		}
		if err != nil {
			return fmt.Errorf("enrollments: %w", err)
		}
		enrollSub, err := c.sec.subscribe(c.nc)
		if err != nil {
			return fmt.Errorf("enrollments: %w", err)
		}
		s.subs = append(s.subs, enrollSub)
		if err := c.setupSites(ctx, s); err != nil {
			return fmt.Errorf("sites: %w", err)
		}
	}
	if err := c.reg.watch(s.runCtx, c.nc, nodesKV); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	return nil
}

// setupTokens loads the API tokens and makes the admin token on a
// cluster's first start.
func (c *Controller) setupTokens(ctx context.Context, s *startup) error {
	tokensKV, err := c.js.KeyValue(ctx, api.BucketTokens)
	if err != nil {
		return err
	}
	if c.tokens, err = openTokens(s.runCtx, &c.loops, tokensKV, c.log); err != nil {
		return err
	}
	c.adminToken, err = c.ensureAdminToken(ctx)
	return err
}

// setupJobs follows the jobs bucket, consumes results, and hears progress
// reports and cancellations.
func (c *Controller) setupJobs(_ context.Context, s *startup) error {
	if err := c.jobIdx.watch(s.runCtx, &c.loops, c.jobs.kv, c.log); err != nil {
		return err
	}
	if err := c.consumeResults(s.runCtx); err != nil {
		return err
	}
	progressSub, err := c.nc.Subscribe(api.SubjectProgress, func(m *nats.Msg) {
		c.routeResult(m.Subject, m.Data, false)
	})
	if err != nil {
		return fmt.Errorf("subscribe progress reports: %w", err)
	}
	// Bounded: a node flooding progress reports loses some of them (they
	// are status lines; losing one is harmless), and the controller keeps
	// its memory.
	_ = progressSub.SetPendingLimits(-1, 64<<20)
	s.subs = append(s.subs, progressSub)
	cancelSub, err := c.nc.Subscribe(api.SubjectCancelAll, c.onCancel)
	if err != nil {
		return fmt.Errorf("subscribe cancellations: %w", err)
	}
	s.subs = append(s.subs, cancelSub)
	return nil
}

// setupIntake takes the agents' reports, registrations and heartbeats
// and stores them (intake.go); it stops at shutdown after the runs.
func (c *Controller) setupIntake(ctx context.Context, s *startup) error {
	schemasKV, err := c.js.KeyValue(ctx, api.BucketSchemas)
	if err != nil {
		return err
	}
	in, err := c.startIntake(schemasKV)
	if err != nil {
		return err
	}
	c.loops.Go(func() {
		<-s.runCtx.Done()
		in.close()
	})
	return nil
}

// setupAPI listens and serves the HTTP API (and the debug server when
// configured).
func (c *Controller) setupAPI(_ context.Context, s *startup) error {
	c.views = &dashboardViews{reg: c.reg, jobsKV: c.jobs.kv, live: c, stopping: c.stopping}
	apiTLS, err := c.apiTLSConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("API listen on %s: %w", c.cfg.APIAddr, err)
	}
	c.apiURL = "http://" + ln.Addr().String()
	if apiTLS != nil {
		ln = tls.NewListener(ln, apiTLS)
		c.apiURL = "https://" + ln.Addr().String()
	}
	if c.cfg.DebugAddr != "" {
		if c.debugSrv, err = c.startDebug(); err != nil {
			_ = ln.Close()
			return err
		}
	}
	c.httpSrv = &http.Server{Handler: c.traceHTTP(c.routes()), ReadHeaderTimeout: 10 * time.Second,
		// Failed handshakes (a client without the CA, plain HTTP on the
		// HTTPS port) go to the controller's log at debug level, not to
		// stderr.
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelDebug)}
	c.loops.Go(func() {
		if err := c.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("API server", "err", err)
		}
	})
	s.onUndo(func() { _ = c.httpSrv.Close() })
	return nil
}

// startLoops resumes the runs this controller owns and starts the loops:
// intake (taking submitted jobs, adopting orphans, firing schedules),
// which stops first at shutdown, and the heartbeat and sweeper.
func (c *Controller) startLoops(s *startup) {
	c.resumeOwned(s.runCtx)
	intakeCtx, stopIntake := context.WithCancel(s.runCtx)
	s.stopIntake = stopIntake
	c.intake.Go(func() { c.schedule(intakeCtx) })
	c.intake.Go(func() { c.recoverLoop(intakeCtx) })
	ticker := &scheduleTicker{id: c.id, log: c.log, grace: c.cfg.ScheduleGrace.D(), store: c.scheds, jobs: c.jobs,
		tokens: c.tokens, metrics: c.metrics, host: c, claimed: &c.scheduleClaimed}
	c.intake.Go(func() { ticker.scheduleLoop(intakeCtx) })
	c.loops.Go(func() { c.heartbeat(s.runCtx) })
	c.loops.Go(func() { c.sweepJobs(s.runCtx) })
}

// shutdown stops the controller in order: no new runs and no API first,
// then the loops that take work, then the runs (which stay running in KV for
// a restart or a peer), then the heartbeat and the watches, and last the
// connection and the server.
func (c *Controller) shutdown(s *startup) {
	defer close(c.done)
	c.mu.Lock()
	// Under mu, so that no run is added after this (addRun checks it).
	close(c.stopping)
	c.ready = false
	c.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.httpSrv.Shutdown(sctx)
	if c.debugSrv != nil {
		_ = c.debugSrv.Close()
	}
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	if c.sec != nil {
		if st := c.sec.sites.Load(); st != nil {
			st.close()
		}
	}
	s.stopIntake()
	c.intake.Wait()
	c.mu.Lock()
	runs := make([]*run, 0, len(c.runs))
	for _, r := range c.runs {
		runs = append(runs, r)
	}
	c.mu.Unlock()
	for _, r := range runs {
		r.cancel(errShutdown)
	}
	c.runWG.Wait()
	s.stopRuns()
	// The heartbeat has returned, so nothing writes "online" after the
	// "offline" below.
	c.loops.Wait()
	c.reg.loops.Wait()
	// Without a server (it went away under us) the write would only wait
	// out its timeout.
	if c.nc.IsConnected() {
		c.putInfo(sctx, "offline")
	}
	_ = c.nc.Drain()
	s.stopNATS()
	if c.ns != nil {
		c.ns.WaitForShutdown()
	}
	c.log.Info("controller stopped")
}

// startNATS starts the embedded server, clustered with its peers when the
// config names a cluster.
func (c *Controller) startNATS(ctx context.Context, id string) (*server.Server, error) {
	host, portStr, _ := net.SplitHostPort(c.cfg.NATSAddr)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats_addr port %q: %w", portStr, err)
	}
	if port == 0 {
		port = -1
	}
	sc := embedded.ServerConfig{Name: id, Host: host, Port: port, DataDir: c.cfg.DataDir + "/jetstream",
		ClusterName: c.cfg.ClusterName, Routes: c.cfg.Routes}
	if c.cfg.ClusterAddr != "" {
		ch, cp, err := net.SplitHostPort(c.cfg.ClusterAddr)
		if err != nil {
			return nil, fmt.Errorf("cluster_addr %q: %w", c.cfg.ClusterAddr, err)
		}
		sc.ClusterHost = ch
		if sc.ClusterPort, err = strconv.Atoi(cp); err != nil {
			return nil, fmt.Errorf("cluster_addr port %q: %w", cp, err)
		}
	}
	if c.sec != nil {
		sc.TLS, sc.Auth = c.sec.serverTLS, c.sec
		if sc.ClusterName != "" {
			sc.ClusterTLS = c.sec.clusterTLS
		}
	}
	if c.cfg.LeafAddr != "" {
		lh, lp, err := net.SplitHostPort(c.cfg.LeafAddr)
		if err != nil {
			return nil, fmt.Errorf("leaf_addr %q: %w", c.cfg.LeafAddr, err)
		}
		if sc.LeafPort, err = strconv.Atoi(lp); err != nil {
			return nil, fmt.Errorf("leaf_addr port %q: %w", lp, err)
		}
		if sc.LeafPort == 0 {
			sc.LeafPort = -1
		}
		// Relays prove their site's key, not a certificate: the server's
		// certificate, no client certificate asked.
		sc.LeafHost, sc.LeafTLS = lh, c.sec.leafTLS()
		sc.LeafSend, sc.LeafHear = siteSend, siteHear
	}
	return embedded.StartServer(ctx, sc)
}

// heartbeat keeps this controller's entry in the controllers bucket fresh.
func (c *Controller) heartbeat(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval.D())
	defer t.Stop()
	for {
		c.putInfo(ctx, "online")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Controller) putInfo(ctx context.Context, status string) {
	kv, err := c.js.KeyValue(ctx, api.BucketControllers)
	if err != nil {
		return
	}
	c.mu.Lock()
	running := len(c.runs)
	c.mu.Unlock()
	info := api.ControllerInfo{ID: c.id, APIAddr: c.apiURL, NATSURL: c.natsURL, LeafURL: c.leafURL, Status: status,
		Running: running, Started: c.started, LastSeen: time.Now().UTC()}
	b, _ := json.Marshal(info)
	if _, err := kv.Put(ctx, c.id, b); err != nil && ctx.Err() == nil {
		c.log.Warn("controller heartbeat", "err", err)
	}
}

// consumeResults follows the results stream with one ordered consumer and
// routes each result to the run that waits for it.
//
// It starts at a sequence, not at "new": an ordered consumer recreated
// (its server died, its heartbeats stopped) before it delivered anything
// starts again from its first configuration, and "new" would then skip
// every result stored while it was gone, leaving their runs waiting.
func (c *Controller) consumeResults(ctx context.Context) error {
	var cons jetstream.Consumer
	err := untilAnswered(ctx, c.log, "results consumer", func() error {
		stream, err := c.js.Stream(ctx, api.StreamResults)
		if err != nil {
			return fmt.Errorf("results stream: %w", err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("results stream: %w", err)
		}
		cons, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			NamePrefix:     ResultsConsumerPrefix(c.id),
			FilterSubjects: []string{api.SubjectResults},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    info.State.LastSeq + 1,
		})
		if err != nil {
			return fmt.Errorf("results consumer: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		c.routeResult(m.Subject(), m.Data(), true)
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("consume results: %w", err)
	}
	c.loops.Go(func() {
		<-ctx.Done()
		cc.Stop()
	})
	return nil
}

// ResultsConsumerPrefix is how the names of a controller's results
// consumers begin (the client adds _1, _2, … each time it recreates one), so an
// operator listing the results stream's consumers can tell whose each is.
func ResultsConsumerPrefix(controllerID string) string {
	b := []byte("results-" + controllerID)
	for i, ch := range b {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
		default:
			b[i] = '-'
		}
	}
	return string(b)
}

// routeResult hands a result to its run. stored says it came from the
// results stream: only a stored result may be final, so that a restarted
// controller finds every final result it acted on. Running and progress
// reports come on the core progress subject (or, from older agents, the
// results stream).
func (c *Controller) routeResult(subject string, data []byte, stored bool) {
	// result.<job> (stored by a controller, which wrote the step and node
	// into the body from the report's subject), or
	// progress.<job>.<step>.<node> and, stored by an earlier version,
	// result.<job>.<step>.<node>.
	parts := strings.SplitN(subject, ".", 4)
	jobOnly := stored && len(parts) == 2
	if len(parts) != 4 && !jobOnly {
		return
	}
	c.mu.Lock()
	r := c.runs[parts[1]]
	c.mu.Unlock()
	if r == nil {
		return
	}
	if !stored && len(data) > maxProgressReport {
		return // a running or progress report is a status line
	}
	var tr api.TaskResult
	if err := json.Unmarshal(data, &tr); err != nil {
		c.log.Warn("malformed result", "subject", subject, "err", err)
		return
	}
	if !stored && tr.Status != api.ResultRunning && tr.Status != api.ResultProgress {
		return
	}
	capReport(&tr)
	tr.JobID = parts[1]
	if jobOnly {
		// Only controllers publish on result.>; the body's node and step
		// are the ones the intake took from the report's subject.
		if !api.ValidToken(tr.NodeID) || tr.TaskIndex < 0 {
			return
		}
		r.deliver(&tr)
		return
	}
	// The subject names the sender; trust it over the body.
	tr.NodeID = parts[3]
	if step, err := strconv.Atoi(parts[2]); err == nil {
		tr.TaskIndex = step
	}
	r.deliver(&tr)
}

// onCancel hears cancel.<job> from any controller's API and stops the run
// if this controller owns it.
func (c *Controller) onCancel(m *nats.Msg) {
	id := api.CancelledJob(m.Subject)
	if isJobTimeoutStop(m) {
		return // the owner's own word to the agents; its run has ended already
	}
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r != nil {
		cancelRun(r, m.Header.Get(api.CancelledByHeader))
	}
}

// cancelRun ends a run this controller owns as cancelled, by the token
// named by (when it is one).
func cancelRun(r *run, by string) {
	if by != "" && api.ValidToken(by) {
		r.update(func(j *api.Job) {
			if j.CancelledBy == "" {
				j.CancelledBy = by
			}
		})
	}
	r.cancel(errCancelled)
}

func (c *Controller) jobFinished(r *run, status api.JobStatus) {
	r.mu.Lock()
	started, finished := r.job.StartedAt, r.job.FinishedAt
	r.mu.Unlock()
	c.metrics.observeJob(started, finished, status)
	c.mu.Lock()
	delete(c.runs, r.job.ID)
	c.mu.Unlock()
	if status.Terminal() && r.secrets != nil {
		c.dropSecrets(r.job.ID)
	}
	<-c.slots
}

// startWait is a channel closed when a run of a job starts here, shared by
// the long polls waiting for it.
type startWait struct {
	ch      chan struct{}
	waiters int
}

// onStart returns a channel closed when a run of job id starts on this
// controller, and a function to call when no longer waiting.
func (c *Controller) onStart(id string) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sw := c.starts[id]
	if sw == nil {
		sw = &startWait{ch: make(chan struct{})}
		c.starts[id] = sw
	}
	sw.waiters++
	return sw.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		sw.waiters--
		if sw.waiters == 0 && c.starts[id] == sw {
			delete(c.starts, id)
		}
	}
}

// addRun registers a run, counted in runWG, and wakes the long polls
// waiting for it. It refuses once shutdown has begun.
func (c *Controller) addRun(r *run) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.stopping:
		return false
	default:
	}
	c.runWG.Add(1)
	c.runs[r.job.ID] = r
	if sw := c.starts[r.job.ID]; sw != nil {
		close(sw.ch)
		delete(c.starts, r.job.ID)
	}
	return true
}

// localRun returns the run of a job this controller is executing.
func (c *Controller) localRun(id string) *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}
