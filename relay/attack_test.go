package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
	"github.com/nats-io/nats.go"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/relay"
)

// Attacks on a site's relay: by a stranger on the site's network, by a
// site host holding one admitted agent's key, and by someone who can write
// the relay's data dir. Each test is an attack that must fail.

// Whoever can write the relay's data dir (but not read its credential)
// writes a roster admitting a key of their own as a node of the site, and
// waits for the relay to restart while its link is cut: the relay must
// not take a roster it did not save itself.
func TestAttackForgedRosterCacheAdmitsNobody(t *testing.T) {
	p, a, cred, dir := savedRosterHubDown(t)

	// The forger keeps whatever else the file holds and adds its key.
	path := filepath.Join(dir, relay.RosterFile)
	mallory := newKey(t)
	forged := api.SiteRoster{Site: site, Enrollments: []api.Enrollment{admitted(a, "a1", "web"), admitted(mallory, "a2", "web")}}
	b, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	second := startRelay(t, cred, dir)
	m := mustConnect(t, second, p, mallory, "grid-agent a2")
	if _, err := m.nc.SubscribeSync("cmd.node.a2.*.*"); err != nil {
		t.Fatal(err)
	}
	if !m.refused(t, "cmd.node.a2.*.*") {
		t.Fatal("a key from a roster written into the data dir got a node's rights")
	}
}

// The same forger copies another site's (or an older) cache of this relay
// with a changed enrollment: a cache is only good whole.
func TestAttackEditedRosterCacheAdmitsNobody(t *testing.T) {
	p, a, cred, dir := savedRosterHubDown(t)

	path := filepath.Join(dir, relay.RosterFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Widen a1's groups in place, keeping whatever else the file says.
	edited := bytes.Replace(b, []byte(`"web"`), []byte(`"web","db"`), 1)
	if bytes.Equal(edited, b) {
		t.Fatalf("cache does not name the group: %s", b)
	}
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	second := startRelay(t, cred, dir)
	ag := mustConnect(t, second, p, a, "grid-agent a1")
	if _, err := ag.nc.SubscribeSync("cmd.group.db.*.*"); err != nil {
		t.Fatal(err)
	}
	if !ag.refused(t, "cmd.group.db.*.*") {
		t.Fatal("an edited roster cache widened an agent's rights")
	}
}

// Strangers (keys the roster does not know) whose requests the hub leaves
// unanswered, as it does past its own strangers' budget, each hold one of
// the proxy's slots until its timeout: they must not take the slots the
// site's known agents need (a pending agent asking whether it was
// approved, an admitted one checking it was not revoked).
func TestAttackStrangersUnansweredDoNotCrowdOutKnownKeys(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	known := newKey(t)
	h.setRoster(api.Enrollment{NodeID: "k1", PublicKey: known.pub, Status: api.EnrollPending, Site: site})
	h.mu.Lock()
	h.silent = func(key string) bool { return key != known.pub }
	h.mu.Unlock()
	r := startRelay(t, credential(t, p, h.leafURL()), "")
	waitLinked(t, r)

	// More strangers than the proxy holds slots, each sending its burst;
	// the relay's strangers' budget lets through what it lets through.
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "x", Token: "made-up"})
	for i := 0; i < 40; i++ {
		s := newKey(t)
		c := connectFrom(t, r, p, s, api.EnrollConnName+"x", net.IPv4(127, 0, 1, byte(i+1))) // a host each
		for j := 0; j < 5; j++ {
			if err := c.nc.PublishRequest(api.EnrollSubject(s.pub), api.AgentInboxPrefix(s.pub)+".r", body); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the strangers' budget refills at 20/s
	}
	testwait.Until(t, 10*time.Second, 20*time.Millisecond, "the strangers' requests at the hub", func() bool {
		return len(h.requestsSeen()) >= 16 // the strangers' slots at least
	})

	c := mustConnect(t, r, p, known, api.EnrollConnName+"k1")
	req, _ := json.Marshal(api.EnrollRequest{NodeID: "k1"})
	m, err := c.nc.Request(api.EnrollSubject(known.pub), req, 3*time.Second)
	if err != nil {
		t.Fatalf("a known agent's request while strangers wait for the hub: %v", err)
	}
	var reply api.EnrollReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Status != api.EnrollPending {
		t.Fatalf("answer %s (%v), want the hub's", m.Data, err)
	}
}

// One host on the site's network floods enrollment requests over many
// fresh keys, each within its own key's rate, to spend the strangers'
// budget: a new agent on another host, with its join token, must still
// get its first request through.
func TestAttackOneHostsKeyFloodLeavesOtherHostsEnrolling(t *testing.T) {
	p, h, r := linkedSite(t)

	body, _ := json.Marshal(api.EnrollRequest{NodeID: "x", Token: "made-up"})
	const flooders = 300
	conns := make([]*agentConn, flooders)
	keys := make([]key, flooders)
	for i := range conns {
		keys[i] = newKey(t)
		conns[i] = mustConnect(t, r, p, keys[i], api.EnrollConnName+"x")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i, c := range conns {
				_ = c.nc.PublishRequest(api.EnrollSubject(keys[i].pub), api.AgentInboxPrefix(keys[i].pub)+".r", body)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	testwait.Until(t, 10*time.Second, 20*time.Millisecond, "the flood at the hub", func() bool {
		return len(h.requestsSeen()) >= 10
	})

	// The new agent's host is another address of the site's network.
	newcomer := newKey(t)
	nc := connectFrom(t, r, p, newcomer, api.EnrollConnName+"n1", net.IPv4(127, 0, 0, 2)).nc
	req, _ := json.Marshal(api.EnrollRequest{NodeID: "n1", Token: "join"})
	if _, err := nc.Request(api.EnrollSubject(newcomer.pub), req, 3*time.Second); err != nil {
		t.Fatalf("a new agent's first request during another host's flood: %v", err)
	}
}

// connectFrom connects to the relay as an agent on the host at ip (a
// loopback address: the relay tells hosts apart by address).
func connectFrom(t *testing.T, r *relay.Relay, p *testPKI, k key, name string, ip net.IP) *agentConn {
	t.Helper()
	nc, err := nats.Connect(r.URL(), nats.RootCAs(p.caFile), nats.Nkey(k.pub, k.kp.Sign), nats.Name(name),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(k.pub)), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.SetCustomDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}))
	if err != nil {
		t.Fatalf("connect %s from %s: %v", name, ip, err)
	}
	t.Cleanup(nc.Close)
	return &agentConn{nc: nc, closed: make(chan struct{})}
}

// Strangers send enrollment requests as fast as their links carry them
// (each far over its key's rate, the largest the proxy reads). The
// proxy's queue is shared, and a client on a fast link outruns any
// handler, so a known agent's request would be dropped with the flood:
// the flooders' connections are closed, their keys refused for a while,
// and the known agent is answered.
func TestAttackWireSpeedFloodIsCutOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"requests of the largest size read", 4 << 10},
		// Too large to read, but each still takes the proxy's queue.
		{"requests too large to read", 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) { wireSpeedFlood(t, tc.size) })
	}
}

func wireSpeedFlood(t *testing.T, size int) {
	known := newKey(t)
	p, _, r := linkedSite(t, api.Enrollment{NodeID: "k1", PublicKey: known.pub, Status: api.EnrollPending, Site: site})

	big := bytes.Repeat([]byte{'x'}, size)
	var wg sync.WaitGroup
	flooders := make([]key, 4)
	conns := make([]*nats.Conn, len(flooders))
	for i := range flooders {
		k := newKey(t)
		flooders[i] = k
		c := connectFrom(t, r, p, k, api.EnrollConnName+"x", net.IPv4(127, 0, 2, byte(i+1)))
		conns[i] = c.nc
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !c.nc.IsClosed() {
				if err := c.nc.PublishRequest(api.EnrollSubject(k.pub), api.AgentInboxPrefix(k.pub)+".r", big); err != nil {
					return
				}
			}
		}()
	}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
		wg.Wait()
	}()
	testwait.Until(t, 20*time.Second, 20*time.Millisecond, "the flooders' connections closed", func() bool {
		for _, nc := range conns {
			if !nc.IsClosed() {
				return false
			}
		}
		return true
	})
	if c, err := connectAgent(t, r, p, flooders[0], api.EnrollConnName+"x"); err == nil {
		c.nc.Close()
		t.Fatal("a flooding key reconnected at once")
	}

	c := mustConnect(t, r, p, known, api.EnrollConnName+"k1")
	req, _ := json.Marshal(api.EnrollRequest{NodeID: "k1"})
	if _, err := c.nc.Request(api.EnrollSubject(known.pub), req, 5*time.Second); err != nil {
		t.Fatalf("a known agent's request after a flood: %v", err)
	}
}

// The hub closes a leaf connection that asks for interest it may not
// have (a literal subject outside its rights), and the relay then waits
// 30s before linking again: a stranger at the site subscribing to literal
// subjects of its own inbox, in a queue group or not, must not have the
// relay ask for them, or one stranger would cut the whole site off.
func TestAttackStrangersSubscriptionsDoNotCutTheLink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 0, nil)
	r := startRelay(t, &cred, "")
	waitLinked(t, r)
	links := func() []uint64 {
		lz, err := f.Controller.NATSServer().Leafz(nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, l := range lz.Leafs {
			ids = append(ids, l.ID)
		}
		return ids
	}
	before := links()

	s := newKey(t)
	c := mustConnect(t, r, &testPKI{caFile: f.CAFile()}, s, api.EnrollConnName+"s1")
	inbox := api.AgentInboxPrefix(s.pub)
	for _, sub := range []struct{ subject, queue string }{
		{inbox + ".x", ""},
		{inbox + ".x", "grid-intake"},
		{inbox + ".>", "grid-site"},
		{inbox + ".*", ""},
	} {
		var err error
		if sub.queue == "" {
			_, err = c.nc.SubscribeSync(sub.subject)
		} else {
			_, err = c.nc.QueueSubscribeSync(sub.subject, sub.queue)
		}
		if err != nil || c.refused(t, sub.subject) {
			t.Fatalf("subscribe %s %s in its own inbox: %v %v", sub.subject, sub.queue, err, c.nc.LastError())
		}
	}
	// The relay's interest goes out before its roster request, on the
	// same link: had the hub closed the link for it, the request would
	// go unanswered.
	if err := r.RefreshRoster(ctx); err != nil {
		t.Fatalf("roster after a stranger's subscriptions: %v", err)
	}
	if after := links(); !slices.Equal(before, after) || !r.LeafConnected() {
		t.Fatalf("the site's link changed with a stranger's subscriptions: %v, then %v", before, after)
	}
}

// A stranger holds subscriptions in its own inbox as many as it likes:
// each costs the relay's memory, so one connection could take the relay
// down. An agent needs a few dozen; the relay caps them.
func TestAttackStrangerCannotHoldUnboundedSubscriptions(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	r := startRelay(t, credential(t, p, h.leafURL()), "")
	s := newKey(t)
	c := mustConnect(t, r, p, s, api.EnrollConnName+"s1")
	for i := range 20000 {
		if _, err := c.nc.SubscribeSync(fmt.Sprintf("%s.%d", api.AgentInboxPrefix(s.pub), i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
		t.Fatalf("20000 subscriptions of one connection taken (last error %v)", err)
	}
}

// Whoever reads the relay's logs (at debug level) learns neither the
// site's seed nor an agent's join token, whatever agents send: requests
// passed on, dropped, flooding, a link up and a roster saved.
func TestAttackLogsHoldNoSecret(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	cred := credential(t, p, h.leafURL())
	var logs syncBuffer
	cfg := relay.DefaultConfig()
	cfg.Credential, cfg.Listen, cfg.DataDir = cred, "127.0.0.1:0", t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := startRelayConfig(t, cfg)
	waitLinked(t, r)

	const token = "gridjoin_web.s3cr3t-join-token-value"
	s := newKey(t)
	c := mustConnect(t, r, p, s, api.EnrollConnName+"s1")
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "s1", Token: token})
	if _, err := c.nc.Request(api.EnrollSubject(s.pub), body, 10*time.Second); err != nil {
		t.Fatalf("enrollment through the relay: %v", err)
	}
	// Dropped: another inbox, too large, then a flood that is cut off.
	_ = c.nc.PublishRequest(api.EnrollSubject(s.pub), "_INBOX.elsewhere.x", body)
	_ = c.nc.PublishRequest(api.EnrollSubject(s.pub), api.AgentInboxPrefix(s.pub)+".x", append(bytes.Repeat([]byte(" "), 8<<10), body...))
	for !c.nc.IsClosed() {
		if err := c.nc.PublishRequest(api.EnrollSubject(s.pub), api.AgentInboxPrefix(s.pub)+".x", body); err != nil {
			break
		}
	}
	testwait.Until(t, 20*time.Second, 20*time.Millisecond, "the flooder cut off", c.nc.IsClosed)
	r.Close()

	out := logs.String()
	if !strings.Contains(out, "flooding") {
		t.Fatalf("the logs do not show the flood (the test saw nothing worth hiding):\n%s", out)
	}
	for what, secret := range map[string]string{"the site's seed": cred.Seed, "a join token": "s3cr3t-join-token-value", "the relay's key": cred.Key} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs hold %s", what)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the relay's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The credential holds the site's seed: a relay whose credential file
// every user of its host may read (or anyone but its owner may replace,
// pointing the relay to a hub and CA of their own) refuses to start,
// saying what to do, rather than serve with a key others hold.
func TestAttackCredentialFileOthersCanReadIsRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes say nothing of access on Windows")
	}
	p := newPKI(t)
	cred := credential(t, p, "tls://127.0.0.1:1")
	b, err := json.Marshal(cred)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true},
		{0o640, true},
		{0o644, false},
		{0o660, false},
		{0o606, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "paris.site.json")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			cfg := relay.DefaultConfig()
			cfg.CredentialFile, cfg.Listen = path, "127.0.0.1:0"
			r, err := relay.New(cfg)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("mode %v refused: %v", tc.mode, err)
			case !tc.ok && err == nil:
				t.Fatalf("a credential file of mode %v taken", tc.mode)
			case !tc.ok && !strings.Contains(err.Error(), "chmod 600"):
				t.Fatalf("error %v does not say what to do", err)
			}
			_ = r
		})
	}
}

// Whoever can write the data dir replaces the roster cache with something
// that is not a file: a FIFO (reading it waits forever) or a link to an
// endless device (reading it takes all memory). The relay must start all
// the same, without the cache.
func TestAttackRosterCacheThatIsNoFileDoesNotWedgeTheRelay(t *testing.T) {
	mkfifo, err := exec.LookPath("mkfifo")
	if err != nil {
		t.Skip("no mkfifo here")
	}
	p := newPKI(t)
	cred := credential(t, p, "tls://127.0.0.1:1")
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"a FIFO", func(t *testing.T, path string) {
			if out, err := exec.Command(mkfifo, path).CombinedOutput(); err != nil {
				t.Fatalf("mkfifo: %v %s", err, out)
			}
		}},
		{"a link to /dev/zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, filepath.Join(dir, relay.RosterFile))
			cfg := relay.DefaultConfig()
			cfg.Credential, cfg.Listen, cfg.DataDir = cred, "127.0.0.1:0", dir
			r, err := relay.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan error, 1)
			go func() { started <- r.Start(context.Background()) }()
			select {
			case err := <-started:
				if err != nil {
					t.Fatalf("start: %v", err)
				}
				r.Close()
			case <-time.After(20 * time.Second):
				t.Fatal("the relay did not start with a roster cache that is not a file")
			}
		})
	}
}

// An admitted agent of the site sends its heartbeat with a reply subject
// of its choosing: the relay's inbox (where the roster and enrollment
// answers come), another node's inbox. Nothing on the hub may write there
// for it. (Two guards hold today: such a request does not reach the
// intake across the link, and the intake answers only into the sender's
// own inbox.)
func TestAttackSiteAgentsReplySubjectsGetNoAnswerElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, cred := startSiteHub(t, ctx, 0, nil)
	r := startLinkedRelay(t, &cred, "")
	pk := &testPKI{caFile: f.CAFile()}
	token := strings.TrimSpace(readFile(t, f.JoinTokenFile()))

	// The agent enrolls with the join token, then connects for real.
	a, other := newKey(t), newKey(t)
	enr := mustConnect(t, r, pk, a, api.EnrollConnName+"s1")
	body, _ := json.Marshal(api.EnrollRequest{NodeID: "s1", Token: token})
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "the site's agent admitted", func() bool {
		m, err := enr.nc.Request(api.EnrollSubject(a.pub), body, 5*time.Second)
		var rep api.EnrollReply
		return err == nil && json.Unmarshal(m.Data, &rep) == nil && rep.Status == api.EnrollAdmitted
	})
	enr.nc.Close()
	var ag *agentConn
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "the agent's rights at the relay", func() bool {
		c, err := connectAgent(t, r, pk, a, "grid-agent s1")
		if err != nil {
			return false
		}
		if _, err := c.nc.SubscribeSync("cmd.node.s1.*.*"); err != nil || c.refused(t, "cmd.node.s1.*.*") {
			c.nc.Close()
			return false
		}
		ag = c
		return true
	})

	// What the hub writes where the agent may not read, seen from the hub.
	hub, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	elsewhere := []string{api.SiteInboxPrefix(site) + ".x", api.AgentInboxPrefix(other.pub) + ".x"}
	var subs []*nats.Subscription
	for _, s := range elsewhere {
		sub, err := hub.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := hub.Flush(); err != nil {
		t.Fatal(err)
	}

	hb, _ := json.Marshal(api.NodeInfo{ID: "s1", Hostname: "s1", Groups: []string{}})
	for _, reply := range elsewhere {
		if err := ag.nc.PublishRequest(api.NodeHeartbeatSubject("s1"), reply, hb); err != nil {
			t.Fatal(err)
		}
	}
	// The intake takes the heartbeats in order: once the one asking in
	// the agent's own inbox is answered, the others were dropped.
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "an answer in the agent's own inbox", func() bool {
		_, err := ag.nc.Request(api.NodeHeartbeatSubject("s1"), hb, 5*time.Second)
		return err == nil
	})
	for i, sub := range subs {
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("the hub answered into %s for the agent: %s", elsewhere[i], m.Data)
		}
	}
}
