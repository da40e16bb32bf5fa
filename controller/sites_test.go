package controller_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// leafServer starts a NATS server that connects to the hub as a leaf node
// with seed: what a site's relay is on the wire, and all a compromised
// relay host has to attack the hub with. Its clients are unauthenticated,
// so a test's client on it speaks with the whole site's rights.
func leafServer(t *testing.T, cred api.SiteCredential, seed string, hub bool) *server.Server {
	t.Helper()
	remote := leafRemote(t, cred, seed)
	remote.Hub = hub
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, ServerName: "relay-" + cred.Site,
		LeafNode: server.LeafNodeOpts{ReconnectInterval: 200 * time.Millisecond, Remotes: []*server.RemoteLeafOpts{remote}}}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("leaf server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// leafRemote is the remote a site's leaf server dials: the hub's leaf
// URLs in cred over TLS trusting cred's CA, proving the key of seed.
func leafRemote(t *testing.T, cred api.SiteCredential, seed string) *server.RemoteLeafOpts {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cred.CA)) {
		t.Fatal("credential CA")
	}
	var urls []*url.URL
	for _, u := range cred.HubURLs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, pu)
	}
	return &server.RemoteLeafOpts{URLs: urls, Nkey: seed, TLS: true, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// stays checks that cond holds throughout d.
func stays(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// siteFleet is a fleet whose controller accepts relays.
func siteFleet(t *testing.T, agents int) *fleet.Fleet {
	t.Helper()
	return siteFleetWith(t, fleet.Options{Agents: agents})
}

// siteFleetWith is a fleet of opts whose controller accepts relays.
func siteFleetWith(t *testing.T, opts fleet.Options) *fleet.Fleet {
	t.Helper()
	more := opts.Controller
	opts.Controller = func(c *controller.Config) {
		c.LeafAddr = "127.0.0.1:0"
		if more != nil {
			more(c)
		}
	}
	return fleettest.Start(t, opts)
}

// createSiteAs creates a site as req asks and returns its credential.
func createSiteAs(t *testing.T, f *fleet.Fleet, req api.SiteCreateRequest) api.SiteCredential {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cred, err := f.Client().CreateSite(ctx, req)
	if err != nil {
		t.Fatalf("create site %s: %v", req.Name, err)
	}
	// The controller learns of the site from its watch of the sites
	// bucket, a moment after the create; its relay is refused until then.
	waitFor(t, 10*time.Second, "site "+req.Name+" known to the controller", func() bool {
		ss, err := f.Client().ListSites(ctx)
		if err != nil {
			return false
		}
		for _, s := range ss {
			if s.Name == req.Name {
				return true
			}
		}
		return false
	})
	return cred
}

// createSite creates a site with a relay host name and checks its
// credential is whole.
func createSite(t *testing.T, f *fleet.Fleet, name string) api.SiteCredential {
	t.Helper()
	cred := createSiteAs(t, f, api.SiteCreateRequest{Name: name, Hosts: []string{"relay." + name + ".example"}})
	if cred.Seed == "" || len(cred.HubURLs) == 0 || cred.Cert == "" || cred.Key == "" {
		t.Fatalf("incomplete credential: %+v", cred)
	}
	return cred
}

// siteClient connects to a site's leaf server with the relay's inbox.
func siteClient(t *testing.T, ns *server.Server, site string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(api.SiteInboxPrefix(site)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// hubClient connects to the hub with the controller's rights: the test's
// eyes on what crosses the link.
func hubClient(t *testing.T, f *fleet.Fleet) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newUserKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

func siteEnroll(t *testing.T, nc *nats.Conn, site, key string, req api.EnrollRequest) (api.EnrollReply, error) {
	t.Helper()
	b, _ := json.Marshal(req)
	m, err := nc.Request(api.SiteEnrollSubject(site, key), b, time.Second)
	if err != nil {
		return api.EnrollReply{}, err
	}
	var r api.EnrollReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("enroll reply %q: %v", m.Data, err)
	}
	return r, nil
}

// A relay proves its site's key and then holds its site's nodes' rights,
// and no others: it cannot speak for or hear the hub's own nodes, its
// agents enroll into its site only, and a revoked site is cut off.
func TestSiteRelayRights(t *testing.T) {
	f := siteFleet(t, 1)
	paris := createSite(t, f, "paris")
	tokb, err := os.ReadFile(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(tokb))
	hubNS := f.Controller.NATSServer()

	// A made-up key gets no leaf connection.
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	bad := leafServer(t, paris, string(strangerSeed), false)
	ns := leafServer(t, paris, paris.Seed, false)
	waitFor(t, 10*time.Second, "the relay's leaf connection", func() bool { return ns.NumLeafNodes() == 1 })
	stays(t, "the stranger refused", time.Second, func() bool { return bad.NumLeafNodes() == 0 })
	bad.Shutdown()

	lc := siteClient(t, ns, "paris")
	hub := hubClient(t, f)

	// An agent of the site enrolls through the relay: admitted into paris.
	// (The hub's interest reaches the relay just after it connects.)
	key := newUserKey(t)
	var r api.EnrollReply
	for try := 0; try < 10; try++ {
		if r, err = siteEnroll(t, lc, "paris", key, api.EnrollRequest{NodeID: "p-1", Groups: []string{"web"}, Token: tok}); err == nil {
			break
		}
	}
	if err != nil {
		lz, _ := hubNS.Leafz(&server.LeafzOptions{Subscriptions: true})
		for _, l := range lz.Leafs {
			t.Logf("hub sees leaf %d subs %v in %d out %d", l.ID, l.Subs, l.InMsgs, l.OutMsgs)
		}
		lz2, _ := ns.Leafz(&server.LeafzOptions{Subscriptions: true})
		for _, l := range lz2.Leafs {
			t.Logf("relay sees leaf %d subs %v in %d out %d", l.ID, l.Subs, l.InMsgs, l.OutMsgs)
		}
	}
	if err != nil || r.Status != api.EnrollAdmitted || r.Site != "paris" {
		t.Fatalf("site enrollment: %+v, %v", r, err)
	}
	ens, err := f.Client().ListEnrollments(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ens {
		if e.NodeID == "p-1" {
			found = e.Site == "paris"
		}
	}
	if !found {
		t.Fatalf("p-1 not enrolled at paris: %+v", ens)
	}

	// The membership change makes the relay reconnect with p-1's rights:
	// then p-1's heartbeat subject crosses, node-1's never does.
	const fromSite = `{"from":"site"}`
	heard := make(chan string, 16)
	for _, subj := range []string{api.NodeHeartbeatSubject("p-1"), api.NodeHeartbeatSubject("node-1"), "grid.enroll.>"} {
		sub, err := hub.Subscribe(subj, func(m *nats.Msg) {
			// node-1 is a live agent of the hub: only what the site
			// sent counts.
			if string(m.Data) == fromSite {
				heard <- m.Subject
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	_ = hub.Flush()
	waitFor(t, 15*time.Second, "p-1's heartbeat subject to cross the link", func() bool {
		_ = lc.Publish(api.NodeHeartbeatSubject("p-1"), []byte(fromSite))
		_ = lc.Publish(api.NodeHeartbeatSubject("node-1"), []byte(fromSite))
		_ = lc.Publish(api.EnrollSubject(key), []byte(fromSite))
		_ = lc.Flush()
		select {
		case s := <-heard:
			if s != api.NodeHeartbeatSubject("p-1") {
				t.Fatalf("%s crossed the link from the site", s)
			}
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	for range 5 {
		_ = lc.Publish(api.NodeHeartbeatSubject("node-1"), []byte(fromSite))
		_ = lc.Publish(api.ReportSubject("j1", 0, "node-1"), []byte(fromSite))
	}
	_ = lc.Flush()
	stays(t, "nothing of node-1 crosses", time.Second, func() bool {
		select {
		case s := <-heard:
			return s == api.NodeHeartbeatSubject("p-1")
		default:
			return true
		}
	})

	// Commands: p-1's reach the site, node-1's and another group's do not.
	got := make(chan string, 16)
	subjects := append(api.AgentCommandSubjects("p-1", "paris", []string{"web"}), api.AgentCommandSubjects("node-1", "", []string{"db", "web.prod"})...)
	subjects = append(subjects, "cmd.site.lyon.*.*", "cmd.>", "grid.site.>")
	for _, subj := range subjects {
		if _, err := lc.Subscribe(subj, func(m *nats.Msg) { got <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	_ = lc.Flush()
	// The site's interest reaches the hub asynchronously.
	waitFor(t, 10*time.Second, "p-1's commands to reach the site", func() bool {
		_ = hub.Publish(api.NodeCommandSubject("node-1", "ping", "echo"), []byte("{}"))
		_ = hub.Publish(api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "db"}, "ping", "echo"), []byte("{}"))
		_ = hub.Publish(api.NodeCommandSubject("p-1", "ping", "echo"), []byte("{}"))
		_ = hub.Flush()
		select {
		case s := <-got:
			if s != api.NodeCommandSubject("p-1", "ping", "echo") {
				t.Fatalf("%s reached the site", s)
			}
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	for range 3 {
		_ = hub.Publish(api.CommandSubject(api.Target{Scope: api.ScopeSite, Value: "paris"}, "ping", "echo"), []byte("{}"))
		_ = hub.Publish(api.CommandSubject(api.Target{Scope: api.ScopeSite, Value: "lyon"}, "ping", "echo"), []byte("{}"))
		_ = hub.Publish(api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web"}, "ping", "echo"), []byte("{}"))
	}
	_ = hub.Flush()
	site, group := 0, 0
	stays(t, "only the site's commands reach it", time.Second, func() bool {
		select {
		case s := <-got:
			switch s {
			case "cmd.site.paris.ping.echo":
				site++
			case "cmd.group.web.ping.echo":
				group++
			case api.NodeCommandSubject("p-1", "ping", "echo"):
			default:
				t.Errorf("%s reached the site", s)
				return false
			}
		default:
		}
		return true
	})
	if site == 0 || group == 0 {
		t.Errorf("the site's own broadcasts did not reach it: site %d, group %d", site, group)
	}

	// The roster names the site's nodes only.
	m, err := lc.Request(api.SiteRosterSubject("paris"), nil, 3*time.Second)
	if err != nil {
		t.Fatalf("roster: %v", err)
	}
	var roster api.SiteRoster
	if err := json.Unmarshal(m.Data, &roster); err != nil || len(roster.Enrollments) != 1 || roster.Enrollments[0].NodeID != "p-1" {
		t.Fatalf("roster %s: %v", m.Data, err)
	}
	// Another site cannot ask for paris's roster or enroll into it: its
	// relay may not publish there (the hub's own client here stands in
	// for the request's reaching the hub at all, answered only in paris's
	// inbox).
	if _, err := lc.Request(api.SiteRosterSubject("lyon"), nil, 500*time.Millisecond); err == nil {
		t.Fatal("a roster of a site that does not exist was answered")
	}

	// A node id enrolled at paris cannot be taken through another site,
	// nor can a hub node's key be asked about.
	createSite(t, f, "lyon")
	lyonAsk := func(key string, req api.EnrollRequest) (api.EnrollReply, error) {
		hl, err := nats.Connect(f.NATSURL(), append(f.NATSOptions(), nats.CustomInboxPrefix(api.SiteInboxPrefix("lyon")))...)
		if err != nil {
			t.Fatal(err)
		}
		defer hl.Close()
		// The new site reaches this controller's memory through its
		// watch of the sites bucket, a moment after the create.
		var r api.EnrollReply
		for try := 0; try < 10; try++ {
			if r, err = siteEnroll(t, hl, "lyon", key, req); err == nil {
				break
			}
		}
		return r, err
	}
	r, err = lyonAsk(newUserKey(t), api.EnrollRequest{NodeID: "p-1", Groups: []string{"web"}, Token: tok})
	if err != nil || r.Status == api.EnrollAdmitted || !strings.Contains(r.Error, "site paris") {
		t.Fatalf("p-1 through lyon: %+v, %v", r, err)
	}
	r, err = lyonAsk(key, api.EnrollRequest{NodeID: "p-1", Groups: []string{"web"}, Token: tok})
	if err != nil || r.Status == api.EnrollAdmitted {
		t.Fatalf("p-1's key through lyon: %+v, %v", r, err)
	}

	// A join token scoped to paris enrolls through paris only.
	jt, err := f.Client().CreateJoinToken(context.Background(), api.JoinTokenRequest{Site: "paris", TTL: api.Duration(time.Hour), Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err = lyonAsk(newUserKey(t), api.EnrollRequest{NodeID: "l-1", Token: jt.Token})
	if err != nil || r.Status == api.EnrollAdmitted || !strings.Contains(r.Error, "site paris only") {
		t.Fatalf("a paris token through lyon: %+v, %v", r, err)
	}
	r, err = siteEnroll(t, lc, "paris", newUserKey(t), api.EnrollRequest{NodeID: "p-3", Token: jt.Token})
	if err != nil || r.Status != api.EnrollAdmitted {
		t.Fatalf("a paris token through paris: %+v, %v", r, err)
	}

	// Answers go to the relay's inbox only.
	plain, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	b, _ := json.Marshal(api.EnrollRequest{NodeID: "p-2", Token: tok})
	if _, err := plain.Request(api.SiteEnrollSubject("paris", newUserKey(t)), b, time.Second); err == nil {
		t.Fatal("an enrollment with a reply outside the site's inbox was answered")
	}

	// Revoked: the relay is cut off and stays so.
	if _, err := f.Client().RevokeSite(context.Background(), "paris"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the revoked relay's disconnection", func() bool { return ns.NumLeafNodes() == 0 })
	stays(t, "the revoked relay refused", 2*time.Second, func() bool { return ns.NumLeafNodes() == 0 })
	if n := hubNS.NumLeafNodes(); n != 0 {
		t.Fatalf("hub still has %d leaf connections", n)
	}
}

// A relay that claims the hub's role on its leaf connection is closed.
func TestSiteRelayClaimingHubClosed(t *testing.T) {
	f := siteFleet(t, 1)
	cred := createSite(t, f, "rogue")
	ns := leafServer(t, cred, cred.Seed, true)
	hubNS := f.Controller.NATSServer()
	waitFor(t, 10*time.Second, "a leaf connection attempt", func() bool {
		lz, _ := hubNS.Leafz(nil)
		return lz != nil && lz.NumLeafs > 0 || ns.NumLeafNodes() > 0
	})
	waitFor(t, 5*time.Second, "the claiming relay closed", func() bool {
		lz, _ := hubNS.Leafz(nil)
		return lz != nil && lz.NumLeafs == 0
	})
}

// A site's agents' running and progress reports cross the link: the hub
// tells the relay of its interest in them only for a subject no broader
// than what the leaf may publish (a '>' is not matched against the
// leaf's progress.*.*.<node>), so the controllers subscribe to
// api.SubjectProgress at exactly that depth.
func TestSiteProgressCrossesTheLink(t *testing.T) {
	f := siteFleet(t, 1)
	paris := createSite(t, f, "paris")
	tokb, err := os.ReadFile(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	ns := leafServer(t, paris, paris.Seed, false)
	waitFor(t, 10*time.Second, "the relay's leaf connection", func() bool { return ns.NumLeafNodes() == 1 })
	lc := siteClient(t, ns, "paris")
	key := newUserKey(t)
	var r api.EnrollReply
	for try := 0; try < 10; try++ {
		if r, err = siteEnroll(t, lc, "paris", key, api.EnrollRequest{NodeID: "p-1", Token: strings.TrimSpace(string(tokb))}); err == nil {
			break
		}
	}
	if err != nil || r.Status != api.EnrollAdmitted {
		t.Fatalf("site enrollment: %+v, %v", r, err)
	}
	hub := hubClient(t, f)
	heard := make(chan string, 16)
	sub, err := hub.Subscribe(api.SubjectProgress, func(m *nats.Msg) { heard <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = hub.Flush()
	// The membership change makes the relay reconnect with p-1's rights;
	// then p-1's progress crosses.
	want := api.ProgressSubject("j1", 0, "p-1")
	waitFor(t, 15*time.Second, "p-1's progress to cross the link", func() bool {
		_ = lc.Publish(want, []byte(`{}`))
		_ = lc.Flush()
		select {
		case s := <-heard:
			return s == want
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
}

// A site's relay certificate names what the admin asked for, and never a
// wildcard (which could cover the controllers' own names).
func TestSiteCreateRefusesBadHosts(t *testing.T) {
	f := siteFleet(t, 1)
	ctx := context.Background()
	for _, h := range []string{"*.example.com", "relay example", "", "relay/x"} {
		if _, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: "s1", Hosts: []string{h}}); err == nil ||
			!strings.Contains(err.Error(), "DNS name") {
			t.Errorf("host %q: %v, want a refusal naming DNS names", h, err)
		}
	}
	for _, name := range []string{"default", "a.b", "", "x y"} {
		if _, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: name}); err == nil {
			t.Errorf("site name %q was accepted", name)
		}
	}
	if _, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: "s1", Hosts: []string{"relay.example.com", "10.0.0.7"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: "s1"}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second site s1: %v", err)
	}
}
