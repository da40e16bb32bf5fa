package controller_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// Attacks on the hub's side of sites from a compromised relay host: it
// holds its site's credential and runs whatever NATS server it likes
// towards the leaf port.

// newSite creates a site and returns its credential.
func newSite(t *testing.T, f *fleet.Fleet, name string) api.SiteCredential {
	t.Helper()
	return createSiteAs(t, f, api.SiteCreateRequest{Name: name})
}

// admitThrough enrolls a key of its own making through relay as node, in
// groups, with the hub's join token, and fails the test unless the hub
// admits it. It returns the key, whose seed the relay holds.
func admitThrough(t *testing.T, f *fleet.Fleet, relay *evilRelay, node string, groups ...string) nkeys.KeyPair {
	t.Helper()
	kp, _ := nkeys.CreateUser()
	key, _ := kp.PublicKey()
	r, err := relay.enroll(key, api.EnrollRequest{NodeID: node, Groups: groups, Token: readJoinToken(t, f)}, 5*time.Second)
	if err != nil || r.Status != api.EnrollAdmitted {
		t.Fatalf("enrollment through the relay: %+v %v", r, err)
	}
	return kp
}

// evilRelay is a NATS server the attacker runs with a site's credential,
// connected to the hub as a leaf node, and a local client of it: what it
// publishes goes to the hub as the relay's, what it subscribes is asked
// of the hub.
type evilRelay struct {
	site string
	ns   *server.Server
	nc   *nats.Conn
}

// startEvilRelay connects a leaf server with cred; edit adjusts its
// remote (for a relay that claims more than it should).
func startEvilRelay(t *testing.T, cred api.SiteCredential, edit func(*server.RemoteLeafOpts)) *evilRelay {
	t.Helper()
	remote := leafRemote(t, cred, cred.Seed)
	if edit != nil {
		edit(remote)
	}
	ns, err := server.NewServer(&server.Options{ServerName: "evil-" + cred.Site, Host: "127.0.0.1", Port: -1,
		NoLog: true, NoSigs: true, LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{remote},
			ReconnectInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("relay server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(api.SiteInboxPrefix(cred.Site)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &evilRelay{site: cred.Site, ns: ns, nc: nc}
	// Ready once the hub answers its roster request through the link.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := r.roster(500 * time.Millisecond); err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay of %s: the hub never answered its roster request", cred.Site)
		}
	}
}

func (r *evilRelay) roster(timeout time.Duration) (api.SiteRoster, error) {
	var out api.SiteRoster
	m, err := r.nc.Request(api.SiteRosterSubject(r.site), nil, timeout)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(m.Data, &out)
	return out, err
}

// enroll sends an enrollment for key through the relay and returns the
// hub's answer.
func (r *evilRelay) enroll(key string, req api.EnrollRequest, timeout time.Duration) (api.EnrollReply, error) {
	var out api.EnrollReply
	b, _ := json.Marshal(req)
	m, err := r.nc.Request(api.SiteEnrollSubject(r.site, key), b, timeout)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(m.Data, &out)
	return out, err
}

// The relay names any key in its enrollment subject (its agents' keys
// are not proved to the hub, only to the relay): flooding with the key of
// an agent that is not at its site must neither cut that agent off nor
// keep it from enrolling at the hub.
func TestSiteAttackRelayFloodCannotBanOtherKeys(t *testing.T) {
	f := siteFleet(t, 0)
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)

	victim := ar2Stranger(t, f)
	for range 200 {
		_ = relay.nc.PublishRequest(api.SiteEnrollSubject("paris", victim.pub), api.SiteInboxPrefix("paris")+".x",
			[]byte(`{"node_id":"hub-1"}`))
	}
	if err := relay.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The hub has read the flood once the relay's next question is
	// answered (messages over one link keep their order).
	if _, err := relay.roster(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	tok := readJoinToken(t, f)
	r, err := victim.enroll(api.EnrollRequest{NodeID: "hub-1", Token: tok}, 5*time.Second)
	if err != nil || r.Status != api.EnrollAdmitted {
		t.Fatalf("a hub agent's enrollment after a relay's flood naming its key: %+v %v", r, err)
	}
	if _, err := ar2Connect(t, f, victim.kp); err != nil {
		t.Fatalf("a hub agent's key is refused after a relay's flood naming it: %v", err)
	}
}

func readJoinToken(t *testing.T, f *fleet.Fleet) string {
	t.Helper()
	tok, err := pki.ReadToken(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawLeaf speaks the leaf protocol itself, as a relay host may: it sends
// whatever CONNECT, LS+ and LMSG it likes, not what a NATS server would.
type rawLeaf struct {
	conn net.Conn
	r    *bufio.Reader
	msgs chan rawLeafMsg
	done chan struct{}
}

type rawLeafMsg struct {
	subject, reply string
	data           []byte
}

// holdConnect, in dialRawLeaf's extra, is a channel it waits on before
// sending its CONNECT.
const holdConnect = "hold-connect"

// dialRawLeaf connects to the hub's leaf port with cred's key, with the
// CONNECT fields extra added (hub, cluster, …).
func dialRawLeaf(t *testing.T, cred api.SiteCredential, extra map[string]any) *rawLeaf {
	t.Helper()
	l, err := tryRawLeaf(t, cred, extra)
	if err != nil {
		t.Fatalf("raw leaf refused: %v", err)
	}
	return l
}

// tryRawLeaf is dialRawLeaf returning the hub's refusal.
func tryRawLeaf(t *testing.T, cred api.SiteCredential, extra map[string]any) (*rawLeaf, error) {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(cred.Seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	u, err := url.Parse(cred.HubURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(raw).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("leaf port INFO: %q %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cred.CA))
	tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	sig, _ := kp.Sign([]byte(info.Nonce))
	connect := map[string]any{"nkey": pub, "sig": base64.RawURLEncoding.EncodeToString(sig), "tls_required": true,
		"name": "raw-" + cred.Site, "headers": true}
	maps.Copy(connect, extra)
	// A test racing connections holds them all here, then lets go.
	if w, ok := connect[holdConnect].(chan struct{}); ok {
		delete(connect, holdConnect)
		<-w
	}
	b, _ := json.Marshal(connect)
	l := &rawLeaf{conn: tc, r: bufio.NewReader(tc), msgs: make(chan rawLeafMsg, 1024), done: make(chan struct{})}
	l.send(t, "CONNECT "+string(b)+"\r\nPING\r\n")
	_ = raw.SetDeadline(time.Time{})
	pong := make(chan error, 1)
	go l.read(pong)
	select {
	case err := <-pong:
		if err != nil {
			return nil, err
		}
	case <-time.After(10 * time.Second):
		return nil, errors.New("raw leaf: no PONG")
	}
	return l, nil
}

func (l *rawLeaf) send(t *testing.T, s string) {
	t.Helper()
	if _, err := l.conn.Write([]byte(s)); err != nil {
		t.Fatalf("raw leaf write: %v", err)
	}
}

// read answers PINGs and hands LMSGs on until the connection ends; the
// first PONG (or error) goes to pong.
func (l *rawLeaf) read(pong chan<- error) {
	defer close(l.done)
	first := true
	for {
		line, err := l.r.ReadString('\n')
		if err != nil {
			if first {
				pong <- err
			}
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "PING"):
			_, _ = l.conn.Write([]byte("PONG\r\n"))
		case strings.HasPrefix(line, "PONG") && first:
			first = false
			pong <- nil
		case strings.HasPrefix(line, "-ERR") && first:
			first = false
			pong <- errors.New(line)
		case strings.HasPrefix(line, "LMSG ") || strings.HasPrefix(line, "HMSG "):
			f := strings.Fields(line)
			n, _ := strconv.Atoi(f[len(f)-1])
			body := make([]byte, n+2)
			if _, err := io.ReadFull(l.r, body); err != nil {
				return
			}
			m := rawLeafMsg{subject: f[1], data: body[:n]}
			if (f[0] == "LMSG" && len(f) == 4) || (f[0] == "HMSG" && len(f) == 5) {
				m.reply = f[2]
			}
			select {
			case l.msgs <- m:
			default:
			}
		}
	}
}

// pub sends a message as the relay, with no reply or with one, to plain
// subscribers and to the queue groups named (a leaf names them).
func (l *rawLeaf) pub(t *testing.T, subject, reply string, data []byte, queues ...string) {
	t.Helper()
	r := ""
	switch {
	case len(queues) > 0 && reply != "":
		r = "+ " + reply + " " + strings.Join(queues, " ") + " "
	case len(queues) > 0:
		r = "| " + strings.Join(queues, " ") + " "
	case reply != "":
		r = reply + " "
	}
	l.send(t, fmt.Sprintf("LMSG %s %s%d\r\n%s\r\n", subject, r, len(data), data))
}

// A relay's leaf connection must reach nothing of JetStream: the server
// lets acknowledgement subjects ($JS.ACK.…) through from a leaf whatever
// its permissions (they are routing subjects to it), so a relay speaking
// the raw protocol could ack, nak or terminate the messages of the
// controllers' consumers, or pull them ("+NXT" with a reply subject of its
// own: the scheduler's consumer would hand it the queued job requests).
// Here it pulls with no_wait, which JetStream answers at once when it
// hears: the relay must hear nothing back.
func TestSiteAttackRelayCannotAckControllersConsumers(t *testing.T) {
	f := siteFleet(t, 0)
	cred := newSite(t, f, "paris")
	l := dialRawLeaf(t, cred, nil)
	inbox := api.SiteInboxPrefix("paris") + ".ack"
	l.send(t, "LS+ "+api.SiteInboxPrefix("paris")+".>\r\n")
	// The ack subject of the scheduler's consumer on the requests stream.
	for seq := 1; seq <= 3; seq++ {
		l.pub(t, fmt.Sprintf("$JS.ACK.%s.scheduler.1.%d.%d.0.0", api.StreamRequests, seq, seq), inbox, []byte("+ACK"))
		l.pub(t, fmt.Sprintf("$JS.ACK.%s.scheduler.1.%d.%d.0.0", api.StreamRequests, seq, seq), inbox, []byte(`+NXT {"batch":1,"no_wait":true}`))
	}
	// Proof the hub read them: its answer to a roster request after them.
	l.pub(t, api.SiteRosterSubject("paris"), api.SiteInboxPrefix("paris")+".roster", nil, "grid-site")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-l.msgs:
			if m.subject == inbox {
				t.Fatalf("JetStream answered the relay's ack on %s: %q", m.subject, m.data)
			}
			if m.subject == api.SiteInboxPrefix("paris")+".roster" {
				// Give the acks the same time again to be answered.
				select {
				case m := <-l.msgs:
					if m.subject == inbox {
						t.Fatalf("JetStream answered the relay's ack: %q", m.data)
					}
				case <-time.After(time.Second):
				}
				return
			}
		case <-l.done:
			t.Fatal("the hub closed the relay's connection")
		case <-deadline:
			t.Fatal("the hub never answered the relay's roster request")
		}
	}
}

// What a relay may send and hear still crosses between the relays'
// account and the controllers': an agent enrolled through the relay
// sends a heartbeat through it and hears the controller's answer in its
// inbox.
func TestSiteAttackRelayAccountCarriesItsNodes(t *testing.T) {
	f := siteFleet(t, 0)
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := kp.PublicKey()
	r, err := relay.enroll(key, api.EnrollRequest{NodeID: "p-1", Token: readJoinToken(t, f)}, 5*time.Second)
	if err != nil || r.Status != api.EnrollAdmitted || r.Site != "paris" {
		t.Fatalf("enrollment through the relay: %+v %v", r, err)
	}
	// The agent's own connection to the relay, with its inbox.
	agent, err := nats.Connect(relay.ns.ClientURL(), nats.CustomInboxPrefix(api.AgentInboxPrefix(key)))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	// The relay reconnects with p-1's rights once the site's nodes settle.
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := agent.Request(api.NodeHeartbeatSubject("p-1"), []byte("x"), time.Second)
		if err == nil {
			var sr api.StoreReply
			if err := json.Unmarshal(m.Data, &sr); err != nil || !strings.Contains(sr.Error, "malformed") {
				t.Fatalf("answer to p-1's heartbeat: %q %v", m.Data, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("p-1's heartbeat through the relay was never answered: %v", err)
		}
	}
}

// In a cluster, a relay connected to one controller still speaks to and
// hears from the others through their routes: the relays' account is
// every server's.
func TestSiteAttackRelayAccountAcrossCluster(t *testing.T) {
	ctls, _ := startSecureCluster(t, 2, "sites", func(c *controller.Config) { c.LeafAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := api.NewClient(ctls[1].APIClientConfig(ctls[1].AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	cred, err := client.CreateSite(ctx, api.SiteCreateRequest{Name: "paris"})
	if err != nil {
		t.Fatal(err)
	}
	// The relay reaches ctl-2 only.
	cred.HubURLs = []string{ctls[1].LeafURL()}
	relay := startEvilRelay(t, cred, nil)
	hub1, err := nats.Connect(ctls[0].NATSURL(), ctls[0].NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer hub1.Close()
	// ctl-1's server hears what the relay sends on ctl-2's ...
	heard, err := hub1.SubscribeSync(api.SiteRosterSubject("paris"))
	if err != nil {
		t.Fatal(err)
	}
	_ = hub1.Flush()
	// ... and the relay hears what ctl-1's server sends.
	got, err := relay.nc.SubscribeSync(api.SiteInboxPrefix("paris") + ".from-ctl-1")
	if err != nil {
		t.Fatal(err)
	}
	_ = relay.nc.Flush()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, _ = relay.roster(500 * time.Millisecond)
		_ = hub1.Publish(api.SiteInboxPrefix("paris")+".from-ctl-1", []byte("hi"))
		_, err1 := heard.NextMsg(500 * time.Millisecond)
		_, err2 := got.NextMsg(500 * time.Millisecond)
		if err1 == nil && err2 == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("across the cluster: relay to ctl-1 %v, ctl-1 to relay %v", err1, err2)
		}
	}
}

// A relay opens many leaf connections at once, so that the hub decides on
// one while another is between its authentication and its set-up on the
// server: every one of them must still be closed when the site is
// revoked (none forgotten, none missed for not being set up yet).
func TestSiteAttackRelayConnectionsRacingRevocationAllClosed(t *testing.T) {
	f := siteFleet(t, 0)
	cred := newSite(t, f, "paris")
	var ls []*rawLeaf
	var mu sync.Mutex
	for range 4 {
		hold := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				l := dialRawLeaf(t, cred, map[string]any{"name": fmt.Sprintf("racer-%d", i), holdConnect: hold})
				mu.Lock()
				ls = append(ls, l)
				mu.Unlock()
			})
		}
		// Let the TLS handshakes finish, then send every CONNECT at once.
		time.Sleep(500 * time.Millisecond)
		close(hold)
		wg.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Client().RevokeSite(ctx, "paris"); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		select {
		case <-l.done:
		case <-ctx.Done():
			t.Fatalf("leaf connection %d of a revoked site is still open", i)
		}
	}
}

// Each roster answer costs a controller a walk over every enrollment of
// the fleet: a relay that asks without pause must not have them all
// answered (a real relay asks every few seconds and after a reconnect).
func TestSiteAttackRelayRosterFloodIsBounded(t *testing.T) {
	f := siteFleet(t, 0)
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)
	sub, err := relay.nc.SubscribeSync(api.SiteInboxPrefix("paris") + ".flood")
	if err != nil {
		t.Fatal(err)
	}
	const asked = 200
	for range asked {
		_ = relay.nc.PublishRequest(api.SiteRosterSubject("paris"), api.SiteInboxPrefix("paris")+".flood", nil)
	}
	if err := relay.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for {
		if _, err := sub.NextMsg(2 * time.Second); err != nil {
			break
		}
		answered++
	}
	if answered > 20 {
		t.Fatalf("%d of %d roster requests sent at once were answered", answered, asked)
	}
	if answered == 0 {
		t.Fatal("no roster request of the flood was answered")
	}
}

// The per-key limits of enrollment requests are kept for a bounded number
// of keys, and a flood of fresh keys starts the table over. A relay names
// keys for free (no connection, no signature each), so its keys must not
// share that table with the hub's: else it could start it over at will
// and lift the ban of a stranger that floods the hub.
func TestSiteAttackRelayCannotLiftBans(t *testing.T) {
	// Without auto-admission the enrollments that close the batches leave
	// the site's rights, and so the relay's connection, as they are.
	f := siteFleetWith(t, fleet.Options{Controller: func(c *controller.Config) { c.AutoAdmit = new(false) }})
	cred := newSite(t, f, "paris")
	relay := startEvilRelay(t, cred, nil)
	tok := readJoinToken(t, f)

	// A stranger floods on the hub and is banned.
	k := ar2Stranger(t, f)
	for i := 0; i < 200 && k.nc.IsConnected(); i++ {
		_ = k.nc.PublishRequest(api.EnrollSubject(k.pub), api.AgentInboxPrefix(k.pub)+".x", []byte(`{"node_id":"x"}`))
	}
	_ = k.nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for k.nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := ar2Connect(t, f, k.kp); err == nil {
		t.Fatal("the flooding stranger was not banned")
	}

	// The relay asks for more fresh keys than the table holds, in batches
	// each closed by a real enrollment, whose answer says the hub read the
	// batch.
	for batch := 0; batch < 13; batch++ {
		for range 800 {
			kp, _ := nkeys.CreateUser()
			pub, _ := kp.PublicKey()
			_ = relay.nc.Publish(api.SiteEnrollSubject("paris", pub), []byte(`{"node_id":"x"}`))
		}
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		r, err := relay.enroll(pub, api.EnrollRequest{NodeID: fmt.Sprintf("sync-%d", batch), Token: tok}, 10*time.Second)
		if err != nil || r.Error != "" {
			t.Fatalf("batch %d: %+v %v", batch, r, err)
		}
	}
	if _, err := ar2Connect(t, f, k.kp); err == nil {
		t.Fatal("a relay's flood of fresh keys lifted the ban of a stranger flooding the hub")
	}
}

// Every subject a relay's connection may publish or hear crosses between
// the relays' account and the controllers' (a subject added to an agent's
// rights and not to the crossing would silently never arrive), and what
// crosses is no wider than a relay's rights could ever be: nothing of
// JetStream, results, requests, audit or dead letters.
func TestSiteAttackRelayAccountCrossesExactlyItsRights(t *testing.T) {
	f := siteFleet(t, 0)
	cred := newSite(t, f, "paris")
	relay := startEvilRelay(t, cred, nil)
	admitThrough(t, f, relay, "p-1", "web.prod")
	p := f.Controller.SitePermissions("paris")
	covered := func(subject string, crossing []string) bool {
		for _, c := range crossing {
			if server.SubjectMatchesFilter(subject, c) {
				return true
			}
		}
		return false
	}
	if len(p.Publish.Allow) < 5 || len(p.Subscribe.Allow) < 5 {
		t.Fatalf("paris's rights do not hold p-1's: %+v %+v", p.Publish.Allow, p.Subscribe.Allow)
	}
	for _, s := range p.Publish.Allow {
		if !covered(s, controller.SiteSend) {
			t.Errorf("a relay may publish %s, which does not reach the controllers", s)
		}
	}
	for _, s := range p.Subscribe.Allow {
		if !covered(s, controller.SiteHear) {
			t.Errorf("a relay may hear %s, which never reaches it", s)
		}
	}
	for _, s := range []string{"$JS.API.STREAM.LIST", "$JS.ACK.requests.scheduler.1.1.1.0.0", "$KV.enrollments.x",
		"result.j", "request.j", "audit.record", "dlq.x", "grid.enroll.x", "$SYS.REQ.SERVER.PING"} {
		for _, c := range append(slices.Clone(controller.SiteSend), controller.SiteHear...) {
			if server.SubjectsCollide(s, c) {
				t.Errorf("%s crosses between the relays' account and the controllers' (as %s)", s, c)
			}
		}
	}
}

// A group's step narrowed to one site (group:web.prod@default) must not
// reach a relay whose site has nodes in the same group: the relay would
// hear the commands of another site's nodes.
func TestSiteAttackRelayDoesNotHearGroupOfAnotherSite(t *testing.T) {
	f := siteFleet(t, 1) // node-1: web.prod, at the hub
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)
	admitThrough(t, f, relay, "p-1", "web.prod")
	// The relay listens where p-1's agent would.
	heard := make(chan *nats.Msg, 64)
	for _, subj := range api.AgentCommandSubjects("p-1", "paris", []string{"web.prod"}) {
		if _, err := relay.nc.ChanSubscribe(subj, heard); err != nil {
			t.Fatal(err)
		}
	}
	next := func(d time.Duration) (*nats.Msg, error) {
		select {
		case m := <-heard:
			return m, nil
		case <-time.After(d):
			return nil, nats.ErrTimeout
		}
	}
	// The relay holds p-1's rights once it has reconnected: a site-wide
	// broadcast to paris reaches it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.WaitOnline(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		hub, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		_ = hub.Publish(api.SiteCommandSubject("paris", "net", "probe"), []byte("{}"))
		_ = hub.Flush()
		hub.Close()
		if m, err := next(500 * time.Millisecond); err == nil && m.Subject == api.SiteCommandSubject("paris", "net", "probe") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never held p-1's rights")
		}
	}
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web.prod", Site: api.DefaultSite},
		Tasks: []api.Phase{{Backend: "net", Action: "dns_get"}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := f.Client().WaitJob(ctx, job.ID); err != nil || j.Status != api.JobCompleted {
		t.Fatalf("the hub's group job: %v %+v", err, j)
	}
	for {
		m, err := next(time.Second)
		if err != nil {
			return
		}
		if strings.Contains(string(m.Data), job.ID) {
			t.Fatalf("the relay of paris heard a command of the hub's group job on %s", m.Subject)
		}
	}
}

// A relay names the keys it enrolls, so a compromised one enrolls keys it
// made itself and holds their seeds. Revoking its site must end what they
// can do at the hub too: connected straight to a controller, they get no
// node's rights.
func TestSiteAttackRevokedSiteNodesGetNoRightsAtTheHub(t *testing.T) {
	f := siteFleet(t, 0)
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)
	kp := admitThrough(t, f, relay, "p-1", "web")
	// Straight to the hub, its key holds p-1's rights while paris lives.
	conn := func() (*ar2Key, error) {
		return ar2Connect(t, f, kp, nats.Name("p-1"), nats.ReconnectWait(50*time.Millisecond))
	}
	heartbeat := func(k *ar2Key) error {
		_, err := k.nc.Request(api.NodeHeartbeatSubject("p-1"), []byte("x"), 2*time.Second)
		return err
	}
	k, err := conn()
	if err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(k); err != nil {
		t.Fatalf("p-1 straight to the hub before its site was revoked: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Client().RevokeSite(ctx, "paris"); err != nil {
		t.Fatal(err)
	}
	// The open connection is closed, and a new one gets nothing of p-1.
	deadline := time.Now().Add(5 * time.Second)
	for k.nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if k.nc.IsConnected() {
		t.Fatal("p-1's connection to the hub stayed open after its site was revoked")
	}
	if k, err = conn(); err == nil {
		if err := heartbeat(k); err == nil {
			t.Fatal("p-1 still speaks at the hub after its site was revoked")
		}
	}
}

// The server replaces a leaf connection by a newer one that gives the
// same server name, cluster and remote account (a relay's reconnect
// replacing its stale connection): another site's relay must not cut a
// relay off by giving its names.
func TestSiteAttackRelayCannotEvictAnotherSitesRelay(t *testing.T) {
	f := siteFleet(t, 0)
	lyon, paris := newSite(t, f, "lyon"), newSite(t, f, "paris")
	names := map[string]any{"name": "relay-lyon", "cluster": "lyon", "remote_account": "$G"}
	victim := dialRawLeaf(t, lyon, names)
	if l, err := tryRawLeaf(t, paris, names); err == nil {
		// Refused or not, the hub has decided once it answers.
		l.send(t, "PING\r\n")
	}
	// lyon's relay asks for its roster: answered if still connected.
	_, _ = victim.conn.Write([]byte("LS+ " + api.SiteInboxPrefix("lyon") + ".>\r\n" +
		fmt.Sprintf("LMSG %s + %s grid-site 0\r\n\r\n", api.SiteRosterSubject("lyon"), api.SiteInboxPrefix("lyon")+".r")))
	for {
		select {
		case m := <-victim.msgs:
			if m.subject == api.SiteInboxPrefix("lyon")+".r" {
				return
			}
		case <-victim.done:
			t.Fatal("lyon's relay was cut off by a relay of paris giving its names")
		case <-time.After(10 * time.Second):
			t.Fatal("lyon's relay was not answered")
		}
	}
}

// Strangers on the leaf port: no key, a made-up key, a site's public key
// signed with another key, a revoked site's key. All refused.
func TestSiteAttackLeafPortRefusesStrangers(t *testing.T) {
	f := siteFleet(t, 0)
	paris := newSite(t, f, "paris")
	gone := newSite(t, f, "gone")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Client().RevokeSite(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	madeUp, _ := nkeys.CreateUser()
	madeUpSeed, _ := madeUp.Seed()
	parisKP, _ := nkeys.FromSeed([]byte(paris.Seed))
	parisPub, _ := parisKP.PublicKey()
	withSeed := func(seed string) api.SiteCredential {
		c := paris
		c.Seed = seed
		return c
	}
	for _, tc := range []struct {
		name  string
		cred  api.SiteCredential
		extra map[string]any
	}{
		{"no key", paris, map[string]any{"nkey": "", "sig": ""}},
		{"made-up key", withSeed(string(madeUpSeed)), nil},
		{"site's key, another's signature", withSeed(string(madeUpSeed)), map[string]any{"nkey": parisPub}},
		{"revoked site", gone, nil},
	} {
		if l, err := tryRawLeaf(t, tc.cred, tc.extra); err == nil {
			select {
			case <-l.done:
			case <-time.After(5 * time.Second):
				t.Errorf("%s: the leaf port let it in", tc.name)
			}
		}
	}
	// The genuine credential gets in.
	dialRawLeaf(t, paris, nil)
}
