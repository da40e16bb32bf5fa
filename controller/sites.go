package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/time/rate"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
	"github.com/gridfleet/terraform-provider-grid/internal/busperm"
)

// sites is the hub's side of sites (DESIGN.md, "Sites"): the site records
// (followed from the sites bucket), the leaf connections of their relays
// on this controller's server, and the answers to relays' enrollment and
// roster requests. A relay proves its site's key on the leaf port and gets
// the rights of its site's admitted nodes, and no others: it can neither
// speak for nor hear another site's nodes. A leaf connection's rights are
// fixed when it connects, so when a site's nodes change, its relays'
// connections to this server are closed (after membershipSettle, so that a
// wave of enrollments costs one reconnect) and come back with the new set.
type sites struct {
	log *slog.Logger
	sec *security
	kv  jetstream.KeyValue

	mu     sync.Mutex
	byName map[string]*api.Site
	byKey  map[string]string
	// leafs are the relays' leaf connections on this server by site and
	// client id.
	leafs map[string]map[uint64]*leafConn
	// settle holds a pending close of a site's leaf connections.
	settle map[string]*time.Timer
	// gen counts the closes of a site's leaf connections (see
	// checkConnected).
	gen map[string]uint64
	// rosters limit each site's roster requests (rosterRate).
	rosters map[string]*rate.Limiter
	closed  bool
}

// A roster answer walks every enrollment of the fleet: a site's relay asks
// at start, every few seconds and after each reconnect, and no faster
// (per controller).
const (
	rosterRate  = rate.Limit(2)
	rosterBurst = 10
)

// leafConn is a relay's leaf connection.
type leafConn struct {
	// name is the server name the relay gave in its CONNECT.
	name string
	// seen once set up on the server (checkConnected).
	seen bool
}

// membershipSettle is how long a change of a site's nodes waits for more
// before its relays reconnect with the new rights.
const membershipSettle = time.Second

func newSites(log *slog.Logger, sec *security) *sites {
	return &sites{log: log, sec: sec, byName: map[string]*api.Site{}, byKey: map[string]string{},
		leafs: map[string]map[uint64]*leafConn{}, settle: map[string]*time.Timer{}, gen: map[string]uint64{},
		rosters: map[string]*rate.Limiter{}}
}

// watch follows the sites bucket until ctx ends, from a goroutine counted
// in wg; it returns once the stored sites are loaded.
func (st *sites) watch(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue) error {
	st.kv = kv
	return followLoaded(ctx, wg, kv, st.log, "sites", st.apply)
}

func (st *sites) apply(kve jetstream.KeyValueEntry) {
	var next *api.Site
	if kve.Operation() == jetstream.KeyValuePut {
		var s api.Site
		if err := json.Unmarshal(kve.Value(), &s); err != nil || s.Name != kve.Key() {
			st.log.Warn("ignoring malformed site record", "site", kve.Key(), "err", err)
			return
		}
		next = &s
	}
	name := kve.Key()
	st.mu.Lock()
	if prev := st.byName[name]; prev != nil && st.byKey[prev.PublicKey] == name {
		delete(st.byKey, prev.PublicKey)
	}
	if next == nil {
		delete(st.byName, name)
	} else {
		st.byName[name] = next
		if !next.Revoked {
			st.byKey[next.PublicKey] = name
		}
	}
	st.mu.Unlock()
	if next == nil || next.Revoked {
		st.disconnect(name, "site revoked")
		// Its nodes' keys connected straight to this server lose their
		// rights too (Check): close their connections.
		for _, key := range st.sec.siteKeys(name) {
			st.sec.disconnect(key, true)
		}
	}
}

// exists reports whether name is a live site.
func (st *sites) exists(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.byName[name]
	return s != nil && !s.Revoked
}

// checkLeaf decides on a leaf connection: a relay that proves a live
// site's key gets its site's rights (sitePermissions); anything else is
// refused.
func (st *sites) checkLeaf(c server.ClientAuthentication) bool {
	if !busperm.ProvesKey(c) {
		return false
	}
	key := c.GetOpts().Nkey
	ns := st.sec.ns.Load()
	if ns == nil {
		return false
	}
	acc, err := ns.LookupAccount(embedded.LeafAccount)
	if err != nil {
		st.log.Warn("refused a site relay: no account for relays", "err", err)
		return false
	}
	cid := c.GetID()
	// The site is found live and the connection tracked in one step, so
	// that a revocation applied meanwhile either refuses it here or finds
	// it in leafs.
	st.mu.Lock()
	site, ok := st.byKey[key]
	if !ok || st.closed {
		st.mu.Unlock()
		if !ok {
			st.sec.gate.logRefusal("refused a leaf connection: not a live site's key", "key", key)
		}
		return false
	}
	// The server replaces a leaf connection by a newer one giving the same
	// server name (and cluster and remote account, which the CONNECT
	// names too): a relay's reconnect replacing its stale connection. A
	// name held by another site's relay is refused, so that no relay can
	// cut off another site's.
	name := c.GetOpts().Name
	for other, conns := range st.leafs {
		for ocid, lc := range conns {
			if other != site && name != "" && lc.name == name && (!lc.seen || ns.GetLeafNode(ocid) != nil) {
				st.mu.Unlock()
				st.log.Warn("refused a site relay giving the server name of another site's relay", "site", site,
					"other_site", other, "name", name)
				return false
			}
		}
	}
	if st.leafs[site] == nil {
		st.leafs[site] = map[uint64]*leafConn{}
	}
	st.leafs[site][cid] = &leafConn{name: name}
	gen := st.gen[site]
	// Forget the connections that are gone (a relay's reconnects); one
	// not seen on the server yet may still be on its way there.
	for old, lc := range st.leafs[site] {
		if lc.seen && ns.GetLeafNode(old) == nil {
			delete(st.leafs[site], old)
		}
	}
	st.mu.Unlock()
	c.RegisterUser(&server.User{Username: "site:" + site, Account: acc, Permissions: st.sec.sitePermissions(site)})
	addr := ""
	if a := c.RemoteAddress(); a != nil {
		addr = a.String()
	}
	st.log.Info("site relay connected", "site", site, "addr", addr, "cid", cid)
	time.AfterFunc(leafCheck, func() { st.checkConnected(site, cid, gen, 1) })
	return true
}

// leafCheck is when a newly admitted leaf connection is checked once it
// is set up (see checkConnected), and again while it is not yet;
// leafCheckTries bounds the tries.
const (
	leafCheck      = 300 * time.Millisecond
	leafCheckTries = 10
)

// checkConnected looks at the site's leaf connection cid once the server
// has set it up, which is after checkLeaf: a close of the site's
// connections (revocation, its nodes changed: gen moved on) that came in
// between could not reach it, and the relay's CONNECT may have claimed
// the hub's role, turning the roles of the connection around (a site's
// relay is always the spoke). Either way it is closed; otherwise it is
// marked seen.
func (st *sites) checkConnected(site string, cid, gen uint64, try int) {
	ns := st.sec.ns.Load()
	if ns == nil {
		return
	}
	lz, err := ns.Leafz(nil)
	if err != nil {
		return
	}
	var li *server.LeafInfo
	for _, l := range lz.Leafs {
		if l.ID == cid {
			li = l
		}
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	if li == nil {
		if try < leafCheckTries {
			time.AfterFunc(leafCheck, func() { st.checkConnected(site, cid, gen, try+1) })
		} else if st.leafs[site] != nil {
			delete(st.leafs[site], cid) // never set up, or gone
		}
		st.mu.Unlock()
		return
	}
	s := st.byName[site]
	stale := s == nil || s.Revoked || st.gen[site] != gen
	if lc := st.leafs[site][cid]; !stale && lc != nil {
		lc.seen = true
	}
	st.mu.Unlock()
	switch {
	case li.IsSpoke:
		st.log.Warn("closed a site relay's leaf connection that claimed to be the hub", "site", site, "cid", cid)
		_ = ns.DisconnectClientByID(cid)
	case stale:
		st.log.Info("closed a site relay's leaf connection whose site was revoked or whose nodes changed as it connected",
			"site", site, "cid", cid)
		_ = ns.DisconnectClientByID(cid)
	}
}

// membershipChanged closes the site's relays' connections to this server
// once its nodes have settled, so they come back with the new rights.
func (st *sites) membershipChanged(site string) {
	if site == "" {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || len(st.leafs[site]) == 0 {
		return
	}
	if t := st.settle[site]; t != nil {
		return
	}
	st.settle[site] = time.AfterFunc(membershipSettle, func() {
		st.mu.Lock()
		delete(st.settle, site)
		st.mu.Unlock()
		st.disconnect(site, "its nodes changed")
	})
}

// disconnect closes the site's leaf connections on this server.
func (st *sites) disconnect(site, why string) {
	st.mu.Lock()
	cids := st.leafs[site]
	delete(st.leafs, site)
	st.gen[site]++
	st.mu.Unlock()
	ns := st.sec.ns.Load()
	if ns == nil {
		return
	}
	for cid := range cids {
		if err := ns.DisconnectClientByID(cid); err == nil {
			st.log.Info("closed a site relay's leaf connection", "site", site, "cid", cid, "why", why)
		}
	}
}

// close stops the pending reconnects.
func (st *sites) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	for _, t := range st.settle {
		t.Stop()
	}
	clear(st.settle)
}

// connected counts the site's leaf connections on this server that are
// still open.
func (st *sites) connected(site string) int {
	ns := st.sec.ns.Load()
	st.mu.Lock()
	cids := make([]uint64, 0, len(st.leafs[site]))
	for cid := range st.leafs[site] {
		cids = append(cids, cid)
	}
	st.mu.Unlock()
	if ns == nil {
		return 0
	}
	n := 0
	for _, cid := range cids {
		if ns.GetLeafNode(cid) != nil {
			n++
		}
	}
	return n
}

// Relays' leaf connections live in their own account (embedded.LeafAccount),
// which shares with the controllers' only the subjects a relay may ever
// send (siteSend) or hear (siteHear); each connection's permissions then
// narrow them to its site's nodes. The server lets a leaf publish some
// subjects past its permissions (JetStream acknowledgements among them:
// "+NXT" with a reply subject of the relay's would pull a controller's
// consumer's messages); in the relays' account they reach nothing.
var (
	siteSend = []string{api.SubjectReportAll, api.SubjectProgress, api.SubjectNodeRegisterAll, api.SubjectNodeHeartbeatAll,
		"grid.site.>"}
	siteHear = []string{api.SubjectCommands, api.SubjectCancelAll, "_INBOX.>", "_GRID_SITE.>"}
)

// sitePermissions are the rights of a site's relay on the hub, from the
// relay's side of the leaf connection: publish what its admitted nodes may
// publish (busperm.Agent, less the enrollment subject, which the relay
// answers itself) and its own requests (api.SiteSubjects); hear what its
// admitted nodes may hear, and its own inbox. Nothing of another site's
// nodes, no JetStream.
func (s *security) sitePermissions(site string) *server.Permissions {
	pub := []string{api.SiteSubjects(site)}
	sub := []string{api.SubjectCancelAll, api.SiteInboxPrefix(site) + ".>"}
	s.mu.RLock()
	for _, e := range s.byNode {
		if e.Site != site || e.Status != api.EnrollAdmitted {
			continue
		}
		p := busperm.Agent(e)
		for _, subj := range p.Publish.Allow {
			if subj != api.EnrollSubject(e.PublicKey) {
				pub = append(pub, subj)
			}
		}
		sub = append(sub, p.Subscribe.Allow...)
	}
	s.mu.RUnlock()
	slices.Sort(pub)
	slices.Sort(sub)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Compact(pub)},
		Subscribe: &server.SubjectPermission{Allow: slices.Compact(sub)},
	}
}

// subscribe starts answering relays' enrollment and roster requests (a
// queue group: one controller answers each).
func (st *sites) subscribe(nc *nats.Conn) ([]*nats.Subscription, error) {
	enroll, err := nc.QueueSubscribe(api.SubjectSiteEnrollAll, "grid-site", st.onEnroll)
	if err != nil {
		return nil, err
	}
	roster, err := nc.QueueSubscribe(api.SubjectSiteRosterAll, "grid-site", st.onRoster)
	if err != nil {
		_ = enroll.Unsubscribe()
		return nil, err
	}
	for _, sub := range []*nats.Subscription{enroll, roster} {
		_ = sub.SetPendingLimits(enrollPendingMsgs, enrollPendingBytes)
	}
	return []*nats.Subscription{enroll, roster}, nil
}

// onEnroll answers an enrollment a site's relay sends on for one of its
// agents: the agent's request as it sent it, the key from the subject
// (which the relay's server let only that key publish), answered in the
// relay's inbox only.
func (st *sites) onEnroll(m *nats.Msg) {
	site, _, key, ok := api.ParseSiteSubject(m.Subject)
	if !ok || !st.exists(site) {
		return
	}
	st.sec.answerEnroll(m, key, site, func(m *nats.Msg) bool {
		return st.sec.replies.under(m, api.SiteInboxPrefix(site)+".")
	})
}

// onRoster answers a relay with its site's enrollments.
func (st *sites) onRoster(m *nats.Msg) {
	site, kind, _, ok := api.ParseSiteSubject(m.Subject)
	if !ok || kind != "roster" || !st.exists(site) {
		return
	}
	if !st.sec.replies.under(m, api.SiteInboxPrefix(site)+".") || !st.rosterAllowed(site) {
		return
	}
	b, err := json.Marshal(api.SiteRoster{Site: site, Enrollments: st.sec.siteEnrollments(site)})
	if err != nil {
		return
	}
	_ = m.Respond(b)
}

// rosterAllowed takes one of a site's roster answers (the sites are few
// and named by the operator, so a limiter each is kept).
func (st *sites) rosterAllowed(site string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	l := st.rosters[site]
	if l == nil {
		l = rate.NewLimiter(rosterRate, rosterBurst)
		st.rosters[site] = l
	}
	return l.Allow()
}

// siteEnrollments are the enrollments of a site's nodes, by node id.
func (s *security) siteEnrollments(site string) []api.Enrollment {
	s.mu.RLock()
	out := make([]api.Enrollment, 0)
	for _, e := range s.byNode {
		if e.Site == site {
			out = append(out, *e)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b api.Enrollment) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// leafTLS is the leaf port's TLS: the server's certificate; a relay proves
// its site's key, not a certificate.
func (s *security) leafTLS() *tls.Config {
	c := s.serverTLS.Clone()
	c.ClientAuth = tls.NoClientCert
	return c
}

var (
	errSiteExists = errors.New("site exists")
	errNoSite     = errors.New("no such site")
)

// create stores a new site and returns its record and the seed of its key
// (which the hub does not keep).
func (st *sites) create(ctx context.Context, req api.SiteCreateRequest, by string, now time.Time) (*api.Site, []byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, fmt.Errorf("site key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, fmt.Errorf("site key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, nil, fmt.Errorf("site key: %w", err)
	}
	s := &api.Site{Name: req.Name, PublicKey: pub, CreatedAt: now, CreatedBy: by, Hosts: req.Hosts}
	b, _ := json.Marshal(s)
	if _, err := st.kv.Create(ctx, req.Name, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, nil, errSiteExists
		}
		return nil, nil, fmt.Errorf("store site: %w", err)
	}
	return s, seed, nil
}

// revoke marks a site revoked; every controller then refuses and closes
// its relays' connections.
func (st *sites) revoke(ctx context.Context, name string, now time.Time) (*api.Site, error) {
	for range 5 {
		cur, err := st.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, errNoSite
		}
		if err != nil {
			return nil, fmt.Errorf("read site: %w", err)
		}
		var s api.Site
		if err := json.Unmarshal(cur.Value(), &s); err != nil {
			return nil, fmt.Errorf("stored site %s: %w", name, err)
		}
		if s.Revoked {
			return &s, nil
		}
		s.Revoked, s.RevokedAt = true, now
		b, _ := json.Marshal(s)
		if _, err := st.kv.Update(ctx, name, b, cur.Revision()); err == nil {
			return &s, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store site: %w", err)
		}
	}
	return nil, errors.New("site changed meanwhile; try again")
}

// list returns the site records by name.
func (st *sites) list() []api.Site {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]api.Site, 0, len(st.byName))
	for _, s := range st.byName {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b api.Site) int { return strings.Compare(a.Name, b.Name) })
	return out
}
