package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
	"github.com/gridfleet/terraform-provider-grid/relay"
)

// An agent at the site gets exactly an agent's rights at the relay: its
// own node's, groups' and site's commands, its own reports and inbox; a
// key the roster does not admit may only ask to be enrolled. Whatever the
// relay lets through is what reaches the hub with the site's rights.
func TestRelayGivesEachKeyWhatItsEnrollmentAllows(t *testing.T) {
	a, stranger, pending := newKey(t), newKey(t), newKey(t)
	p, _, r := linkedSite(t, admitted(a, "a1", "web.prod"),
		api.Enrollment{NodeID: "p1", PublicKey: pending.pub, Status: api.EnrollPending, Site: site})

	agentA := mustConnect(t, r, p, a, "grid-agent a1")
	enrollA := mustConnect(t, r, p, a, api.EnrollConnName+"a1")
	strangerC := mustConnect(t, r, p, stranger, "grid-agent s1")
	pendingC := mustConnect(t, r, p, pending, "grid-agent p1")

	const sub, pub = true, false
	cases := []struct {
		name    string
		conn    *agentConn
		sub     bool
		subject string
		refused bool
	}{
		{"admitted: own commands", agentA, sub, "cmd.node.a1.*.*", false},
		{"admitted: own group", agentA, sub, "cmd.group.web.*.*", false},
		{"admitted: own subgroup", agentA, sub, "cmd.group." + api.GroupToken("web.prod") + ".*.*", false},
		{"admitted: own site", agentA, sub, "cmd.site." + site + ".*.*", false},
		{"admitted: everyone", agentA, sub, "cmd.all.*.*", false},
		{"admitted: cancellations", agentA, sub, api.SubjectCancelAll, false},
		{"admitted: own inbox", agentA, sub, api.AgentInboxPrefix(a.pub) + ".>", false},
		{"admitted: another node's commands", agentA, sub, "cmd.node.b1.*.*", true},
		{"admitted: another group", agentA, sub, "cmd.group.db.*.*", true},
		{"admitted: another site", agentA, sub, "cmd.site.lyon.*.*", true},
		{"admitted: every command", agentA, sub, "cmd.>", true},
		{"admitted: the relay's inbox", agentA, sub, api.SiteInboxPrefix(site) + ".>", true},
		{"admitted: another key's inbox", agentA, sub, api.AgentInboxPrefix(stranger.pub) + ".>", true},
		{"admitted: enrollment requests", agentA, sub, api.SubjectEnrollAll, true},
		{"admitted: own report", agentA, pub, "report.j1.s1.a1", false},
		{"admitted: own heartbeat", agentA, pub, api.NodeHeartbeatSubject("a1"), false},
		{"admitted: own enrollment", agentA, pub, api.EnrollSubject(a.pub), false},
		{"admitted: another node's report", agentA, pub, "report.j1.s1.b1", true},
		{"admitted: another node's registration", agentA, pub, api.NodeRegisterSubject("b1"), true},
		{"admitted: the site's roster", agentA, pub, api.SiteRosterSubject(site), true},
		{"admitted: the site's enrollment", agentA, pub, api.SiteEnrollSubject(site, a.pub), true},
		{"admitted: another key's enrollment", agentA, pub, api.EnrollSubject(stranger.pub), true},
		{"admitted: a command", agentA, pub, "cmd.node.a1.file.write", true},
		{"admitted's enrollment connection: commands", enrollA, sub, "cmd.node.a1.*.*", true},
		{"admitted's enrollment connection: report", enrollA, pub, "report.j1.s1.a1", true},
		{"admitted's enrollment connection: own enrollment", enrollA, pub, api.EnrollSubject(a.pub), false},
		{"stranger: everyone's commands", strangerC, sub, "cmd.all.*.*", true},
		{"stranger: an admitted node's heartbeat", strangerC, pub, api.NodeHeartbeatSubject("a1"), true},
		{"stranger: own inbox", strangerC, sub, api.AgentInboxPrefix(stranger.pub) + ".>", false},
		{"stranger: own enrollment", strangerC, pub, api.EnrollSubject(stranger.pub), false},
		{"stranger: the site's enrollment", strangerC, pub, api.SiteEnrollSubject(site, stranger.pub), true},
		{"pending: own commands", pendingC, sub, "cmd.node.p1.*.*", true},
		{"pending: own report", pendingC, pub, "report.j1.s1.p1", true},
		{"pending: own enrollment", pendingC, pub, api.EnrollSubject(pending.pub), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sub {
				s, err := tc.conn.nc.SubscribeSync(tc.subject)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = s.Unsubscribe() }()
			} else if err := tc.conn.nc.Publish(tc.subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if got := tc.conn.refused(t, tc.subject); got != tc.refused {
				t.Fatalf("refused = %v, want %v (last error: %v)", got, tc.refused, tc.conn.nc.LastError())
			}
		})
	}
}

// What an admitted agent may do crosses the link both ways: the hub's
// command reaches it, its report reaches the hub.
func TestRelayCarriesAnAgentsTrafficToAndFromTheHub(t *testing.T) {
	a := newKey(t)
	p, h, r := linkedSite(t, admitted(a, "a1"))
	agentA := mustConnect(t, r, p, a, "grid-agent a1")

	cmds, err := agentA.nc.SubscribeSync("cmd.node.a1.*.*")
	if err != nil {
		t.Fatal(err)
	}
	agentA.nc.Flush()
	waitDelivered(t, "the hub's command at the agent", cmds, func() { _ = h.nc.Publish("cmd.node.a1.file.stat", []byte("cmd")) }, "cmd")

	reports, err := h.nc.SubscribeSync("report.>")
	if err != nil {
		t.Fatal(err)
	}
	h.nc.Flush()
	waitDelivered(t, "the agent's report at the hub", reports, func() { _ = agentA.nc.Publish("report.j1.s1.a1", []byte("done")) }, "done")
}

// Connections that do not prove an NKey are refused outright.
func TestRelayRefusesConnectionsWithoutAKey(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	r := startRelay(t, credential(t, p, h.leafURL()), "")
	a, other := newKey(t), newKey(t)
	cases := []struct {
		name string
		url  string
		opts []nats.Option
	}{
		{"no credentials", r.URL(), nil},
		{"user and password", r.URL(), []nats.Option{nats.UserInfo("relay", "relay")}},
		{"a token", r.URL(), []nats.Option{nats.Token("token")}},
		{"a key signed by another key", r.URL(), []nats.Option{nats.Nkey(a.pub, other.kp.Sign)}},
		{"no TLS", "nats://" + r.Addr(), []nats.Option{nats.Nkey(a.pub, a.kp.Sign)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]nats.Option{nats.RootCAs(p.caFile), nats.NoReconnect()}, tc.opts...)
			if tc.name == "no TLS" {
				opts = tc.opts
			}
			nc, err := nats.Connect(tc.url, opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected; want refused")
			}
		})
	}
}

// The enrollment proxy passes an agent's request on to the hub, under the
// site's subject with the relay's own inbox, and the answer back; it
// drops, before anything crosses the link, a request whose reply subject
// is not the sender's own inbox or that is too large.
func TestRelayPassesEnrollmentRequestsOnOnlyFromTheSendersOwnInbox(t *testing.T) {
	a, s := newKey(t), newKey(t)
	p, h, r := linkedSite(t)
	conn := mustConnect(t, r, p, s, api.EnrollConnName+"s1")
	inbox, err := conn.nc.SubscribeSync(api.AgentInboxPrefix(s.pub) + ".>")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "s1", Groups: []string{"web"}, Token: "join"})
	subject := api.EnrollSubject(s.pub)
	for _, reply := range []string{
		api.AgentInboxPrefix(a.pub) + ".x", // another agent's inbox
		"cmd.node.a1.file.write",           // a command subject
		api.AgentInboxPrefix(s.pub),        // the prefix alone
	} {
		if err := conn.nc.PublishRequest(subject, reply, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.nc.Publish(subject, body); err != nil { // no reply
		t.Fatal(err)
	}
	if err := conn.nc.PublishRequest(subject, api.AgentInboxPrefix(s.pub)+".big", bytes.Repeat([]byte{'x'}, 5<<10)); err != nil {
		t.Fatal(err)
	}
	// The proxy decides on requests in the order they come: once the good
	// one is answered, the ones before it were dropped or forwarded.
	m, err := conn.nc.Request(subject, body, 10*time.Second)
	if err != nil {
		t.Fatalf("enrollment request through the relay: %v", err)
	}
	var reply api.EnrollReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Status != api.EnrollPending || reply.Site != site {
		t.Fatalf("answer %s (%v), want the hub's pending answer", m.Data, err)
	}
	seen := h.requestsSeen()
	if len(seen) != 1 {
		t.Fatalf("the hub got %d requests, want only the one with the sender's own inbox: %+v", len(seen), seen)
	}
	if seen[0].key != s.pub || !bytes.Equal(seen[0].body, body) || !strings.HasPrefix(seen[0].reply, api.SiteInboxPrefix(site)+".") {
		t.Fatalf("hub got %+v, want key %s, the agent's body, a reply in the site's inbox", seen[0], s.pub)
	}
	// Nothing but the answer reached the agent's inbox.
	if got, err := inbox.NextMsg(time.Second); err != nil || got.Subject != m.Subject {
		t.Fatalf("the answer is not the first message in the agent's inbox (%v)", err)
	}
	if m, err := inbox.NextMsg(0); err == nil {
		t.Fatalf("the agent's inbox holds %s on %s besides the answer", m.Data, m.Subject)
	}
}

// The relay's interest crossing the link is its agents' and its own
// inbox's, never the enrollment subject: the hub's own agents' requests
// are not the relay's to answer.
func TestRelayNeverAsksTheHubForEnrollmentRequests(t *testing.T) {
	a := newKey(t)
	p, h, r := linkedSite(t, admitted(a, "a1"))
	agentA := mustConnect(t, r, p, a, "grid-agent a1")
	if _, err := agentA.nc.SubscribeSync("cmd.node.a1.*.*"); err != nil {
		t.Fatal(err)
	}
	agentA.nc.Flush()
	var subs []string
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "the agent's interest at the hub", func() bool {
		lz, err := h.ns.Leafz(&server.LeafzOptions{Subscriptions: true})
		if err != nil || len(lz.Leafs) != 1 {
			return false
		}
		subs = lz.Leafs[0].Subs
		for _, s := range subs {
			if s == "cmd.node.a1.*.*" {
				return true
			}
		}
		return false
	})
	inbox := false
	for _, s := range subs {
		if strings.HasPrefix(s, "grid.enroll") {
			t.Errorf("the relay asks the hub for %q", s)
		}
		inbox = inbox || strings.HasPrefix(s, api.SiteInboxPrefix(site)+".")
	}
	if !inbox {
		t.Errorf("the relay's inbox is not among its interest at the hub: %v", subs)
	}
}

// A change of the roster closes the connections whose rights it changes:
// a key just admitted (but not its enrollment connection, waiting for the
// answer), an admitted key whose groups changed, a key revoked. The
// reconnection gets the new rights; other agents stay connected.
func TestRelayClosesConnectionsWhoseRightsTheRosterChanged(t *testing.T) {
	a, b := newKey(t), newKey(t)
	p, h, r := linkedSite(t, admitted(a, "a1"))
	agentA := mustConnect(t, r, p, a, "grid-agent a1")

	apply := func(es ...api.Enrollment) {
		t.Helper()
		h.setRoster(es...)
		if err := r.RefreshRoster(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitClosed := func(c *agentConn, what string) {
		t.Helper()
		select {
		case <-c.closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still connected", what)
		}
	}
	stillOpen := func(c *agentConn, what string) {
		t.Helper()
		if err := c.nc.Flush(); err != nil {
			t.Fatalf("%s was closed: %v", what, err)
		}
	}

	before := mustConnect(t, r, p, b, "grid-agent b1")
	enrolling := mustConnect(t, r, p, b, api.EnrollConnName+"b1")
	if _, err := before.nc.SubscribeSync("cmd.node.b1.*.*"); err != nil || !before.refused(t, "cmd.node.b1.*.*") {
		t.Fatalf("a key not admitted subscribed to its node's commands (%v)", err)
	}

	apply(admitted(a, "a1"), admitted(b, "b1", "web"))
	waitClosed(before, "the connection of a key just admitted")
	stillOpen(enrolling, "the enrollment connection of a key just admitted")
	web := mustConnect(t, r, p, b, "grid-agent b1")
	for _, s := range []string{"cmd.node.b1.*.*", "cmd.group.web.*.*"} {
		if _, err := web.nc.SubscribeSync(s); err != nil || web.refused(t, s) {
			t.Fatalf("admitted agent refused %s (%v)", s, web.nc.LastError())
		}
	}

	apply(admitted(a, "a1"), admitted(b, "b1", "db"))
	waitClosed(web, "an agent whose groups changed")
	waitClosed(enrolling, "the enrollment connection of an agent whose groups changed")
	db := mustConnect(t, r, p, b, "grid-agent b1")
	if _, err := db.nc.SubscribeSync("cmd.group.web.*.*"); err != nil || !db.refused(t, "cmd.group.web.*.*") {
		t.Fatal("an agent moved out of group web still hears it")
	}

	revoked := admitted(b, "b1", "db")
	revoked.Status = api.EnrollRevoked
	apply(admitted(a, "a1"), revoked)
	waitClosed(db, "a revoked agent")
	after := mustConnect(t, r, p, b, "grid-agent b1")
	if _, err := after.nc.SubscribeSync("cmd.node.b1.*.*"); err != nil || !after.refused(t, "cmd.node.b1.*.*") {
		t.Fatal("a revoked agent subscribed to its node's commands")
	}
	if err := after.nc.Publish(api.EnrollSubject(b.pub), []byte("{}")); err != nil || after.refused(t, api.EnrollSubject(b.pub)) {
		t.Fatal("a revoked agent may not even ask how it stands")
	}
	stillOpen(agentA, "an agent the changes did not touch")
}

// When the hub answers "admitted", the relay has the new roster before the
// agent hears it: the agent's next connection gets its rights at once.
func TestRelayKnowsAnAdmissionBeforeTheAgentDoes(t *testing.T) {
	s := newKey(t)
	p, h, r := linkedSite(t)
	h.mu.Lock()
	h.answer = func(key string, req api.EnrollRequest) api.EnrollReply {
		// The hub stores the enrollment, then answers.
		h.setRoster(admitted(s, req.NodeID, req.Groups...))
		return api.EnrollReply{Status: api.EnrollAdmitted, Site: site}
	}
	h.mu.Unlock()
	main := mustConnect(t, r, p, s, "grid-agent s1")
	enrolling := mustConnect(t, r, p, s, api.EnrollConnName+"s1")
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "s1", Token: "join"})
	m, err := enrolling.nc.Request(api.EnrollSubject(s.pub), body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply api.EnrollReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Status != api.EnrollAdmitted {
		t.Fatalf("answer %s, want admitted", m.Data)
	}
	select {
	case <-main.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection the key made before its admission was not closed")
	}
	next := mustConnect(t, r, p, s, "grid-agent s1")
	if _, err := next.nc.SubscribeSync("cmd.node.s1.*.*"); err != nil || next.refused(t, "cmd.node.s1.*.*") {
		t.Fatalf("the admitted agent's next connection lacks its rights (%v)", next.nc.LastError())
	}
}

// A relay restarted while its link is cut admits its agents from the
// roster it saved.
func TestRelayRestartedWithoutTheHubAdmitsFromItsSavedRoster(t *testing.T) {
	p, a, cred, dir := savedRosterHubDown(t)
	fi, err := os.Stat(filepath.Join(dir, relay.RosterFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("roster cache mode %v, want 0600", fi.Mode().Perm())
	}

	second := startRelay(t, cred, dir)
	if second.LeafConnected() {
		t.Fatal("linked to a hub that is down")
	}
	agentA := mustConnect(t, second, p, a, "grid-agent a1")
	if _, err := agentA.nc.SubscribeSync("cmd.group.web.*.*"); err != nil || agentA.refused(t, "cmd.group.web.*.*") {
		t.Fatalf("agent not admitted from the saved roster (%v)", agentA.nc.LastError())
	}
}

// A second live connection of an admitted key is refused: two processes
// would run every command of the node. Once the first goes, a new one is
// let in.
func TestRelayRefusesASecondConnectionOfAnAdmittedKey(t *testing.T) {
	a := newKey(t)
	p, _, r := linkedSite(t, admitted(a, "a1"))
	first := mustConnect(t, r, p, a, "grid-agent a1")
	if _, err := connectAgent(t, r, p, a, "grid-agent a1"); err == nil {
		t.Fatal("a second connection of the key was let in while the first is live")
	}
	first.nc.Close()
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "a new connection once the first closed", func() bool {
		c, err := connectAgent(t, r, p, a, "grid-agent a1")
		if err == nil {
			c.nc.Close()
		}
		return err == nil
	})
}

// The relay links to whichever of the hub's URLs answers, and the
// config's URLs replace the credential's.
func TestRelayLinksThroughAnyHubURL(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	dead := "tls://127.0.0.1:1"
	cases := []struct {
		name      string
		credURLs  []string
		overrides []string
	}{
		{"the credential's second URL", []string{dead, h.leafURL()}, nil},
		{"an override", []string{dead}, []string{h.leafURL()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := relay.DefaultConfig()
			cfg.Credential = credential(t, p, tc.credURLs...)
			cfg.Listen = "127.0.0.1:0"
			cfg.HubURLs = tc.overrides
			waitLinked(t, startRelayConfig(t, cfg))
		})
	}
}

// With no hub to ask, an enrollment request is answered as a server with
// no controller answers it ("no responders"), so the agent asks again
// soon rather than after its timeout.
func TestRelayWithoutTheHubAnswersNoResponders(t *testing.T) {
	p := newPKI(t)
	s := newKey(t)
	r := startRelay(t, credential(t, p, "tls://127.0.0.1:1"), "")
	conn := mustConnect(t, r, p, s, api.EnrollConnName+"s1")
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "s1", Token: "join"})
	_, err := conn.nc.Request(api.EnrollSubject(s.pub), body, time.Minute)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request without a hub: %v, want no responders", err)
	}
}
