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
	// limits are the configured rate limits (nil: none); rateKV holds
	// their shared windows; rateMismatch the limits whose window another
	// controller wrote under other numbers (logged once).
	limits       *rateLimits
	rateKV       jetstream.KeyValue
	rateMismatch sync.Map
	// scheds are the cron schedules (schedules.go); scheduleClaimed, when
	// set, is called after this controller claims a tick and before it
	// submits the tick's job, and returning true stops there (tests
	// simulate a crash in between with it).
	scheds          *scheduleStore
	scheduleClaimed atomic.Pointer[func(jobID string) bool]

	httpSrv  *http.Server
	debugSrv *http.Server
	// apiHTTP is APIHTTPClient's client, made on first use.
	apiHTTP  apiHTTPClient
	apiURL   string
	natsURL  string
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

	metrics  *metrics
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
func (c *Controller) Start(ctx context.Context) error {
	id, err := c.cfg.controllerID()
	if err != nil {
		return err
	}
	c.id = id
	c.log = c.log.With("controller", id)
	c.started = time.Now().UTC()

	// The server outlives ctx slightly: it stops after the API and the
	// scheduler, in shutdown.
	urls := c.cfg.NATSURLs
	switch {
	case c.cfg.Insecure:
		c.log.Warn("INSECURE: NATS runs without TLS or authentication and the HTTP API serves plain HTTP (tokens in clear); anyone who reaches NATS controls every node. Use this in a lab only.")
	case len(urls) == 0:
		if c.sec, err = newSecurity(c.cfg, c.log); err != nil {
			return err
		}
		c.natsOpts = c.sec.clientOptions()
	default:
		if c.natsOpts, err = bus.CredentialOptions(c.cfg.NATSCreds, c.cfg.NATSCAFile); err != nil {
			return err
		}
	}
	nsCtx, stopNATS := context.WithCancel(context.Background())
	if len(urls) == 0 {
		ns, err := c.startNATS(nsCtx, id)
		if err != nil {
			stopNATS()
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

	fail := func(err error) error {
		if c.nc != nil {
			c.nc.Close()
		}
		stopNATS()
		if c.ns != nil {
			c.ns.WaitForShutdown()
		}
		return err
	}
	c.nc, err = bus.Connect("grid-controller-"+id, urls, c.log, c.natsOpts...)
	if err != nil {
		return fail(err)
	}
	c.js, err = jetstream.New(c.nc)
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	setupCtx, cancelSetup := context.WithTimeout(ctx, bus.ClusterFormTimeout+30*time.Second)
	defer cancelSetup()
	topo := bus.DefaultTopology()
	topo.Replicas, topo.NeverLower = c.cfg.replicas()
	c.replicas = topo.Replicas
	c.logReplicas(topo.Replicas, topo.NeverLower)
	if err := bus.EnsureTopologyRetry(setupCtx, c.js, topo, bus.ClusterFormTimeout, c.log); err != nil {
		return fail(fmt.Errorf("set up streams and buckets: %w", err))
	}
	jobsKV, err := c.js.KeyValue(setupCtx, api.BucketJobs)
	if err != nil {
		return fail(err)
	}
	c.jobs = &jobStore{kv: jobsKV}
	c.jobIdx = newJobIndex()
	keysKV, err := c.js.KeyValue(setupCtx, api.BucketKeys)
	if err != nil {
		return fail(err)
	}
	if c.box, err = loadClusterKey(setupCtx, keysKV); err != nil {
		return fail(err)
	}
	if c.secretsKV, err = c.js.KeyValue(setupCtx, api.BucketJobSecrets); err != nil {
		return fail(err)
	}
	if c.rateKV, err = c.js.KeyValue(setupCtx, api.BucketRateLimits); err != nil {
		return fail(err)
	}
	schedsKV, err := c.js.KeyValue(setupCtx, api.BucketSchedules)
	if err != nil {
		return fail(err)
	}
	c.scheds = &scheduleStore{kv: schedsKV}
	nodesKV, err := c.js.KeyValue(setupCtx, api.BucketNodes)
	if err != nil {
		return fail(err)
	}
	schemasKV, err := c.js.KeyValue(setupCtx, api.BucketSchemas)
	if err != nil {
		return fail(err)
	}
	c.nodesKV = nodesKV
	runCtx, stopRuns := context.WithCancel(context.Background())
	c.reg = newRegistry(c.log, c.cfg.NodeOfflineAfter.D(), schemasKV)
	c.reg.heartbeats = c.metrics.heartbeats
	var enrollSub *nats.Subscription
	if c.sec != nil {
		// Enrollments first: the registry takes only admitted nodes.
		c.reg.admitted = c.sec.admitted
		c.sec.forget = c.reg.forget
		enrollKV, err := c.js.KeyValue(setupCtx, api.BucketEnrollments)
		if err == nil {
			err = c.sec.watch(runCtx, &c.loops, enrollKV)
		}
		var joinKV jetstream.KeyValue
		if err == nil {
			joinKV, err = c.js.KeyValue(setupCtx, api.BucketJoinTokens)
		}
		if err == nil {
			c.sec.joins, err = openJoinTokens(runCtx, &c.loops, joinKV, c.log)
		}
		if err == nil {
			enrollSub, err = c.sec.subscribe(c.nc)
		}
		if err != nil {
			stopRuns()
			return fail(fmt.Errorf("enrollments: %w", err))
		}
	}
	if err := c.reg.watch(runCtx, c.nc, nodesKV); err != nil {
		stopRuns()
		return fail(fmt.Errorf("watch nodes: %w", err))
	}
	tokensKV, err := c.js.KeyValue(setupCtx, api.BucketTokens)
	if err != nil {
		stopRuns()
		return fail(err)
	}
	if c.tokens, err = openTokens(runCtx, &c.loops, tokensKV, c.log); err != nil {
		stopRuns()
		return fail(err)
	}
	if c.adminToken, err = c.ensureAdminToken(setupCtx); err != nil {
		stopRuns()
		return fail(err)
	}
	if err := c.jobIdx.watch(runCtx, &c.loops, jobsKV, c.log); err != nil {
		stopRuns()
		return fail(err)
	}
	if err := c.consumeResults(runCtx); err != nil {
		stopRuns()
		return fail(err)
	}
	progressSub, err := c.nc.Subscribe(api.SubjectProgress, func(m *nats.Msg) {
		c.routeResult(m.Subject, m.Data, false)
	})
	if err != nil {
		stopRuns()
		return fail(fmt.Errorf("subscribe progress reports: %w", err))
	}
	_ = progressSub.SetPendingLimits(-1, -1)
	cancelSub, err := c.nc.Subscribe(api.SubjectCancelAll, c.onCancel)
	if err != nil {
		stopRuns()
		return fail(fmt.Errorf("subscribe cancellations: %w", err))
	}
	apiTLS, err := c.apiTLSConfig()
	if err != nil {
		stopRuns()
		return fail(err)
	}
	ln, err := net.Listen("tcp", c.cfg.APIAddr)
	if err != nil {
		stopRuns()
		return fail(fmt.Errorf("API listen on %s: %w", c.cfg.APIAddr, err))
	}
	c.apiURL = "http://" + ln.Addr().String()
	if apiTLS != nil {
		ln = tls.NewListener(ln, apiTLS)
		c.apiURL = "https://" + ln.Addr().String()
	}
	if c.cfg.DebugAddr != "" {
		if c.debugSrv, err = c.startDebug(); err != nil {
			_ = ln.Close()
			stopRuns()
			return fail(err)
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

	if _, err := c.deadControllers(setupCtx); err != nil {
		c.log.Warn("list controllers", "err", err)
	}
	c.resumeOwned(runCtx)
	// Intake (taking submitted jobs, adopting orphans) stops first at
	// shutdown, before the runs are stopped, then the rest.
	intakeCtx, stopIntake := context.WithCancel(runCtx)
	c.intake.Go(func() { c.schedule(intakeCtx) })
	c.intake.Go(func() { c.recoverLoop(intakeCtx) })
	c.intake.Go(func() { c.scheduleLoop(intakeCtx) })
	c.loops.Go(func() { c.heartbeat(runCtx) })
	c.loops.Go(func() { c.sweepJobs(runCtx) })
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	c.log.Info("controller ready", "api", c.apiURL, "nats", c.natsURL, "data_dir", c.cfg.DataDir)

	subs := []*nats.Subscription{cancelSub, progressSub}
	if enrollSub != nil {
		subs = append(subs, enrollSub)
	}
	go func() {
		<-ctx.Done()
		c.shutdown(stopIntake, stopRuns, subs, stopNATS)
	}()
	return nil
}

// shutdown stops the controller in order: no new runs and no API first,
// then the loops that take work, then the runs (which stay running in KV for
// a restart or a peer), then the heartbeat and the watches, and last the
// connection and the server.
func (c *Controller) shutdown(stopIntake, stopRuns context.CancelFunc, subs []*nats.Subscription, stopNATS context.CancelFunc) {
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
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	stopIntake()
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
	stopRuns()
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
	stopNATS()
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
	info := api.ControllerInfo{ID: c.id, APIAddr: c.apiURL, NATSURL: c.natsURL, Status: status,
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
	stream, err := c.js.Stream(ctx, api.StreamResults)
	if err != nil {
		return fmt.Errorf("results stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("results stream: %w", err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		NamePrefix:     ResultsConsumerPrefix(c.id),
		FilterSubjects: []string{api.SubjectResults},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return fmt.Errorf("results consumer: %w", err)
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
	// result.<job>.<step>.<node> or progress.<job>.<step>.<node>
	parts := strings.SplitN(subject, ".", 4)
	if len(parts) != 4 {
		return
	}
	c.mu.Lock()
	r := c.runs[parts[1]]
	c.mu.Unlock()
	if r == nil {
		return
	}
	var tr api.TaskResult
	if err := json.Unmarshal(data, &tr); err != nil {
		c.log.Warn("malformed result", "subject", subject, "err", err)
		return
	}
	if !stored && tr.Status != api.ResultRunning && tr.Status != api.ResultProgress {
		return
	}
	// The subject names the sender; trust it over the body.
	tr.JobID, tr.NodeID = parts[1], parts[3]
	if step, err := strconv.Atoi(parts[2]); err == nil {
		tr.TaskIndex = step
	}
	r.deliver(&tr)
}

// onCancel hears cancel.<job> from any controller's API and stops the run
// if this controller owns it.
func (c *Controller) onCancel(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, "cancel.")
	if isJobTimeoutStop(m) {
		return // the owner's own word to the agents; its run has ended already
	}
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r != nil {
		r.cancel(errCancelled)
	}
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
