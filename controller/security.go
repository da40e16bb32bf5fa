package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/busperm"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// security is the embedded server's transport security: TLS from the data
// dir's CA, and the per-connection decision (server.Authentication) that
// gives controllers everything and each admitted agent only its own
// subjects. Enrollments live in the enrollments bucket; every controller
// keeps them in memory from a watch, so an approval or revocation through
// any controller applies on all of them at once.
type security struct {
	log *slog.Logger
	// record writes an audit record (an enrollment stored); nil records
	// nothing.
	record    func(api.AuditRecord)
	dataDir   string
	autoAdmit bool

	ca         *pki.CA
	serverTLS  *tls.Config
	clusterTLS *tls.Config
	clientTLS  *tls.Config

	ns atomic.Pointer[server.Server]
	kv jetstream.KeyValue
	// forget drops a node from the registry when it is no longer admitted.
	forget func(id string)
	// replies answers enrollment requests in the requester's inbox only.
	replies *replies

	// joins are the scoped join tokens (nil until the bucket is open).
	joins *joinTokens
	// sites are the sites whose relays may connect on the leaf port (nil
	// until their bucket is loaded: leaf connections are refused until
	// then).
	sites atomic.Pointer[sites]
	gate  *enrollGate
	// siteGate limits the requests sites' relays send on per key (only
	// its admit is used; the budgets are gate's, shared).
	siteGate *enrollGate
	fileTok  fileToken
	live     liveConns

	mu      sync.RWMutex
	byNode  map[string]*api.Enrollment
	byKey   map[string]*api.Enrollment
	revoked map[string]bool
}

// newSecurity loads or creates the CA, the server and controller
// certificates and the join token in the data dir.
func newSecurity(cfg Config, log *slog.Logger) (*security, error) {
	dir := cfg.DataDir
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	hosts := pki.ServerHosts([]string{cfg.NATSAddr, cfg.ClusterAddr, cfg.APIAddr, cfg.LeafAddr}, cfg.TLSHosts)
	// The server certificate also authenticates this server to its peers
	// on the routes, hence the client usage.
	srv, err := pki.EnsureCert(ca, filepath.Join(dir, pki.ServerCertFile), filepath.Join(dir, pki.ServerKeyFile),
		pki.CertSpec{CommonName: "grid controller", Hosts: hosts, Server: true, Client: true})
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	ctl, err := pki.EnsureCert(ca, filepath.Join(dir, pki.ControllerCertFile), filepath.Join(dir, pki.ControllerKeyFile),
		pki.CertSpec{CommonName: "grid controller client", URIs: []string{pki.ControllerURI}, Client: true})
	if err != nil {
		return nil, fmt.Errorf("controller certificate: %w", err)
	}
	if _, err := pki.EnsureToken(filepath.Join(dir, pki.JoinTokenFile)); err != nil {
		return nil, fmt.Errorf("join token: %w", err)
	}
	pool := ca.Pool()
	return &security{
		log: log, dataDir: dir, autoAdmit: cfg.autoAdmit(), ca: ca,
		serverTLS: &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: pool,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12},
		clusterTLS: &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: pool, RootCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
		clientTLS: &tls.Config{Certificates: []tls.Certificate{ctl}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		byNode:    map[string]*api.Enrollment{}, byKey: map[string]*api.Enrollment{}, revoked: map[string]bool{},
		gate: newEnrollGate(log), siteGate: newEnrollGate(log),
	}, nil
}

// clientOptions connect as a controller (full permissions).
func (s *security) clientOptions() []nats.Option {
	return []nats.Option{nats.Secure(s.clientTLS.Clone())}
}

// Check decides on one client connection: a controller (a client
// certificate of the CA naming ControllerURI) may do anything; an NKey
// holder that proves its key gets the permissions of its enrollment, or,
// when not enrolled yet or revoked, only its enrollment request (whose
// answer tells a revoked agent so); anything else is refused. A second
// real connection of an admitted key is refused while the first is live
// (admitOnce).
func (s *security) Check(c server.ClientAuthentication) bool {
	if c.Kind() == server.LEAF {
		st := s.sites.Load()
		return st != nil && st.checkLeaf(c)
	}
	if c.Kind() != server.CLIENT {
		return false
	}
	if cs := c.GetTLSConnectionState(); cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 &&
		pki.HasURI(cs.VerifiedChains[0][0], pki.ControllerURI) {
		c.RegisterUser(&server.User{Username: "controller:" + cs.VerifiedChains[0][0].Subject.CommonName})
		return true
	}
	o := c.GetOpts()
	if !busperm.ProvesKey(c) {
		return false
	}
	s.mu.RLock()
	e := s.byKey[o.Nkey]
	revoked := s.revoked[o.Nkey]
	s.mu.RUnlock()
	// A node of a site holds its rights while its site lives: revoking a
	// site ends what the keys its relay enrolled can do here too.
	admitted := e != nil && e.Status == api.EnrollAdmitted && s.siteLive(e.Site)
	enrolling := strings.HasPrefix(o.Name, api.EnrollConnName)
	// A key that flooded the enrollment subject lately gets no connection
	// that may only ask to enroll (an admitted agent's own connection is
	// spared: cutting it would stop its node's work).
	if (!admitted || enrolling) && s.gate.banned(o.Nkey, time.Now().UTC()) {
		return false
	}
	switch {
	case revoked:
		// Only to hear "revoked" in answer to its enrollment request, so
		// that the agent stops instead of retrying forever.
		c.RegisterUser(&server.User{Username: "revoked", Permissions: busperm.Enrollee(o.Nkey)})
	case enrolling:
		// The agent's enrollment connection only ever asks to be
		// enrolled: it gets that alone, so that sparing it from the
		// duplicate check (and from disconnect) gives a name nothing.
		c.RegisterUser(&server.User{Username: "enrolling", Permissions: busperm.Enrollee(o.Nkey)})
	case admitted:
		if !s.admitOnce(c, o.Nkey, e.NodeID) {
			return false
		}
		c.RegisterUser(&server.User{Username: "node:" + e.NodeID, Permissions: busperm.Agent(e)})
	default:
		c.RegisterUser(&server.User{Username: "enrolling", Permissions: busperm.Enrollee(o.Nkey)})
	}
	return true
}

// siteLive reports whether a node's site lives: the hub's own always
// does; another only while its record is there and not revoked.
func (s *security) siteLive(site string) bool {
	if site == "" || site == api.DefaultSite {
		return true
	}
	st := s.sites.Load()
	return st != nil && st.exists(site)
}

// siteKeys are the keys of a site's nodes.
func (s *security) siteKeys(site string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []string
	for _, e := range s.byNode {
		if e.Site == site {
			keys = append(keys, e.PublicKey)
		}
	}
	return keys
}

// admitted returns the groups a node id was admitted with.
func (s *security) admitted(id string) (admittedAs, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.byNode[id]
	if e == nil || e.Status != api.EnrollAdmitted {
		return admittedAs{}, false
	}
	return admittedAs{groups: e.Groups, site: e.Site}, true
}

// admittedAs is what an admitted node's records must say of it: the
// groups and the site of its enrollment, whatever it sent.
type admittedAs struct {
	groups []string
	site   string
}

// watch follows the enrollments bucket until ctx ends, from a goroutine
// counted in wg; it returns once the stored enrollments are loaded.
func (s *security) watch(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue) error {
	s.kv = kv
	return followLoaded(ctx, wg, kv, s.log, "enrollments", s.apply)
}

func (s *security) apply(kve jetstream.KeyValueEntry) {
	var next *api.Enrollment
	if kve.Operation() == jetstream.KeyValuePut {
		var e api.Enrollment
		if err := json.Unmarshal(kve.Value(), &e); err != nil || e.NodeID != kve.Key() {
			s.log.Warn("ignoring malformed enrollment", "node", kve.Key(), "err", err)
			return
		}
		next = &e
	}
	s.set(kve.Key(), next)
}

// set records a node's enrollment (nil: none) and closes the connections
// whose permissions it changes.
func (s *security) set(id string, next *api.Enrollment) {
	s.mu.Lock()
	prev := s.byNode[id]
	if prev != nil && s.byKey[prev.PublicKey] == prev {
		delete(s.byKey, prev.PublicKey)
	}
	if next == nil {
		delete(s.byNode, id)
	} else {
		s.byNode[next.NodeID] = next
		s.byKey[next.PublicKey] = next
		for _, k := range next.RevokedKeys {
			s.revoked[k] = true
		}
		if next.Status == api.EnrollRevoked {
			s.revoked[next.PublicKey] = true
		}
	}
	s.mu.Unlock()
	wasAdmitted := prev != nil && prev.Status == api.EnrollAdmitted
	isAdmitted := next != nil && next.Status == api.EnrollAdmitted
	// A site's relays hold the rights of its admitted nodes: when those
	// change, they reconnect with the new set.
	if st := s.sites.Load(); st != nil && (wasAdmitted || isAdmitted) {
		// Both are set when both were and are admitted.
		changed := wasAdmitted != isAdmitted || prev.PublicKey != next.PublicKey || prev.Site != next.Site ||
			!slices.Equal(prev.Groups, next.Groups)
		if changed {
			if prev != nil {
				st.membershipChanged(prev.Site)
			}
			if next != nil && (prev == nil || next.Site != prev.Site) {
				st.membershipChanged(next.Site)
			}
		}
	}
	// A connection keeps the permissions it was given when it connected:
	// when they shrink or go, close it, and the agent's reconnect gets what
	// the enrollment now says (or nothing).
	if wasAdmitted && (!isAdmitted || next.PublicKey != prev.PublicKey || !slices.Equal(next.Groups, prev.Groups)) {
		s.disconnect(prev.PublicKey, false)
		if s.forget != nil && !isAdmitted {
			s.forget(prev.NodeID)
		}
	}
	// A newly admitted key may already hold a connection with only the
	// enrollment permissions (it connected to this server before this
	// controller heard of the admission): close it so it comes back with
	// its own. Its enrollment connection stays, to get the answer.
	if isAdmitted && (!wasAdmitted || prev.PublicKey != next.PublicKey) {
		s.disconnect(next.PublicKey, true)
	}
}

// disconnectEnrolling closes the key's connections that may only ask to
// enroll (onlyEnrolling), or all of them.
func (s *security) disconnectEnrolling(key string, onlyEnrolling bool) {
	if !onlyEnrolling {
		s.disconnect(key, false)
		return
	}
	ns := s.ns.Load()
	if ns == nil {
		return
	}
	cz, err := ns.Connz(&server.ConnzOptions{User: key, Username: true, Limit: 1 << 20})
	if err != nil {
		return
	}
	for _, ci := range cz.Conns {
		if strings.HasPrefix(ci.Name, api.EnrollConnName) {
			_ = ns.DisconnectClientByID(ci.Cid)
		}
	}
}

// disconnect closes this server's client connections authenticated with
// the key, except, with keepEnrolling, those that call themselves the
// agent's enrollment connection (a name proves nothing, but sparing one
// only leaves it with the enrollment permissions it has).
func (s *security) disconnect(key string, keepEnrolling bool) {
	ns := s.ns.Load()
	if ns == nil {
		return
	}
	cz, err := ns.Connz(&server.ConnzOptions{User: key, Username: true, Limit: 1 << 20})
	if err != nil {
		s.log.Warn("list connections to close", "err", err)
		return
	}
	for _, ci := range cz.Conns {
		if keepEnrolling && strings.HasPrefix(ci.Name, api.EnrollConnName) {
			continue
		}
		s.live.forget(key, ci.Cid)
		if err := ns.DisconnectClientByID(ci.Cid); err == nil {
			s.log.Info("closed the connection of a key no longer admitted", "key", key, "cid", ci.Cid)
		}
	}
}

// onEnroll answers an enrollment request. The subject names the key (the
// server lets each connection publish only on its own). Requests too large
// or too frequent are dropped unanswered (enrollGate).
func (s *security) onEnroll(m *nats.Msg) {
	key := api.EnrollKey(m.Subject)
	// Only to the key's own inbox: any key may ask, and an answer written
	// elsewhere would be written with this controller's rights.
	s.answerEnroll(m, key, "", func(m *nats.Msg) bool { return s.replies.ownInbox(m, key) })
}

// answerEnroll answers the enrollment request of key, at site ("" for the
// hub's own agents), if replyOK accepts its reply subject.
func (s *security) answerEnroll(m *nats.Msg, key, site string, replyOK func(*nats.Msg) bool) {
	now := time.Now().UTC()
	// Every message a key sends counts against its rate, answerable or
	// not: a flood without reply subjects is a flood too. A site's relay
	// names the key in its subject without proving it to the hub, so its
	// requests are counted apart from the key's own (else one relay could
	// use up, and get banned, any agent's key) and never close the key's
	// connections here: its agent is at the relay, which limits it.
	// They are kept in a table of their own, too: a relay names keys for
	// free, and a flood of fresh keys starts a table over, bans included.
	gate, limitKey := s.gate, key
	if site != "" {
		gate, limitKey = s.siteGate, site+":"+key
	}
	if ok, kick := gate.admit(limitKey, len(m.Data), now); !ok {
		// An admitted agent is never cut off for asking too often (its
		// questions pile up while it is disconnected); others are.
		if kick && site == "" {
			s.kick(key, s.isAdmitted(key))
		}
		return
	}
	if !replyOK(m) {
		return
	}
	reply := func(r api.EnrollReply) {
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	var req api.EnrollRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		if s.gate.budget(false, now) {
			reply(api.EnrollReply{Error: "malformed enrollment request: " + err.Error()})
		}
		return
	}
	// A known key is answered from memory (below) and limited by its own
	// rate alone; others take from their class's budget.
	if known, vouched := s.vouched(key, req.Token, now); !known && !s.gate.budget(vouched, now) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.enroll(ctx, key, site, req, now)
	var hidden *hiddenRefusal
	switch {
	case errors.As(err, &hidden):
		// The same answer whether the node id exists or not; the reason
		// only in the log.
		s.gate.logRefusal("enrollment refused", "node", req.NodeID, "key", key, "reason", hidden.why)
		reply(api.EnrollReply{Error: errEnrollRefused})
		return
	case errors.Is(err, errKeyRevoked):
		s.gate.logRefusal("enrollment refused: the key was revoked", "node", req.NodeID, "key", key)
		reply(api.EnrollReply{Status: api.EnrollRevoked, Error: err.Error()})
		return
	case err != nil:
		s.log.Warn("enrollment refused", "node", req.NodeID, "key", key, "err", err)
		reply(api.EnrollReply{Error: err.Error()})
		return
	}
	// Known here before the agent, told it is admitted, reconnects to this
	// server; the watch brings it to the other controllers. An answer
	// from memory changed nothing (and setting it could undo a newer
	// record the watch brought meanwhile).
	if !r.fromMemory {
		s.set(r.NodeID, r.Enrollment)
		if s.record != nil {
			s.record(api.AuditRecord{Action: api.AuditNodeEnroll, Resource: r.NodeID, Node: r.NodeID,
				Detail: fmt.Sprintf("%s, groups %v, key %s", r.Status, r.Groups, key)})
		}
	}
	if r.Status == api.EnrollPending {
		s.log.Info("agent waits for approval", "node", req.NodeID, "groups", req.Groups, "approve", "grid node approve "+req.NodeID)
	}
	reply(api.EnrollReply{Status: r.Status, Site: api.SiteOf(r.Site)})
}

// errEnrollRefused is all a request without a valid join token learns,
// whatever the reason: it says nothing about which node ids exist.
const errEnrollRefused = "enrollment refused: this key is not enrolled and the request has no valid join token " +
	"(start the agent with --join-token or --join-token-file; the controller's log says more)"

// hiddenRefusal is a refusal whose reason goes to the log only.
type hiddenRefusal struct{ why string }

func (h *hiddenRefusal) Error() string { return h.why }

// errKeyRevoked answers a revoked key: what it must do, since nothing an
// operator runs brings it back.
var errKeyRevoked = errors.New("this agent's key was revoked: it can never be admitted again ('grid node approve' cannot undo a revocation). " +
	"Delete the agent's agent.nk (in its data dir) and start it with a join token to enroll a new key; " +
	"a revoked node id then waits for 'grid node approve'")

// vouched reports whether a request comes from a key this controller knows,
// or else carries a genuine join token: it then gets the budget real
// enrollments share, not the strangers'.
func (s *security) vouched(key, tok string, now time.Time) (known, vouched bool) {
	s.mu.RLock()
	known = s.byKey[key] != nil || s.revoked[key]
	s.mu.RUnlock()
	switch {
	case known:
		return true, true
	case tok == "":
		return false, false
	}
	if s.joins.live(tok, now) {
		return false, true
	}
	return false, pki.TokenEqual(tok, s.cachedJoinToken(now))
}

var errEnrollConflict = errors.New("enrollment changed meanwhile; try again")

// enrollToken is the join token of a request, as far as it is genuine.
type enrollToken struct {
	tok    string
	file   bool   // the data dir's unscoped token
	scoped string // the name of a genuine scoped token
}

func (t enrollToken) ok() bool { return t.file || t.scoped != "" }

// enrolled is enroll's answer; fromMemory when nothing was stored.
type enrolled struct {
	*api.Enrollment
	fromMemory bool
}

// enroll records or looks up the enrollment of key as req.NodeID. Before
// anything about the node id is looked at, a request must come from a key
// enrolled already or carry a genuine join token; otherwise the refusal is
// a hiddenRefusal.
func (s *security) enroll(ctx context.Context, key, site string, req api.EnrollRequest, now time.Time) (enrolled, error) {
	e, mem, err := s.enrollRecord(ctx, key, site, req, now)
	return enrolled{Enrollment: e, fromMemory: mem}, err
}

func (s *security) enrollRecord(ctx context.Context, key, site string, req api.EnrollRequest, now time.Time) (*api.Enrollment, bool, error) {
	if !nkeys.IsValidPublicUserKey(key) {
		return nil, false, fmt.Errorf("public key %q is not an NKey user key", key)
	}
	if !api.ValidToken(req.NodeID) {
		return nil, false, fmt.Errorf("node_id %q: want letters, digits, '-' or '_'", req.NodeID)
	}
	for i, g := range req.Groups {
		if !api.ValidGroup(g) {
			return nil, false, fmt.Errorf("groups[%d] %q is not a valid group", i, g)
		}
	}
	groups := slices.Clone(req.Groups)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	s.mu.RLock()
	other := s.byKey[key]
	revoked := s.revoked[key]
	s.mu.RUnlock()
	if revoked {
		return nil, false, errKeyRevoked
	}
	if other != nil && other.NodeID != req.NodeID {
		return nil, false, fmt.Errorf("this key is enrolled as node %s, not %s", other.NodeID, req.NodeID)
	}
	if other != nil && other.Site != site && site != "" {
		// A key stays at its site: a relay cannot take over, or even ask
		// about, another site's node (nor the hub's). Asked on the hub
		// itself, the key's holder proved the key (the subject names it),
		// so a site's node may reach a controller directly.
		return nil, false, &hiddenRefusal{fmt.Sprintf("key enrolled at site %s, asked through site %s", api.SiteOf(other.Site), api.SiteOf(site))}
	}
	if other != nil && other.Status != api.EnrollRevoked && slices.Equal(other.Groups, groups) {
		// Nothing to change (an agent's start, or its question after a
		// reconnect): answered from memory, which is what Check decides
		// on anyway.
		e := *other
		return &e, true, nil
	}
	tok := enrollToken{tok: req.Token}
	if req.Token != "" {
		if name, ok := s.joins.genuine(req.Token); ok {
			tok.scoped = name
		} else {
			tok.file = pki.TokenEqual(req.Token, s.cachedJoinToken(now))
		}
	}
	if other == nil && !tok.ok() {
		if req.Token == "" {
			return nil, false, &hiddenRefusal{"unknown key, no join token"}
		}
		return nil, false, &hiddenRefusal{"unknown key, a join token that is not this cluster's"}
	}
	if tok.scoped != "" {
		// A genuine scoped token: its holder may learn why it cannot be
		// used, before anything about the node id.
		if err := s.joins.check(ctx, tok.scoped, tok.tok, groups, site, now); err != nil {
			return nil, false, fmt.Errorf("join token %s: %w", tok.scoped, err)
		}
	}
	cur, err := s.kv.Get(ctx, req.NodeID)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, fmt.Errorf("read enrollment: %w", err)
	}
	if cur == nil {
		if !tok.ok() {
			// A known key whose record is gone (deleted meanwhile).
			return nil, false, &hiddenRefusal{"the key's enrollment record is gone and the request has no join token"}
		}
		e := &api.Enrollment{NodeID: req.NodeID, PublicKey: key, Groups: groups, Status: api.EnrollPending, RequestedAt: now, Site: site}
		if s.autoAdmit {
			e.Status, e.DecidedAt = api.EnrollAdmitted, now
		}
		b, _ := json.Marshal(e)
		if err := s.useToken(ctx, tok, groups, site, now); err != nil {
			return nil, false, err
		}
		if _, err := s.kv.Create(ctx, req.NodeID, b); err != nil {
			s.giveBack(ctx, tok)
			if isRevisionConflict(err) {
				return nil, false, errEnrollConflict
			}
			return nil, false, fmt.Errorf("store enrollment: %w", err)
		}
		return e, false, nil
	}
	var e api.Enrollment
	if err := json.Unmarshal(cur.Value(), &e); err != nil {
		return nil, false, fmt.Errorf("stored enrollment of %s: %w", req.NodeID, err)
	}
	if e.Site != site && e.Status != api.EnrollRevoked && (site != "" || e.PublicKey != key) {
		return nil, false, fmt.Errorf("node id %s is enrolled at site %s; revoke it there first (grid node revoke %s)",
			req.NodeID, api.SiteOf(e.Site), req.NodeID)
	}
	switch {
	case e.PublicKey == key && e.Status == api.EnrollRevoked:
		return nil, false, errKeyRevoked
	case e.PublicKey == key && slices.Equal(e.Groups, groups):
		return &e, false, nil
	case e.PublicKey == key:
		// New groups are a new enrollment: the token again, and approval
		// unless auto-admitted.
		if !tok.ok() {
			return nil, false, fmt.Errorf("groups changed from %v to %v: enroll again with the join token", e.Groups, groups)
		}
		e.Groups, e.Status, e.RequestedAt, e.DecidedAt = groups, api.EnrollPending, now, time.Time{}
		if s.autoAdmit {
			e.Status, e.DecidedAt = api.EnrollAdmitted, now
		}
	case !tok.ok():
		// Not reached: an unknown key without a token was refused above.
		return nil, false, &hiddenRefusal{"node id enrolled with another key, no join token"}
	case e.Status == api.EnrollRevoked:
		// The node id of a revoked agent comes back with a new key: an
		// operator decides, whatever auto_admit says.
		e.RevokedKeys = appendRevoked(e.RevokedKeys, e.PublicKey)
		e.PublicKey, e.Groups, e.Status, e.RequestedAt, e.DecidedAt = key, groups, api.EnrollPending, now, time.Time{}
		e.Site = site
	default:
		return nil, false, fmt.Errorf("node id %s is enrolled with another key; revoke it first (grid node revoke %s)", req.NodeID, req.NodeID)
	}
	b, _ := json.Marshal(e)
	if err := s.useToken(ctx, tok, groups, site, now); err != nil {
		return nil, false, err
	}
	if _, err := s.kv.Update(ctx, req.NodeID, b, cur.Revision()); err != nil {
		s.giveBack(ctx, tok)
		return nil, false, fmt.Errorf("%w (%w)", errEnrollConflict, err)
	}
	return &e, false, nil
}

// useToken counts a use of a scoped token (the file's token has no count).
func (s *security) useToken(ctx context.Context, tok enrollToken, groups []string, site string, now time.Time) error {
	if tok.scoped == "" {
		return nil
	}
	if err := s.joins.use(ctx, tok.scoped, tok.tok, groups, site, now); err != nil {
		return fmt.Errorf("join token %s: %w", tok.scoped, err)
	}
	return nil
}

func (s *security) giveBack(ctx context.Context, tok enrollToken) {
	if tok.scoped != "" {
		s.joins.giveBack(ctx, tok.scoped, tok.tok)
	}
}

// appendRevoked keeps the last 16 revoked keys of a node id.
func appendRevoked(keys []string, k string) []string {
	if slices.Contains(keys, k) {
		return keys
	}
	keys = append(keys, k)
	if len(keys) > 16 {
		keys = keys[len(keys)-16:]
	}
	return keys
}

// decide approves or revokes a node's enrollment.
func (s *security) decide(ctx context.Context, id, to string) (*api.Enrollment, error) {
	for try := 0; try < 5; try++ {
		cur, err := s.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, errNoEnrollment
		}
		if err != nil {
			return nil, fmt.Errorf("read enrollment: %w", err)
		}
		var e api.Enrollment
		if err := json.Unmarshal(cur.Value(), &e); err != nil {
			return nil, fmt.Errorf("stored enrollment of %s: %w", id, err)
		}
		switch {
		case to == api.EnrollAdmitted && e.Status == api.EnrollRevoked:
			return nil, errRevokedApprove
		case e.Status == to:
			return &e, nil
		}
		e.Status, e.DecidedAt = to, time.Now().UTC()
		if to == api.EnrollRevoked {
			e.RevokedKeys = appendRevoked(e.RevokedKeys, e.PublicKey)
		}
		b, _ := json.Marshal(e)
		if _, err := s.kv.Update(ctx, id, b, cur.Revision()); err == nil {
			return &e, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store enrollment: %w", err)
		}
	}
	return nil, errEnrollConflict
}

var (
	errNoEnrollment   = errors.New("no enrollment for this node id")
	errRevokedApprove = errors.New("this node was revoked; its agent must enroll again with a new key (delete its agent.nk) before it can be approved")
)

// one returns a node's enrollment.
func (s *security) one(id string) (api.Enrollment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.byNode[id]
	if !ok {
		return api.Enrollment{}, false
	}
	return *e, true
}

// list returns enrollments with the given status ("" for all), by node id.
func (s *security) list(status string) []api.Enrollment {
	s.mu.RLock()
	out := make([]api.Enrollment, 0, len(s.byNode))
	for _, e := range s.byNode {
		if status == "" || e.Status == status {
			out = append(out, *e)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b api.Enrollment) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}
