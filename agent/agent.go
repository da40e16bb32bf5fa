// Package agent is the GRID process on a host: it registers the node and its
// backend schemas, heartbeats, listens for commands on core NATS subjects,
// runs them through the backend Registry and reports results. DESIGN.md
// ("Agent protocol") is the contract this package implements.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/seal"
)

const (
	// seenMax and seenTTL bound the (job, step, attempt) dedupe memory. The
	// commands stream keeps commands for an hour, so a redelivery older than
	// that cannot happen.
	seenMax = 100_000
	seenTTL = time.Hour
	// finalsMax and finalsMaxBytes bound the finished results kept for
	// answering repeats; they expire with their dedupe key (seenTTL).
	finalsMax      = 10000
	finalsMaxBytes = 64 << 20
	// opTimeout bounds one KV or publish round trip.
	opTimeout = 5 * time.Second
	// drainTimeout bounds the final drain of the connection.
	drainTimeout = 10 * time.Second
)

var (
	errShutdown = errors.New("agent shut down before the task finished")
	errKilled   = errors.New("agent killed")
)

// taskKey identifies one run of one step; a retry has a new attempt.
type taskKey struct {
	job     string
	step    int
	attempt int
}

// Agent is one node of the fleet.
type Agent struct {
	cfg      Config
	id       string
	hostname string
	log      *slog.Logger
	reg      *backends.Registry
	schemas  []api.BackendSchema
	digest   string
	// sealKey opens the sensitive params sealed for this agent; its
	// public half is registered in NodeInfo.
	sealKey *seal.KeyPair
	// site is the node's site, from its enrollment's answer ("" until
	// then, and without enrollment: DefaultSite).
	site string

	nc *nats.Conn
	// schemasJSON is the schema set as registered: digest is its
	// SchemaDigestOf.
	schemasJSON []byte

	// mu guards info, stopping, seen, cancelled, running and cmdSubs.
	mu        sync.Mutex
	info      api.NodeInfo
	stopping  bool
	seen      *recent[taskKey, struct{}]
	finals    *recent[taskKey, finalResult]
	cancelled *recent[string, error] // job → why it was stopped
	// running holds the accepted tasks (queued or running) until they
	// finish; a cancel looks through it for its job's. One set for all
	// jobs: a set per job would be made and dropped for every command.
	running   map[*task]struct{}
	cmdSubs   []*nats.Subscription
	cancelSub *nats.Subscription

	// slots bounds concurrently running tasks.
	slots chan struct{}
	// tasks counts accepted tasks (queued or running) until their final
	// result is published.
	tasks sync.WaitGroup
	// taskCtx is the parent of every task; cancelled when the shutdown grace
	// is over or the agent is killed.
	taskCtx    context.Context
	taskCancel context.CancelCauseFunc
	// stopCh closes when shutdown begins, so queued tasks give up.
	stopCh chan struct{}
	// pubCtx bounds the retries of final results; cancelled once shutdown
	// has given tasks their time, or at a kill, so no publish outlives the
	// connection.
	pubCtx    context.Context
	pubCancel context.CancelFunc
	// resends counts resendFinal goroutines; shutdown waits for them.
	resends sync.WaitGroup

	hbCancel context.CancelFunc
	hbDone   chan struct{}

	started  atomic.Bool
	killOnce sync.Once
	killCh   chan struct{}
	// failCh closes when the agent must stop on its own (see fail); err
	// says why.
	failOnce sync.Once
	failCh   chan struct{}
	err      atomic.Pointer[error]
	// pub is the agent's public NKey on a secured bus ("" otherwise).
	pub string
	// lastRevokedCheck is when the heartbeat last asked (checkRevoked).
	lastRevokedCheck time.Time
	done             chan struct{}

	stats stats
	obs   *observer
}

// stats count what happened to incoming commands; tests read them to assert
// that something was ignored without waiting for a result that never comes.
type stats struct {
	received   atomic.Int64
	ignored    atomic.Int64 // excluded or not part of the resolved target
	duplicates atomic.Int64
	accepted   atomic.Int64
}

// New checks the config and prepares an agent; Start connects it.
func New(cfg Config) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Groups = slices.Clone(cfg.Groups)
	cfg.NATSURLs = slices.Clone(cfg.NATSURLs)
	log := config.Logger(cfg.Logger)
	if cfg.Sandbox != "" {
		if err := os.MkdirAll(cfg.Sandbox, 0o750); err != nil {
			return nil, fmt.Errorf("agent: sandbox: %w", err)
		}
	}
	reg := cfg.Registry
	if reg == nil {
		var err error
		reg, err = builtin.New(cfg.builtinOptions())
		if err != nil {
			return nil, fmt.Errorf("agent: built-in backends: %w", err)
		}
	}
	if len(cfg.Allow) > 0 {
		allow, err := backends.ParseAllowlist(cfg.Allow)
		if err != nil {
			return nil, fmt.Errorf("agent config: allow: %w", err)
		}
		reg.SetAllowlist(allow)
	}
	if len(cfg.CheckOnly) > 0 {
		co, err := backends.ParseAllowlist(cfg.CheckOnly)
		if err != nil {
			return nil, fmt.Errorf("agent config: check_only: %w", err)
		}
		reg.SetCheckOnly(co)
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("agent: data dir: %w", err)
		}
	}
	hostname, err := os.Hostname()
	if err != nil || hostname == "" {
		hostname = cfg.Name
	}
	schemas := reg.Schemas()
	backendNames := make([]string, 0, len(schemas))
	for _, s := range schemas {
		if len(s.Actions) > 0 { // not one whose every action is off
			backendNames = append(backendNames, s.Name)
		}
	}
	sealKey, err := seal.NewKeyPair()
	if err != nil {
		return nil, err
	}
	taskCtx, taskCancel := context.WithCancelCause(context.Background())
	pubCtx, pubCancel := context.WithCancel(context.Background())
	a := &Agent{
		sealKey:    sealKey,
		cfg:        cfg,
		id:         cfg.Name,
		hostname:   hostname,
		log:        log.With("node", cfg.Name),
		reg:        reg,
		schemas:    schemas,
		digest:     api.SchemaDigest(schemas),
		seen:       newRecent[taskKey, struct{}](seenMax, seenTTL),
		finals:     newFinalCache(finalsMax, finalsMaxBytes, seenTTL),
		cancelled:  newRecent[string, error](10_000, seenTTL),
		running:    map[*task]struct{}{},
		slots:      make(chan struct{}, cfg.MaxConcurrent),
		taskCtx:    taskCtx,
		taskCancel: taskCancel,
		pubCtx:     pubCtx,
		pubCancel:  pubCancel,
		stopCh:     make(chan struct{}),
		hbDone:     make(chan struct{}),
		killCh:     make(chan struct{}),
		failCh:     make(chan struct{}),
		done:       make(chan struct{}),
	}
	a.schemasJSON, err = json.Marshal(schemas)
	if err != nil {
		return nil, fmt.Errorf("agent: encode schemas: %w", err)
	}
	a.digest = api.SchemaDigestOf(a.schemasJSON)
	a.info = api.NodeInfo{
		ID:           a.id,
		Hostname:     hostname,
		Groups:       slices.Clone(cfg.Groups),
		Backends:     backendNames,
		Schemas:      schemas,
		SchemaDigest: a.digest,
		SealKey:      sealKey.Public(),
		Status:       api.NodeOffline,
		Version:      Version,
		// What the controllers hold node_offline_after against.
		HeartbeatInterval: api.Duration(cfg.HeartbeatInterval.D()),
	}
	a.obs = newObserver(a)
	return a, nil
}

// ID is the node id.
func (a *Agent) ID() string { return a.id }

// Info returns the node's current registration, schemas included.
func (a *Agent) Info() api.NodeInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	info := a.info
	info.Groups = slices.Clone(info.Groups)
	info.Backends = slices.Clone(info.Backends)
	info.Schemas = slices.Clone(info.Schemas)
	return info
}

// Done closes once the agent has fully stopped (or Start failed).
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err says why the agent stopped on its own (ErrRevoked), once Done is
// closed; nil after a stop that was asked for.
func (a *Agent) Err() error {
	if p := a.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fail stops the agent on its own, with err as its Err.
func (a *Agent) fail(err error) {
	a.failOnce.Do(func() {
		a.err.Store(&err)
		close(a.failCh)
	})
}

// Start connects, waits for a controller's buckets, registers the node,
// subscribes to commands and starts heartbeating. It returns once the node
// is registered and listening; cancelling ctx then shuts the agent down
// gracefully (see Done).
func (a *Agent) Start(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("agent: already started")
	}
	if err := a.startHTTP(); err != nil {
		close(a.done)
		return err
	}
	if err := a.startDebug(); err != nil {
		a.stopHTTP()
		close(a.done)
		return err
	}
	if err := a.start(ctx); err != nil {
		a.stopHTTP()
		a.taskCancel(err)
		a.pubCancel()
		if a.nc != nil {
			a.nc.Close()
		}
		close(a.done)
		return err
	}
	go a.lifecycle(ctx)
	return nil
}

func (a *Agent) start(ctx context.Context) error {
	secure, err := a.secureOptions(ctx)
	if err != nil {
		return fmt.Errorf("agent %s: %w", a.id, err)
	}
	nc, err := bus.Connect("grid-agent "+a.id, a.cfg.NATSURLs, a.log, secure...)
	if err != nil {
		return fmt.Errorf("agent %s: %w", a.id, err)
	}
	a.nc = nc
	// Subscribe before the node shows up online: a controller may dispatch
	// to it the moment it sees the registration.
	if err := a.subscribe(); err != nil {
		return fmt.Errorf("agent %s: %w", a.id, err)
	}
	a.log.Info("agent waiting for a controller to register it", "nats", strings.Join(a.cfg.NATSURLs, ","))
	if err := a.register(ctx); err != nil {
		return fmt.Errorf("agent %s: register node: %w", a.id, err)
	}
	hbCtx, hbCancel := context.WithCancel(context.Background())
	a.hbCancel = hbCancel
	go a.heartbeat(hbCtx)
	a.log.Info("agent registered", "groups", a.cfg.Groups, "backends", a.info.Backends,
		"schema_digest", a.digest, "max_concurrent", a.cfg.MaxConcurrent, "version", Version)
	return nil
}

// register sends the node's record and its schema set to the controllers,
// retrying until one has stored them or ctx ends (no controller may be up
// yet). Each try starts the session anew (online_since), so a broadcast
// resolved while no controller had this node registered is not taken for
// one meant for it.
func (a *Agent) register(ctx context.Context) error {
	for {
		a.mu.Lock()
		a.info.Status = api.NodeOnline
		a.info.OnlineSince = time.Now().UTC()
		a.mu.Unlock()
		err := a.registerOnce(ctx, opTimeout)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for a controller: %w", err)
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a controller: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// registerOnce sends the registration once (status online, a fresh
// last_seen) and waits up to d for a controller's answer.
func (a *Agent) registerOnce(ctx context.Context, d time.Duration) error {
	a.mu.Lock()
	a.info.LastSeen = time.Now().UTC()
	stored := a.info
	a.mu.Unlock()
	stored.Schemas = nil
	data, err := json.Marshal(api.NodeRegistration{Node: stored, Schemas: a.schemasJSON})
	if err != nil {
		return fmt.Errorf("encode registration: %w", err)
	}
	return a.ask(ctx, d, api.NodeRegisterSubject(a.id), data)
}

// ask sends a request to the controllers' intake and waits up to d for
// the answer: nil once stored, the controller's error otherwise.
func (a *Agent) ask(ctx context.Context, d time.Duration, subject string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	reply, err := a.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return err
	}
	return storeReply(reply.Data)
}

// storeReply reads a controller's answer to a report, registration or
// heartbeat.
func storeReply(data []byte) error {
	var r api.StoreReply
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("undecodable answer from the controller: %.200q", data)
	}
	if r.Error != "" {
		return fmt.Errorf("controller: %s", r.Error)
	}
	return nil
}

func (a *Agent) subscribe() error {
	subjects := api.AgentCommandSubjects(a.id, a.site, a.cfg.Groups)
	subs := make([]*nats.Subscription, 0, len(subjects))
	for _, s := range subjects {
		sub, err := a.nc.Subscribe(s, a.onCommand)
		if err != nil {
			for _, prev := range subs {
				_ = prev.Unsubscribe()
			}
			return fmt.Errorf("subscribe %s: %w", s, err)
		}
		subs = append(subs, sub)
	}
	cancelSub, err := a.nc.Subscribe(api.SubjectCancelAll, a.onCancel)
	if err != nil {
		for _, prev := range subs {
			_ = prev.Unsubscribe()
		}
		return fmt.Errorf("subscribe %s: %w", api.SubjectCancelAll, err)
	}
	// Flush makes the server know the interest before we announce the node.
	// A connection dropped meanwhile (a controller closing it to hand it
	// the permissions of an admission it just heard of) re-sends the
	// subscriptions when it reconnects, before anything else it sends, so
	// only a closed connection is an error here.
	if err := a.nc.FlushTimeout(opTimeout); err != nil && a.nc.IsClosed() {
		return fmt.Errorf("flush subscriptions: %w", err)
	} else if err != nil {
		a.log.Info("subscriptions not confirmed yet; the reconnect sends them again", "err", err)
	}
	a.mu.Lock()
	a.cmdSubs = subs
	a.cancelSub = cancelSub
	a.mu.Unlock()
	return nil
}

// putInfo sends NodeInfo with the given status and a fresh last_seen as a
// heartbeat, which a controller stores in the nodes bucket. The record
// holds the digest only, so heartbeats stay small.
func (a *Agent) putInfo(ctx context.Context, status string) error {
	return a.putInfoWithin(ctx, status, opTimeout)
}

func (a *Agent) putInfoWithin(ctx context.Context, status string, d time.Duration) error {
	a.mu.Lock()
	a.info.Status = status
	a.info.LastSeen = time.Now().UTC()
	stored := a.info
	a.mu.Unlock()
	stored.Schemas = nil
	data, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("encode node info: %w", err)
	}
	if err := a.ask(ctx, d, api.NodeHeartbeatSubject(a.id), data); err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", a.id, err)
	}
	return nil
}

func (a *Agent) heartbeat(ctx context.Context) {
	defer close(a.hbDone)
	t := time.NewTicker(a.cfg.HeartbeatInterval.D())
	defer t.Stop()
	reconnects := a.nc.Stats().Reconnects
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A beat waits at most one interval for its answer: while the
		// nodes bucket has no leader (a server of a cluster failing over)
		// a longer wait would stretch the beat, yet the controllers still
		// hear this node (their put is also a core message).
		d := a.cfg.HeartbeatInterval.D()
		// After a reconnect the server may be a fresh one that lost the
		// schemas bucket's contents: register again (schemas included) so
		// controllers can still resolve this node's digest.
		if r := a.nc.Stats().Reconnects; r != reconnects {
			// A revocation closes the connection: the reconnect is the
			// first sign of one.
			if err := a.checkRevoked(ctx); err != nil {
				a.fail(err)
				return
			}
			if err := a.registerOnce(ctx, d); err != nil {
				if ctx.Err() == nil {
					a.log.Warn("registering again after reconnect failed", "err", err)
				}
			} else {
				reconnects = r
			}
		} else if err := a.putInfoWithin(ctx, api.NodeOnline, d); err != nil && ctx.Err() == nil {
			a.log.Warn("heartbeat failed", "err", err)
			// A revoked agent's connection may only ask how its
			// enrollment stands: stop rather than fail every beat.
			if err := a.checkRevoked(ctx); err != nil {
				a.fail(err)
				return
			}
		}
		a.sweep(time.Now())
	}
}

// sweep drops the dedupe keys, cancelled jobs and recorded results that
// expired, which otherwise happens only when commands arrive: an agent that
// went idle gives their memory back.
func (a *Agent) sweep(now time.Time) {
	a.mu.Lock()
	a.seen.sweep(now)
	a.finals.sweep(now)
	a.cancelled.sweep(now)
	a.mu.Unlock()
}

// Kill closes the connection abruptly without marking the node offline, as
// a crash would; tasks are interrupted and Done closes soon after. For tests.
func (a *Agent) Kill() {
	a.killOnce.Do(func() {
		if a.nc != nil {
			a.nc.Close()
		}
		close(a.killCh)
	})
}

func (a *Agent) lifecycle(ctx context.Context) {
	defer close(a.done)
	defer a.stopHTTP()
	select {
	case <-ctx.Done():
		a.shutdown()
	case <-a.killCh:
		a.crash()
	case <-a.failCh:
		a.log.Error("agent stopping", "err", *a.err.Load())
		a.nc.Close()
		a.crash()
	}
}

// beginStop stops taking commands. The cancel subscription stays so that a
// cancel can still interrupt tasks during the grace period.
func (a *Agent) beginStop() {
	a.mu.Lock()
	a.stopping = true
	close(a.stopCh)
	subs := a.cmdSubs
	a.cmdSubs = nil
	a.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
}

// waitTasks waits up to d for accepted tasks to publish their final result.
func (a *Agent) waitTasks(d time.Duration) bool {
	idle := make(chan struct{})
	go func() {
		a.tasks.Wait()
		close(idle)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

func (a *Agent) shutdown() {
	a.log.Info("agent shutting down", "grace", a.cfg.ShutdownGrace)
	a.beginStop()
	if !a.waitTasks(a.cfg.ShutdownGrace.D()) {
		a.log.Warn("shutdown grace over; interrupting running tasks")
		a.taskCancel(errShutdown)
		// Interrupted tasks still publish their failed result (bounded by
		// the publish retries).
		if !a.waitTasks(30 * time.Second) {
			a.log.Error("tasks did not finish after being interrupted; leaving them")
		}
	}
	a.taskCancel(errShutdown)
	// Tasks had their time to publish; stop whatever still retries.
	a.pubCancel()
	a.resends.Wait()
	a.hbCancel()
	<-a.hbDone
	// The heartbeat has stopped, so nothing re-puts "online" after this.
	if err := a.putInfo(context.Background(), api.NodeOffline); err != nil {
		a.log.Warn("marking node offline failed", "err", err)
	}
	a.mu.Lock()
	cancelSub := a.cancelSub
	a.mu.Unlock()
	if cancelSub != nil {
		_ = cancelSub.Unsubscribe()
	}
	closed := make(chan struct{})
	a.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := a.nc.Drain(); err != nil {
		a.nc.Close()
	} else {
		select {
		case <-closed:
		case <-time.After(drainTimeout):
			a.nc.Close()
		}
	}
	a.log.Info("agent stopped")
}

func (a *Agent) crash() {
	a.log.Warn("agent killed")
	a.beginStop()
	a.taskCancel(errKilled)
	a.pubCancel()
	a.hbCancel()
	<-a.hbDone
	// Final publishes fail at once on the closed connection.
	a.waitTasks(10 * time.Second)
	a.resends.Wait()
}

// onCommand runs on the subscription's goroutine, so it only decides and
// hands the command to a task goroutine. The command is decoded straight
// into its task, and the task's logger is built only when something is
// logged.
func (a *Agent) onCommand(msg *nats.Msg) {
	a.stats.received.Add(1)
	t := &task{agentLog: a.log}
	cmd := &t.cmd
	if err := json.Unmarshal(msg.Data, cmd); err != nil {
		a.log.Warn("dropping undecodable command", "subject", msg.Subject, "err", err)
		return
	}
	if !api.ValidToken(cmd.JobID) {
		a.log.Warn("dropping command with an invalid job id", "subject", msg.Subject, "job", cmd.JobID)
		return
	}
	t.parent = bus.ExtractTrace(context.Background(), msg)
	broadcast := !api.IsNodeCommand(msg.Subject)
	key := taskKey{job: cmd.JobID, step: cmd.TaskIndex, attempt: cmd.Attempt}
	now := time.Now()

	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		t.log().Info("shutting down; not taking the command", "task", cmd.Task.Name())
		return
	}
	if broadcast {
		if reason := a.skipBroadcast(cmd); reason != "" {
			a.mu.Unlock()
			a.stats.ignored.Add(1)
			if a.log.Enabled(context.Background(), slog.LevelDebug) {
				t.log().Debug("ignoring broadcast", "subject", msg.Subject, "reason", reason)
			}
			return
		}
	}
	if a.seen.has(key, now) {
		f, done := a.finals.get(key, now)
		if done {
			// Counted under mu while not stopping, so shutdown waits for it.
			a.resends.Add(1)
		}
		a.mu.Unlock()
		a.stats.duplicates.Add(1)
		if done {
			t.log().Info("repeated command for a finished task; sending its result again", "subject", msg.Subject)
			go a.resendFinal(t.log, f)
			return
		}
		t.log().Info("ignoring duplicate command", "subject", msg.Subject)
		return
	}
	a.seen.add(key, struct{}{}, now)
	a.newTask(t)
	if why, ok := a.cancelled.get(cmd.JobID, now); ok {
		t.cancel(why)
	}
	a.tasks.Add(1)
	a.mu.Unlock()
	a.stats.accepted.Add(1)
	go a.runTask(t)
}

// skipBroadcast says why this node must not run a broadcast, or "". Callers
// hold a.mu.
func (a *Agent) skipBroadcast(cmd *api.Command) string {
	if slices.Contains(cmd.Exclude, a.id) {
		return "excluded"
	}
	// Between subscribing and registering no controller can have resolved
	// this session into a target.
	if a.info.OnlineSince.IsZero() {
		return "not registered yet"
	}
	// A zero resolved_at carries no constraint, so a controller that does
	// not set it still reaches its nodes.
	if !cmd.ResolvedAt.IsZero() && a.info.OnlineSince.After(cmd.ResolvedAt) {
		return "came online after the target was resolved"
	}
	return ""
}

// errJobCancelled marks a task stopped because its job was cancelled, so the
// result can say so and the controller does not take it for a failure.
var errJobCancelled = errors.New("cancelled")

func cancelledErr(job string) error { return fmt.Errorf("job %s %w", job, errJobCancelled) }

// onCancel interrupts every task of the job, queued or running, and
// remembers the job so a command still in flight does not start it again.
func (a *Agent) onCancel(msg *nats.Msg) {
	job := api.CancelledJob(msg.Subject)
	if !api.ValidToken(job) {
		return
	}
	why := stopCause(job, msg)
	a.mu.Lock()
	a.cancelled.add(job, why, time.Now())
	n := 0
	for t := range a.running {
		if t.cmd.JobID == job {
			t.cancel(why)
			n++
		}
	}
	a.mu.Unlock()
	a.log.Info("job stopped", "job", job, "tasks", n, "reason", why)
}
