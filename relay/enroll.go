package relay

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/time/rate"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Limits of the enrollment proxy. Every request it forwards crosses the
// site's link with the site's rights on the hub, so it forwards only what
// an agent really sends: small requests, at an agent's pace.
const (
	// maxEnrollRequest caps a request (a node id, a few groups, a token:
	// a few hundred bytes); larger ones are dropped unread.
	maxEnrollRequest = 4 << 10
	// A key asks once per 2s while pending, and once per few seconds to
	// check it was not revoked; a burst covers restarts.
	enrollKeyRate  = rate.Limit(1)
	enrollKeyBurst = 5
	// Keys the roster does not know share one budget, so that a flood of
	// fresh keys cannot fill the link or crowd out the site's agents.
	enrollStrangerRate  = rate.Limit(20)
	enrollStrangerBurst = 40
	// enrollKeysTracked bounds the per-key limiters kept.
	enrollKeysTracked = 10000
	// enrollInFlight bounds the requests waiting for the hub at once.
	// Strangers have slots of their own: the hub leaves their requests
	// unanswered past its own strangers' budget, and each then holds its
	// slot until the timeout; in one pool they would take every slot the
	// site's known agents need.
	enrollInFlight          = 64
	enrollStrangersInFlight = 16
	// Past these the subscription drops requests rather than buffer a
	// flood in the relay.
	enrollPendingMsgs  = 1024
	enrollPendingBytes = enrollPendingMsgs * maxEnrollRequest
	// A key that sends floodOver requests over its rate within
	// floodWindow floods: the proxy's queue is shared, and a client on a
	// fast link outruns any handler, so a real request would be dropped
	// with the flood. Its connections are closed and the key refused for
	// floodWindow (unless admitted), as a controller does.
	floodOver   = 20
	floodWindow = time.Minute
	// refusalLogEvery bounds the log lines about dropped requests.
	refusalLogEvery = 10 * time.Second
)

// enrollProxy answers the site's agents' enrollment requests
// (grid.enroll.<key>) with the hub's answer: it sends each one on to
// grid.site.<site>.enroll.<key>, where the hub enrolls the key at this
// site, and writes the answer back to the agent. The server lets a
// connection publish only on its own key's subject, so the subject names
// the sender; the answer goes only into that key's own inbox, since the
// relay writes it with its own rights and a reply subject is whatever the
// sender chose.
type enrollProxy struct {
	site    string
	nc      *nats.Conn
	log     *slog.Logger
	roster  *roster
	timeout time.Duration
	// admitted is called before the answer "admitted" is passed on for a
	// key the roster does not admit yet, so that the agent's next
	// connection gets its rights.
	admitted func(ctx context.Context)

	strangers *rate.Limiter
	// sources, when set, gives each host's strangers a share of their
	// own before the shared budget.
	sources *sources
	// inFlight and strangersInFlight are the slots of known keys'
	// requests and of strangers'.
	inFlight          chan struct{}
	strangersInFlight chan struct{}

	// flooding, when set, is told of a key that floods.
	flooding func(key string)

	mu   sync.Mutex
	keys map[string]*rate.Limiter
	over map[string]*overCount

	sub    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	// runMu orders starting a forward against stop: none starts once
	// stop has begun waiting.
	runMu   sync.Mutex
	stopped bool
	wg      sync.WaitGroup
	dropped atomic.Int64
	lastLog atomic.Int64
}

func newEnrollProxy(site string, nc *nats.Conn, log *slog.Logger, ros *roster, timeout time.Duration, admitted func(context.Context)) *enrollProxy {
	ctx, cancel := context.WithCancel(context.Background())
	return &enrollProxy{
		site: site, nc: nc, log: log, roster: ros, timeout: timeout, admitted: admitted,
		strangers:         rate.NewLimiter(enrollStrangerRate, enrollStrangerBurst),
		inFlight:          make(chan struct{}, enrollInFlight),
		strangersInFlight: make(chan struct{}, enrollStrangersInFlight),
		keys:              map[string]*rate.Limiter{},
		over:              map[string]*overCount{},
		ctx:               ctx, cancel: cancel,
	}
}

// start subscribes to the site's agents' enrollment requests.
func (p *enrollProxy) start() error {
	sub, err := p.nc.Subscribe(api.SubjectEnrollAll, p.handle)
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(enrollPendingMsgs, enrollPendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	p.sub = sub
	return nil
}

// stop unsubscribes and waits for the requests in flight.
func (p *enrollProxy) stop() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	p.runMu.Lock()
	p.stopped = true
	p.runMu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// handle decides on one request: everything that can be refused is
// refused here, before anything crosses the link.
func (p *enrollProxy) handle(m *nats.Msg) {
	key := api.EnrollKey(m.Subject)
	switch {
	case !nkeys.IsValidPublicUserKey(key):
		p.drop("not a key's subject", m)
		return
	case len(m.Data) > maxEnrollRequest:
		// No agent sends one: it counts towards the key's flood as a
		// request over its rate would (a flood of them takes the queue
		// as much as any).
		p.overRate(key)
		p.drop("too large", m)
		return
	case !p.allow(key):
		p.drop("too frequent", m)
		return
	case !ownInbox(m.Reply, key):
		// Answered elsewhere, the hub's answer would be written with the
		// relay's rights where the sender chose.
		p.drop("reply subject is not the sender's own inbox", m)
		return
	}
	slots := p.inFlight
	if !p.roster.knows(key) {
		slots = p.strangersInFlight
	}
	p.runMu.Lock()
	defer p.runMu.Unlock()
	if p.stopped {
		return
	}
	select {
	case slots <- struct{}{}:
	default:
		p.drop("too many requests waiting for the hub", m)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-slots }()
		p.forward(key, m.Data, m.Reply)
	}()
}

// forward sends a request on to the hub and its answer back to the agent.
// No answer in time: none to the agent either (it asks again).
func (p *enrollProxy) forward(key string, body []byte, reply string) {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	resp, err := p.nc.RequestWithContext(ctx, api.SiteEnrollSubject(p.site, key), body)
	if errors.Is(err, nats.ErrNoResponders) {
		// No link, or no controller yet: the agent hears what it would
		// from a server with no controller, and asks again without
		// waiting out its timeout.
		_ = p.nc.PublishMsg(&nats.Msg{Subject: reply, Header: nats.Header{"Status": []string{"503"}}})
		return
	}
	if err != nil {
		p.log.Debug("enrollment request unanswered by the hub", "key", key, "err", err)
		return
	}
	var r api.EnrollReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		p.log.Warn("dropped a malformed enrollment answer from the hub", "key", key, "err", err)
		return
	}
	if r.Status == api.EnrollAdmitted {
		if _, ok := p.roster.admitted(key); !ok {
			p.admitted(ctx)
		}
	}
	if err := p.nc.Publish(reply, resp.Data); err != nil {
		p.log.Warn("pass on an enrollment answer", "key", key, "err", err)
	}
}

// allow applies the per-key rate, and for keys the roster does not know
// their host's share and the strangers' shared budget.
func (p *enrollProxy) allow(key string) bool {
	p.mu.Lock()
	lim, ok := p.keys[key]
	if !ok {
		if len(p.keys) >= enrollKeysTracked {
			// Forget them all rather than grow: at worst a key gets a
			// fresh burst, and the strangers' budget still holds.
			clear(p.keys)
		}
		lim = rate.NewLimiter(enrollKeyRate, enrollKeyBurst)
		p.keys[key] = lim
	}
	p.mu.Unlock()
	if !lim.Allow() {
		p.overRate(key)
		return false
	}
	if p.roster.knows(key) {
		return true
	}
	if p.sources != nil && !p.sources.allow(key) {
		return false
	}
	return p.strangers.Allow()
}

// overRate counts a request of key over its rate, and tells of the key
// when it floods.
func (p *enrollProxy) overRate(key string) {
	if p.flooded(key, time.Now()) && p.flooding != nil {
		p.flooding(key)
	}
}

// overCount counts a key's requests over its rate since a time.
type overCount struct {
	since time.Time
	n     int
}

// flooded counts a request of key over its rate and reports whether the
// key just reached floodOver within floodWindow.
func (p *enrollProxy) flooded(key string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.over[key]
	if o == nil || now.Sub(o.since) > floodWindow {
		if len(p.over) >= enrollKeysTracked {
			clear(p.over)
		}
		o = &overCount{since: now}
		p.over[key] = o
	}
	o.n++
	return o.n == floodOver
}

// ownInbox reports whether reply lies in the inbox of key: only the holder
// of the key may subscribe there.
func ownInbox(reply, key string) bool {
	want := api.AgentInboxPrefix(key) + "."
	return len(reply) > len(want) && strings.HasPrefix(reply, want) && !strings.ContainsAny(reply, "*> \t\r\n")
}

func (p *enrollProxy) drop(why string, m *nats.Msg) {
	n := p.dropped.Add(1)
	now := time.Now().UnixNano()
	if last := p.lastLog.Load(); now-last >= int64(refusalLogEvery) && p.lastLog.CompareAndSwap(last, now) {
		p.log.Warn("dropped an enrollment request", "why", why, "subject", m.Subject, "reply", m.Reply, "dropped_total", n)
	}
}
