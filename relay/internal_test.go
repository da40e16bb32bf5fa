package relay

import (
	"crypto/tls"
	"encoding/base64"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// conn is what the server hands Check about one connection: a connection
// of the given kind and address that signed the nonce with kp.
type conn struct {
	kind int
	addr net.Addr
	opts server.ClientOpts
	user *server.User
}

func (c *conn) GetOpts() *server.ClientOpts                 { return &c.opts }
func (c *conn) GetTLSConnectionState() *tls.ConnectionState { return nil }
func (c *conn) RegisterUser(u *server.User)                 { c.user = u }
func (c *conn) RemoteAddress() net.Addr                     { return c.addr }
func (c *conn) GetNonce() []byte                            { return []byte("nonce") }
func (c *conn) Kind() int                                   { return c.kind }
func (c *conn) GetID() uint64                               { return 1 }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

func signed(t *testing.T, kp nkeys.KeyPair, kind int, addr net.Addr, name string) *conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	sig, err := kp.Sign([]byte("nonce"))
	if err != nil {
		t.Fatal(err)
	}
	return &conn{kind: kind, addr: addr, opts: server.ClientOpts{Nkey: pub, Sig: base64.RawURLEncoding.EncodeToString(sig), Name: name}}
}

// Check lets in clients only, and the relay's own key only from inside
// the process; an admitted key's enrollment connection gets the
// enrollment's rights only.
func TestCheckDecidesByKindKeyAndPlace(t *testing.T) {
	self, _ := nkeys.CreateUser()
	selfPub, _ := self.PublicKey()
	agent, _ := nkeys.CreateUser()
	agentPub, _ := agent.PublicKey()
	ros := newRoster("paris", slog.New(slog.DiscardHandler))
	ros.replace([]api.Enrollment{{NodeID: "a1", PublicKey: agentPub, Status: api.EnrollAdmitted, Site: "paris"}})
	a := &auth{log: slog.New(slog.DiscardHandler), roster: ros, selfKey: selfPub}
	tcp := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 4222}

	cases := []struct {
		name    string
		c       *conn
		ok      bool
		user    string
		nilPerm bool
	}{
		{"the relay's key in process", signed(t, self, server.CLIENT, pipeAddr{}, ""), true, "relay", true},
		{"the relay's key over the network", signed(t, self, server.CLIENT, tcp, ""), false, "", false},
		{"an admitted agent", signed(t, agent, server.CLIENT, tcp, "grid-agent a1"), true, "node:a1", false},
		{"an admitted agent's enrollment connection", signed(t, agent, server.CLIENT, tcp, api.EnrollConnName+"a1"), true, "enrolling", false},
		{"an admitted key as a leaf", signed(t, agent, server.LEAF, tcp, ""), false, "", false},
		{"an admitted key as a route", signed(t, agent, server.ROUTER, tcp, ""), false, "", false},
		{"an admitted key as a gateway", signed(t, agent, server.GATEWAY, tcp, ""), false, "", false},
		{"the relay's key as a leaf in process", signed(t, self, server.LEAF, pipeAddr{}, ""), false, "", false},
		{"no key", &conn{kind: server.CLIENT, addr: tcp}, false, "", false},
		{"a key without its signature", &conn{kind: server.CLIENT, addr: tcp, opts: server.ClientOpts{Nkey: agentPub}}, false, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Check(tc.c); got != tc.ok {
				t.Fatalf("Check = %v, want %v", got, tc.ok)
			}
			if !tc.ok {
				if tc.c.user != nil {
					t.Fatalf("a refused connection was given user %q", tc.c.user.Username)
				}
				return
			}
			if tc.c.user == nil || tc.c.user.Username != tc.user {
				t.Fatalf("user %+v, want %q", tc.c.user, tc.user)
			}
			if (tc.c.user.Permissions == nil) != tc.nilPerm {
				t.Fatalf("permissions %+v: want unrestricted only for the relay's own client", tc.c.user.Permissions)
			}
		})
	}
}

// One key asks at an agent's pace; keys the roster does not know share a
// budget that a flood of fresh keys exhausts without touching the known
// keys'.
func TestEnrollProxyLimitsRequests(t *testing.T) {
	known, _ := nkeys.CreateUser()
	knownPub, _ := known.PublicKey()
	ros := newRoster("paris", slog.New(slog.DiscardHandler))
	ros.replace([]api.Enrollment{{NodeID: "a1", PublicKey: knownPub, Status: api.EnrollPending, Site: "paris"}})
	p := newEnrollProxy("paris", nil, slog.New(slog.DiscardHandler), ros, DefaultEnrollTimeout, nil)
	defer p.cancel()

	allowed := 0
	for range 3 * enrollKeyBurst {
		if p.allow(knownPub) {
			allowed++
		}
	}
	// The rate adds one a second: the loop takes far less.
	if allowed < enrollKeyBurst || allowed > enrollKeyBurst+1 {
		t.Fatalf("one key got %d of %d requests through, want its burst of %d", allowed, 3*enrollKeyBurst, enrollKeyBurst)
	}

	strangers := 0
	for range 3 * enrollStrangerBurst {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		if p.allow(pub) {
			strangers++
		}
	}
	if strangers > enrollStrangerBurst+int(enrollStrangerRate) {
		t.Fatalf("%d fresh keys got through, want at most the strangers' budget of %d", strangers, enrollStrangerBurst)
	}
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	ros.replace([]api.Enrollment{
		{NodeID: "a1", PublicKey: knownPub, Status: api.EnrollPending, Site: "paris"},
		{NodeID: "a2", PublicKey: otherPub, Status: api.EnrollPending, Site: "paris"},
	})
	if !p.allow(otherPub) {
		t.Fatal("a key of the roster was refused once the strangers' budget was spent")
	}
}

func TestOwnInbox(t *testing.T) {
	const key = "UKEY"
	cases := []struct {
		reply string
		ok    bool
	}{
		{"_INBOX.UKEY.abc", true},
		{"_INBOX.UKEY.abc.def", true},
		{"_INBOX.UKEY.", false},
		{"_INBOX.UKEY", false},
		{"_INBOX.UKEYX.abc", false},
		{"_INBOX.OTHER.abc", false},
		{"_INBOX.UKEY.*", false},
		{"_INBOX.UKEY.>", false},
		{"_INBOX.UKEY.a b", false},
		{"cmd.node.a1.file.write", false},
		{"", false},
	}
	for _, tc := range cases {
		if got := ownInbox(tc.reply, key); got != tc.ok {
			t.Errorf("ownInbox(%q) = %v, want %v", tc.reply, got, tc.ok)
		}
	}
}

// The roster gives rights only to enrollments of the relay's site that
// it can check, and names the keys whose connections must go.
func TestRosterReplace(t *testing.T) {
	mk := func() string {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		return pub
	}
	a, b, c, d, dup := mk(), mk(), mk(), mk(), mk()
	ros := newRoster("paris", slog.New(slog.DiscardHandler))
	ros.replace([]api.Enrollment{
		{NodeID: "a1", PublicKey: a, Status: api.EnrollAdmitted, Site: "paris", Groups: []string{"web"}},
		{NodeID: "b1", PublicKey: b, Status: api.EnrollAdmitted, Site: "paris"},
		{NodeID: "c1", PublicKey: c, Status: api.EnrollPending, Site: "paris"},
	})
	changes := ros.replace([]api.Enrollment{
		{NodeID: "a1", PublicKey: a, Status: api.EnrollAdmitted, Site: "paris", Groups: []string{"db"}},
		{NodeID: "c1", PublicKey: c, Status: api.EnrollAdmitted, Site: "paris"},
		{NodeID: "d1", PublicKey: d, Status: api.EnrollAdmitted, Site: "lyon"},
		{NodeID: "x1", PublicKey: dup, Status: api.EnrollAdmitted, Site: "paris"},
		{NodeID: "x2", PublicKey: dup, Status: api.EnrollAdmitted, Site: "paris"},
		{NodeID: "bad id", PublicKey: mk(), Status: api.EnrollAdmitted, Site: "paris"},
	})
	want := map[string]bool{a: false, b: false, c: true}
	got := map[string]bool{}
	for _, ch := range changes {
		got[ch.key] = ch.keepEnrolling
	}
	for k, keep := range want {
		if g, ok := got[k]; !ok || g != keep {
			t.Errorf("change of %s: got (%v, present %v), want keepEnrolling %v", k, g, ok, keep)
		}
	}
	if len(got) != len(want) {
		t.Errorf("changes %v, want only a (groups), b (gone), c (admitted)", changes)
	}
	if _, ok := ros.admitted(d); ok {
		t.Error("an enrollment of another site was admitted")
	}
	if _, ok := ros.admitted(dup); ok {
		t.Error("a key two enrollments name was admitted")
	}
	if e, ok := ros.admitted(a); !ok || e.Site != "paris" || strings.Join(e.Groups, ",") != "db" {
		t.Errorf("a: %+v, %v", e, ok)
	}
}

func TestLoadCredentialSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureCert(ca, filepath.Join(dir, "s.pem"), filepath.Join(dir, "s-key.pem"),
		pki.CertSpec{CommonName: "relay", Hosts: []string{"localhost"}, Server: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureCert(ca, filepath.Join(dir, "c.pem"), filepath.Join(dir, "c-key.pem"),
		pki.CertSpec{CommonName: "client", Client: true}); err != nil {
		t.Fatal(err)
	}
	other, err := pki.EnsureCA(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	good := func() api.SiteCredential {
		return api.SiteCredential{Site: "paris", Seed: string(seed), CA: string(ca.PEM), Cert: read("s.pem"), Key: read("s-key.pem"),
			HubURLs: []string{"tls://hub:7422"}}
	}
	cases := []struct {
		name   string
		change func(*api.SiteCredential, *Config)
		want   string
	}{
		{"good", func(*api.SiteCredential, *Config) {}, ""},
		{"the default site", func(c *api.SiteCredential, _ *Config) { c.Site = api.DefaultSite }, "reserved"},
		{"a bad site name", func(c *api.SiteCredential, _ *Config) { c.Site = "a.b" }, "not valid"},
		{"no seed", func(c *api.SiteCredential, _ *Config) { c.Seed = "" }, "seed"},
		{"an account seed", func(c *api.SiteCredential, _ *Config) { c.Seed = string(acctSeed) }, "user seed"},
		{"no CA", func(c *api.SiteCredential, _ *Config) { c.CA = "" }, "ca holds no PEM"},
		{"a key of another cert", func(c *api.SiteCredential, _ *Config) { c.Key = read("c-key.pem") }, "cert and key"},
		{"a client cert", func(c *api.SiteCredential, _ *Config) { c.Cert, c.Key = read("c.pem"), read("c-key.pem") }, "not a server certificate"},
		{"another CA", func(c *api.SiteCredential, _ *Config) { c.CA = string(other.PEM) }, "not a server certificate"},
		{"no hub", func(c *api.SiteCredential, _ *Config) { c.HubURLs = nil }, "no hub URL"},
		{"no hub but an override", func(c *api.SiteCredential, cfg *Config) { c.HubURLs, cfg.HubURLs = nil, []string{"tls://h:1"} }, ""},
		{"a hub URL with a user", func(c *api.SiteCredential, _ *Config) { c.HubURLs = []string{"tls://u:p@h:1"} }, "leave user"},
		{"a hub URL without a port", func(c *api.SiteCredential, _ *Config) { c.HubURLs = []string{"tls://h"} }, "want tls://"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := good()
			cfg := DefaultConfig()
			tc.change(&sc, &cfg)
			cfg.Credential = &sc
			_, err := loadCredential(cfg)
			wantRefusal(t, err, tc.want)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cred := &api.SiteCredential{}
	cases := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"good", func(c *Config) { c.Credential = cred }, ""},
		{"no credential", func(*Config) {}, "no site credential"},
		{"both", func(c *Config) { c.Credential, c.CredentialFile = cred, "x" }, "not both"},
		{"a listen address without a port", func(c *Config) { c.Credential, c.Listen = cred, "0.0.0.0" }, "want host:port"},
		{"a bad port", func(c *Config) { c.Credential, c.Listen = cred, ":http" }, "not a port"},
		{"a hub URL of another scheme", func(c *Config) { c.Credential, c.HubURLs = cred, []string{"http://h:1"} }, "want tls://"},
		{"a negative interval", func(c *Config) { c.Credential, c.RosterEvery = cred, -1 }, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			wantRefusal(t, err, tc.want)
		})
	}
}

// wantRefusal fails the test unless err is nil when want is empty, or an
// error saying want otherwise.
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one saying %q", err, want)
	}
}

// Two starts of one site's relay take different server names, which
// another site cannot guess to take first.
func TestServerNameIsNotGuessable(t *testing.T) {
	a, b := serverName("paris"), serverName("paris")
	if a == b || !IsServerOf(a, "paris") || !IsServerOf(b, "paris") || IsServerOf(a, "par") || IsServerOf(serverName("paris-x"), "paris") {
		t.Fatalf("server names %q and %q", a, b)
	}
}
