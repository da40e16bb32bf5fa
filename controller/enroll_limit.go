package controller

import (
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// maxEnrollRequest caps an enrollment request. A real one is a node id, a
// few groups and a token: a few hundred bytes. Anyone with a key may send
// one (and the server takes messages of up to 8 MiB), so anything larger
// is dropped unread and unanswered.
const maxEnrollRequest = 4 << 10

// The enrollment subscription's pending limits: past them the client drops
// messages (counted, logged) rather than buffering a flood, so the
// controller's connection never becomes the server's slow consumer and its
// other subscriptions are not held up.
const (
	enrollPendingMsgs  = 1024
	enrollPendingBytes = 1024 * maxEnrollRequest
)

// Enrollment rate limits. A key asks once per enrollRetry (2s) while
// pending; a burst covers restarts. Strangers (unknown keys without a
// genuine join token) share one budget, and requests that carry a genuine
// token or come from an enrolled key another, so a flood of strangers,
// however many keys it uses, cannot crowd out a real enrollment.
const (
	enrollKeyRate      = rate.Limit(1)
	enrollKeyBurst     = 5
	enrollStrangerRate = rate.Limit(20)
	enrollStrangerMax  = 40
	enrollVouchedRate  = rate.Limit(200)
	enrollVouchedMax   = 400
	// enrollKeysTracked bounds the per-key limiters kept in memory.
	enrollKeysTracked = 10000
	// A key with enrollFloodKick requests over its rate (within a minute)
	// floods: its connections to this server are closed and it may not
	// connect for enrollBan, except as an admitted agent. However fast the
	// handler, a client on a fast link can fill the subscription's pending
	// queue, where a real request would be dropped with the flood; the
	// server's own authentication is what bounds a flood's rate then.
	enrollFloodKick = 20
	enrollBan       = time.Minute
)

// enrollGate drops enrollment requests before they cost anything: too
// large, too frequent from one key, or over their class's budget.
type enrollGate struct {
	log       *slog.Logger
	strangers *rate.Limiter
	vouched   *rate.Limiter
	logs      *rate.Limiter
	refusals  *rate.Limiter

	mu   sync.Mutex
	keys map[string]*keyLimit

	oversized, perKey, overBudget, kicked atomic.Int64
	// sub is the enrollment subscription, for its own drop count.
	sub atomic.Pointer[nats.Subscription]
}

type keyLimit struct {
	lim    *rate.Limiter
	last   time.Time
	drops  int
	since  time.Time // of the drops counted
	banned time.Time // refused to connect until then
}

func newEnrollGate(log *slog.Logger) *enrollGate {
	return &enrollGate{
		log:       log,
		strangers: rate.NewLimiter(enrollStrangerRate, enrollStrangerMax),
		vouched:   rate.NewLimiter(enrollVouchedRate, enrollVouchedMax),
		logs:      rate.NewLimiter(rate.Every(10*time.Second), 1),
		refusals:  rate.NewLimiter(rate.Every(time.Second), 20),
		keys:      map[string]*keyLimit{},
	}
}

// admit decides before decoding: the size cap and the key's own rate.
// kick says the key floods: close its connections.
func (g *enrollGate) admit(key string, size int, now time.Time) (ok, kick bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.limit(key, now)
	if size > maxEnrollRequest {
		g.oversized.Add(1)
		g.report()
		return false, g.dropped(kl, now)
	}
	kl.last = now
	if kl.lim.AllowN(now, 1) {
		return true, false
	}
	g.perKey.Add(1)
	g.report()
	return false, g.dropped(kl, now)
}

// dropped counts a key's drop and says whether it now floods. g.mu held.
func (g *enrollGate) dropped(kl *keyLimit, now time.Time) bool {
	if now.Sub(kl.since) > time.Minute {
		kl.drops, kl.since = 0, now
	}
	kl.drops++
	if kl.drops < enrollFloodKick || now.Before(kl.banned) {
		return false // not yet, or kicked already: its backlog drains
	}
	kl.drops, kl.since, kl.banned = 0, now, now.Add(enrollBan)
	return true
}

// banned reports whether a key flooded lately.
func (g *enrollGate) banned(key string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.keys[key]
	return kl != nil && now.Before(kl.banned)
}

// limit returns the key's limiter, made on first use. g.mu held.
func (g *enrollGate) limit(key string, now time.Time) *keyLimit {
	kl := g.keys[key]
	if kl == nil {
		if len(g.keys) >= enrollKeysTracked {
			for k, v := range g.keys {
				if now.Sub(v.last) > time.Minute && !now.Before(v.banned) {
					delete(g.keys, k)
				}
			}
			if len(g.keys) >= enrollKeysTracked {
				clear(g.keys) // a flood of fresh keys: start over
			}
		}
		kl = &keyLimit{lim: rate.NewLimiter(enrollKeyRate, enrollKeyBurst), last: now, since: now}
		g.keys[key] = kl
	}
	return kl
}

// budget takes one request from its class's budget.
func (g *enrollGate) budget(vouched bool, now time.Time) bool {
	l := g.strangers
	if vouched {
		l = g.vouched
	}
	if l.AllowN(now, 1) {
		return true
	}
	g.overBudget.Add(1)
	g.report()
	return false
}

// kick closes a flooding key's connections to this server (the ban then
// keeps it out for a while), off the subscription's goroutine. Of an
// admitted key only the enrollment connections go: its agent connection
// keeps its node working (an agent asks at most once per reconnect; a
// key that floods is one an operator should revoke, and the log names it).
func (s *security) kick(key string, admitted bool) {
	s.gate.kicked.Add(1)
	s.gate.logRefusal("closing the connections of a key that floods enrollment requests; it may not connect for a while",
		"key", key, "for", enrollBan, "admitted", admitted)
	go s.disconnectEnrolling(key, admitted)
}

// report logs the drops so far, at most once per 10s.
func (g *enrollGate) report() {
	if !g.logs.Allow() {
		return
	}
	var sub int
	if p := g.sub.Load(); p != nil {
		sub, _ = p.Dropped()
	}
	g.log.Warn("dropping enrollment requests (a flood?); totals since start",
		"oversized", g.oversized.Load(), "over_key_rate", g.perKey.Load(), "over_budget", g.overBudget.Load(),
		"over_pending_limits", sub, "keys_disconnected", g.kicked.Load(), "max_bytes", maxEnrollRequest)
}

// logRefusal logs a refusal's details, at a bounded rate: strangers may
// ask often.
func (g *enrollGate) logRefusal(msg string, args ...any) {
	if g.refusals.Allow() {
		g.log.Warn(msg, args...)
	}
}

// fileToken caches the data dir's join-token file for a second: every
// request from a stranger compares against it, and a flood should not
// mean as many file reads. Replacing the file still rotates the token
// (within a second).
type fileToken struct {
	mu  sync.Mutex
	at  time.Time
	tok string
}

func (s *security) cachedJoinToken(now time.Time) string {
	f := &s.fileTok
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.at) > time.Second || now.Before(f.at) {
		t, err := pki.ReadToken(filepath.Join(s.dataDir, pki.JoinTokenFile))
		if err != nil {
			s.log.Warn("join token unreadable; refusing enrollments without a scoped token", "err", err)
			t = ""
		}
		f.tok, f.at = t, now
	}
	return f.tok
}

// subscribe starts answering enrollment requests (a queue group: one
// controller answers each), with pending limits that drop a flood.
func (s *security) subscribe(nc *nats.Conn) (*nats.Subscription, error) {
	sub, err := nc.QueueSubscribe(api.SubjectEnrollAll, "grid-enroll", s.onEnroll)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(enrollPendingMsgs, enrollPendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	s.gate.sub.Store(sub)
	return sub, nil
}

// isAdmitted reports whether key is an admitted agent's.
func (s *security) isAdmitted(key string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.byKey[key]
	return e != nil && e.Status == api.EnrollAdmitted
}
