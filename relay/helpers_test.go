package relay_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
	"github.com/gridfleet/terraform-provider-grid/relay"
)

const site = "paris"

// testPKI is a CA as the hub has one, with the hub's leaf certificate and
// the relay's, as a site credential carries it.
type testPKI struct {
	dir     string
	caFile  string
	hubCert tls.Certificate
	relay   struct{ cert, key string }
	caPEM   string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: dir, caFile: filepath.Join(dir, pki.CAFile), caPEM: string(ca.PEM)}
	hosts := []string{"127.0.0.1", "localhost"}
	if p.hubCert, err = pki.EnsureCert(ca, filepath.Join(dir, "hub.pem"), filepath.Join(dir, "hub-key.pem"),
		pki.CertSpec{CommonName: "hub", Hosts: hosts, Server: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureCert(ca, filepath.Join(dir, "relay.pem"), filepath.Join(dir, "relay-key.pem"),
		pki.CertSpec{CommonName: "relay", Hosts: hosts, Server: true}); err != nil {
		t.Fatal(err)
	}
	p.relay.cert = readFile(t, filepath.Join(dir, "relay.pem"))
	p.relay.key = readFile(t, filepath.Join(dir, "relay-key.pem"))
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hub is a plain NATS server with a leaf port standing in for the
// controllers, and a client of it that answers the site subjects as the
// contract says the hub does: only into the site's inbox. The relay is
// what is tested; the hub side is just the subjects.
type hub struct {
	ns *server.Server
	nc *nats.Conn

	mu          sync.Mutex
	enrollments []api.Enrollment
	// requests are the enrollment requests the hub got, by key.
	requests []siteRequest
	// answer decides the answer to an enrollment request.
	answer func(key string, req api.EnrollRequest) api.EnrollReply
	// silent, when set, picks the requests left unanswered (as a hub
	// drops strangers over its budget).
	silent func(key string) bool
	// rosterAsks counts roster requests.
	rosterAsks int
}

type siteRequest struct {
	key, reply string
	body       []byte
}

func startHub(t *testing.T, p *testPKI) *hub {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: server.RANDOM_PORT,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{p.hubCert}, MinVersion: tls.VersionTLS12}, TLSTimeout: 5},
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("stand-in hub not ready")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h := &hub{ns: ns, nc: nc, answer: func(string, api.EnrollRequest) api.EnrollReply {
		return api.EnrollReply{Status: api.EnrollPending, Site: site}
	}}
	inSite := func(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, api.SiteInboxPrefix(site)+".") }
	if _, err := nc.Subscribe(api.SubjectSiteRosterAll, func(m *nats.Msg) {
		if !inSite(m) {
			return
		}
		h.mu.Lock()
		h.rosterAsks++
		b, _ := json.Marshal(api.SiteRoster{Site: site, Enrollments: h.enrollments})
		h.mu.Unlock()
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(api.SubjectSiteEnrollAll, func(m *nats.Msg) {
		key, ok := strings.CutPrefix(m.Subject, "grid.site."+site+".enroll.")
		if !ok || !inSite(m) {
			return
		}
		var req api.EnrollRequest
		_ = json.Unmarshal(m.Data, &req)
		h.mu.Lock()
		h.requests = append(h.requests, siteRequest{key: key, reply: m.Reply, body: m.Data})
		answer, silent := h.answer, h.silent
		h.mu.Unlock()
		if silent != nil && silent(key) {
			return
		}
		b, _ := json.Marshal(answer(key, req))
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

// leafURL is the hub's leaf port, as a credential names it.
func (h *hub) leafURL() string {
	v, err := h.ns.Varz(nil)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("tls://127.0.0.1:%d", v.LeafNode.Port)
}

func (h *hub) setRoster(es ...api.Enrollment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enrollments = es
}

func (h *hub) requestsSeen() []siteRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]siteRequest(nil), h.requests...)
}

// site makes a site key and its credential for a hub at hubURL.
func credential(t *testing.T, p *testPKI, hubURLs ...string) *api.SiteCredential {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	return &api.SiteCredential{Site: site, Seed: string(seed), CA: p.caPEM, Cert: p.relay.cert, Key: p.relay.key, HubURLs: hubURLs}
}

// startRelay starts a relay of the site with a credential for h.
func startRelay(t *testing.T, cred *api.SiteCredential, dataDir string) *relay.Relay {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.Credential = cred
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dataDir
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return startRelayConfig(t, cfg)
}

// startRelayConfig starts a relay from cfg, closed when the test ends.
func startRelayConfig(t *testing.T, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// waitDelivered publishes with send until sub gets a message holding
// want: interest takes its time to cross the link, so the first messages
// may find no one.
func waitDelivered(t *testing.T, what string, sub *nats.Subscription, send func(), want string) {
	t.Helper()
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, what, func() bool {
		send()
		m, err := sub.NextMsg(20 * time.Millisecond)
		return err == nil && string(m.Data) == want
	})
}

// waitLinked waits for the relay's leaf link and a first roster.
func waitLinked(t *testing.T, r *relay.Relay) {
	t.Helper()
	testwait.Until(t, 30*time.Second, 20*time.Millisecond, "the relay's link to the hub", r.LeafConnected)
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "a roster from the hub", func() bool {
		return r.RefreshRoster(context.Background()) == nil
	})
}

// key is an agent's key pair.
type key struct {
	kp  nkeys.KeyPair
	pub string
}

func newKey(t *testing.T) key {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return key{kp: kp, pub: pub}
}

func admitted(k key, node string, groups ...string) api.Enrollment {
	return api.Enrollment{NodeID: node, PublicKey: k.pub, Groups: groups, Status: api.EnrollAdmitted, Site: site}
}

// agentConn is a connection to the relay as an agent makes it, recording
// whether the server closed it.
type agentConn struct {
	nc     *nats.Conn
	closed chan struct{}
}

func connectAgent(t *testing.T, r *relay.Relay, p *testPKI, k key, name string) (*agentConn, error) {
	t.Helper()
	ac := &agentConn{closed: make(chan struct{})}
	var once sync.Once
	nc, err := nats.Connect(r.URL(), nats.RootCAs(p.caFile), nats.Nkey(k.pub, k.kp.Sign), nats.Name(name),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(k.pub)), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.ClosedHandler(func(*nats.Conn) { once.Do(func() { close(ac.closed) }) }))
	if err != nil {
		return nil, err
	}
	ac.nc = nc
	t.Cleanup(nc.Close)
	return ac, nil
}

func mustConnect(t *testing.T, r *relay.Relay, p *testPKI, k key, name string) *agentConn {
	t.Helper()
	ac, err := connectAgent(t, r, p, k, name)
	if err != nil {
		t.Fatalf("connect %s: %v", name, err)
	}
	return ac
}

// refused reports whether the server refused a publish or subscription
// naming subject on this connection. After a round trip the client has
// read every error the server sent before its PONG (a violation sets the
// connection's last error as it is read), so the answer is settled.
func (ac *agentConn) refused(t *testing.T, subject string) bool {
	t.Helper()
	if err := ac.nc.Flush(); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	err := ac.nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}

// startSiteHub starts a real hub (a controller with a leaf port and agents
// of its own, configured further by more when given), creates the site
// through the API and returns the hub with the site's credential.
func startSiteHub(t *testing.T, ctx context.Context, agents int, more func(*controller.Config)) (*fleet.Fleet, api.SiteCredential) {
	t.Helper()
	f := fleettest.Start(t, fleet.Options{Agents: agents, Controller: func(c *controller.Config) {
		c.LeafAddr = "127.0.0.1:0"
		if more != nil {
			more(c)
		}
	}})
	cred, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: site})
	if err != nil {
		t.Fatalf("create site: %v", err)
	}
	return f, cred
}

// startLinkedRelay starts a relay from cred and waits for its leaf link
// to the hub.
func startLinkedRelay(t *testing.T, cred *api.SiteCredential, dataDir string) *relay.Relay {
	t.Helper()
	r := startRelay(t, cred, dataDir)
	testwait.Until(t, 30*time.Second, 20*time.Millisecond, "the relay's link to the hub", r.LeafConnected)
	return r
}

// siteAgentConfig is the configuration of an agent of the site named
// name: it knows only the relay's address and the hub's CA; the caller
// gives it a join token.
func siteAgentConfig(t *testing.T, f *fleet.Fleet, r *relay.Relay, name string) agent.Config {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.Name = name
	cfg.NATSURLs = []string{r.URL()}
	cfg.DataDir = t.TempDir()
	cfg.Sandbox = filepath.Join(cfg.DataDir, "sandbox")
	cfg.CAFile = f.CAFile()
	return cfg
}

// startSiteAgent starts an agent from cfg, stopped when the test ends.
func startSiteAgent(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	if err := a.Start(actx); err != nil {
		stopAgent()
		t.Fatalf("start the site's agent: %v", err)
	}
	t.Cleanup(func() { stopAgent(); <-a.Done() })
	return a
}

// savedRosterHubDown has a relay link to a stand-in hub whose roster
// admits a as node a1 of group web, save that roster in dir and stop;
// then the hub goes down. What is left is the data dir a relay restarted
// without its hub starts from.
func savedRosterHubDown(t *testing.T) (p *testPKI, a key, cred *api.SiteCredential, dir string) {
	t.Helper()
	p = newPKI(t)
	h := startHub(t, p)
	a = newKey(t)
	h.setRoster(admitted(a, "a1", "web"))
	cred = credential(t, p, h.leafURL())
	dir = t.TempDir()
	first := startRelay(t, cred, dir)
	waitLinked(t, first)
	first.Close()
	h.ns.Shutdown()
	return p, a, cred, dir
}

// linkedSite starts a stand-in hub whose roster holds roster and a relay
// of the site linked to it, with the roster in hand.
func linkedSite(t *testing.T, roster ...api.Enrollment) (*testPKI, *hub, *relay.Relay) {
	t.Helper()
	p := newPKI(t)
	h := startHub(t, p)
	h.setRoster(roster...)
	r := startRelay(t, credential(t, p, h.leafURL()), "")
	waitLinked(t, r)
	return p, h, r
}
