package controller_test

// Adversarial checks of enrollment, join tokens, the one-connection-per-key
// rule, the enrollment flood limits and the API's roles. Each test plays an
// attacker against a real secured controller and real agents and asserts
// that the attack fails and that the state it aims at is unchanged.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// ar2Key is a connection with a key the test made up: a stranger's.
type ar2Key struct {
	nc   *nats.Conn
	kp   nkeys.KeyPair
	pub  string
	errs chan error
}

func ar2NewKey(t *testing.T) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// ar2Connect connects with kp (a made-up key, or a stolen one).
func ar2Connect(t *testing.T, f *fleet.Fleet, kp nkeys.KeyPair, extra ...nats.Option) (*ar2Key, error) {
	t.Helper()
	pub, _ := kp.PublicKey()
	k := &ar2Key{kp: kp, pub: pub, errs: make(chan error, 256)}
	opts := append([]nats.Option{nats.Nkey(pub, kp.Sign), nats.RootCAs(f.CAFile()),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)), nats.NoReconnect(), nats.Timeout(5 * time.Second),
		nats.Name(api.EnrollConnName + "attacker"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case k.errs <- err:
			default:
			}
		})}, extra...)
	nc, err := nats.Connect(f.NATSURL(), opts...)
	if err != nil {
		return nil, err
	}
	k.nc = nc
	t.Cleanup(nc.Close)
	return k, nil
}

func ar2Stranger(t *testing.T, f *fleet.Fleet) *ar2Key {
	t.Helper()
	k, err := ar2Connect(t, f, ar2NewKey(t))
	if err != nil {
		t.Fatalf("a made-up key could not even ask to enroll: %v", err)
	}
	return k
}

// enroll asks to be enrolled; a timeout is returned as an error.
func (k *ar2Key) enroll(req api.EnrollRequest, timeout time.Duration) (api.EnrollReply, error) {
	b, _ := json.Marshal(req)
	m, err := k.nc.Request(api.EnrollSubject(k.pub), b, timeout)
	if err != nil {
		return api.EnrollReply{}, err
	}
	var r api.EnrollReply
	err = json.Unmarshal(m.Data, &r)
	return r, err
}

// ar2Snapshot is every key of a bucket with its revision and value.
func ar2Snapshot(t *testing.T, f *fleet.Fleet, bucket string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv := fleettest.Bucket(t, ctx, f, bucket)
	out := map[string]string{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		out[k] = fmt.Sprintf("%d:%s", e.Revision(), e.Value())
	}
	return out
}

func ar2Same(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %s changed:\n before %s\n after  %s", what, k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared: %s", what, k, v)
		}
	}
}

func ar2Enrollment(t *testing.T, f *fleet.Fleet, id string) *api.Enrollment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := fleettest.Bucket(t, ctx, f, api.BucketEnrollments).Get(ctx, id)
	if err != nil {
		return nil
	}
	var en api.Enrollment
	if err := json.Unmarshal(e.Value(), &en); err != nil {
		t.Fatal(err)
	}
	return &en
}

func ar2JoinToken(t *testing.T, f *fleet.Fleet, name string) api.JoinTokenInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := fleettest.Bucket(t, ctx, f, api.BucketJoinTokens).Get(ctx, name)
	if err != nil {
		t.Fatalf("join token %s: %v", name, err)
	}
	var info api.JoinTokenInfo
	if err := json.Unmarshal(e.Value(), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// ar2Call calls the API with a bearer token ("" for none).
func ar2Call(t *testing.T, f *fleet.Fleet, tok, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.APIURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func ar2Token(t *testing.T, f *fleet.Fleet, name string, role api.Role) string {
	t.Helper()
	nt, err := f.Client().CreateToken(context.Background(), name, role)
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	return nt.Token
}

func ar2CreateJoinToken(t *testing.T, f *fleet.Fleet, name string, groups []string, ttl time.Duration, uses int) string {
	t.Helper()
	nt, err := f.Client().CreateJoinToken(context.Background(), api.JoinTokenRequest{Name: name, Groups: groups,
		TTL: api.Duration(ttl), Uses: uses})
	if err != nil {
		t.Fatalf("create join token %s: %v", name, err)
	}
	return nt.Token
}

// (b) A stranger with made-up keys, no join token: every refusal is the one
// fixed answer, whether the node id (or a scoped token's name) exists or not,
// and nothing is stored.
func TestAttackStrangerEnrollRevealsNothing(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ar2CreateJoinToken(t, f, "webtok", []string{"web"}, time.Hour, 5)
	enrBefore := ar2Snapshot(t, f, api.BucketEnrollments)
	jtBefore := ar2Snapshot(t, f, api.BucketJoinTokens)

	fileTok, err := pki.ReadToken(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	reqs := []api.EnrollRequest{
		{NodeID: "node-1"},
		{NodeID: "no-such-node"},
		{NodeID: "node-1", Groups: []string{"web.prod"}},
		{NodeID: "node-1", Token: "gridjoin_webtok.bogus"},
		{NodeID: "no-such-node", Token: "gridjoin_nosuchtoken.bogus"},
		{NodeID: "node-2", Token: "gridjoin_webtok." + strings.Repeat("A", 43)},
		{NodeID: "node-1", Token: fileTok[:len(fileTok)-1] + "x"},
		{NodeID: "no-such-node", Token: "x" + fileTok},
	}
	var answers []string
	for i, req := range reqs {
		k := ar2Stranger(t, f)
		r, err := k.enroll(req, 5*time.Second)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if r.Status != "" {
			t.Errorf("request %d (%+v): a stranger got status %q", i, req, r.Status)
		}
		answers = append(answers, r.Error)
	}
	for i := range answers {
		if answers[i] != answers[0] {
			t.Errorf("answers differ, so they reveal something:\n %d: %s\n 0: %s", i, answers[i], answers[0])
		}
		for _, leak := range []string{"node-1", "node-2", "webtok", "web.prod", "another key"} {
			if strings.Contains(answers[i], leak) {
				t.Errorf("answer %d names %q: %s", i, leak, answers[i])
			}
		}
	}
	// Anything but its own enrollment subject and inbox is refused.
	k := ar2Stranger(t, f)
	for _, subj := range []string{"node.heartbeat.node-1", "report.j.s.node-1", "grid.enroll.x", "$JS.API.INFO", "$KV.enrollments.node-9"} {
		_ = k.nc.Publish(subj, []byte("{}"))
	}
	if _, err := k.nc.SubscribeSync("cmd.>"); err == nil {
		_ = k.nc.Flush()
	}
	time.Sleep(500 * time.Millisecond)
	violations := 0
	for len(k.errs) > 0 {
		if strings.Contains((<-k.errs).Error(), "Permissions Violation") {
			violations++
		}
	}
	if violations < 6 {
		t.Errorf("the server refused %d of 6 publishes/subscriptions of a stranger", violations)
	}
	ar2Same(t, "enrollments", enrBefore, ar2Snapshot(t, f, api.BucketEnrollments))
	ar2Same(t, "join tokens", jtBefore, ar2Snapshot(t, f, api.BucketJoinTokens))
}

// (b) and the one-connection-per-key rule: a stranger cannot connect with a
// real agent's public key (no seed), cannot publish on its enrollment
// subject, and its own flood gets itself banned, not the agent.
func TestAttackStrangerCannotBanOrLockOutAgent(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	victim := ar2Enrollment(t, f, "node-1")
	if victim == nil {
		t.Fatal("node-1 has no enrollment")
	}
	before := ar2Snapshot(t, f, api.BucketEnrollments)

	// The victim's public key with another key's signature: refused.
	mine := ar2NewKey(t)
	_, err := nats.Connect(f.NATSURL(), nats.Nkey(victim.PublicKey, mine.Sign), nats.RootCAs(f.CAFile()),
		nats.NoReconnect(), nats.Timeout(3*time.Second))
	if err == nil {
		t.Fatal("connected with a public key whose seed it does not hold")
	}
	// Many such attempts, and a flood on its own subject: only the
	// stranger is cut off.
	for range 30 {
		if nc, err := nats.Connect(f.NATSURL(), nats.Nkey(victim.PublicKey, mine.Sign), nats.RootCAs(f.CAFile()),
			nats.NoReconnect(), nats.Timeout(3*time.Second)); err == nil {
			nc.Close()
		}
	}
	k := ar2Stranger(t, f)
	_ = k.nc.Publish(api.EnrollSubject(victim.PublicKey), []byte(`{"node_id":"node-1"}`))
	_ = k.nc.PublishRequest(api.EnrollSubject(victim.PublicKey), api.AgentInboxPrefix(victim.PublicKey)+".x", []byte(`{"node_id":"node-1"}`))
	_ = k.nc.Flush()
	for i := 0; i < 200 && k.nc.IsConnected(); i++ {
		_ = k.nc.PublishRequest(api.EnrollSubject(k.pub), api.AgentInboxPrefix(k.pub)+".x", []byte(`{"node_id":"node-1"}`))
	}
	_ = k.nc.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for k.nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if k.nc.IsConnected() {
		t.Error("a flooding stranger was not cut off")
	}
	if _, err := ar2Connect(t, f, k.kp); err == nil {
		t.Error("a flooding stranger's key reconnected at once")
	}
	// The agent is untouched: it runs a job now, and its own key (held by
	// the test as a compromised host would) is not banned — checked by
	// the agent's next reconnect: kill it and connect with its seed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.WaitOnline(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks: []api.Phase{{Backend: "net", Action: "dns_get"}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := f.Client().WaitJob(ctx, job.ID); err != nil || j.Status != api.JobCompleted {
		t.Fatalf("node-1's job after the stranger's attempts: %v %+v", err, j)
	}
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	var bc *busClient
	for try := 0; ; try++ {
		if bc, err = connectAs(t, f, "node-1"); err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("node-1's own key is refused after a stranger's attempts: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bc.nc.Close()
	ar2Same(t, "enrollments", before, ar2Snapshot(t, f, api.BucketEnrollments))
}

// (a) A compromised agent host with node-1's seed (the agent stopped): it
// cannot enroll as another node, change its groups without a token, take a
// revoked-key path, or have an answer written anywhere but its own inbox;
// a clone connecting while the real agent is live is refused.
func TestAttackCompromisedAgentEnrollment(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	// A clone while the real agent is live: refused, the agent stays.
	if bc, err := connectAs(t, f, "node-1"); err == nil {
		bc.nc.Close()
		t.Error("a second live connection with node-1's key was let in")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.WaitOnline(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	before := ar2Snapshot(t, f, api.BucketEnrollments)
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	var bc *busClient
	var err error
	for try := 0; ; try++ {
		if bc, err = connectAs(t, f, "node-1"); err == nil {
			break
		}
		if try == 20 {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	seed := filepath.Join(f.DataDir(), "agents", "node-1", pki.AgentKeyFile)
	kp, err := pki.EnsureUserKey(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	other := ar2Enrollment(t, f, "node-2")
	attempts := []api.EnrollRequest{
		{NodeID: "node-2", Groups: other.Groups},
		{NodeID: "node-2"},
		{NodeID: "node-1", Groups: []string{"db.prod"}},
		{NodeID: "node-1", Groups: []string{"web.prod", "db.prod"}},
		{NodeID: "node-1", Groups: []string{"web"}},
		{NodeID: "node-1", Groups: nil},
		{NodeID: "node-1", Groups: []string{"web.prod", "db"}, Token: "gridjoin_x.y"},
		{NodeID: "node-3", Groups: []string{"web.prod"}},
	}
	for i, req := range attempts {
		b, _ := json.Marshal(req)
		m, err := bc.nc.Request(api.EnrollSubject(pub), b, 5*time.Second)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		var r api.EnrollReply
		_ = json.Unmarshal(m.Data, &r)
		if r.Error == "" {
			t.Errorf("attempt %d (%+v) was not refused: %+v", i, req, r)
		}
		time.Sleep(1100 * time.Millisecond) // the key's own rate
	}
	// An answer aimed at another agent's inbox is not written.
	sub, err := fleettest.JetStream(t, f).Conn().SubscribeSync(api.AgentInboxPrefix(other.PublicKey) + ".steal")
	if err != nil {
		t.Fatal(err)
	}
	_ = bc.nc.PublishRequest(api.EnrollSubject(pub), api.AgentInboxPrefix(other.PublicKey)+".steal", []byte(`{"node_id":"node-1","groups":["web.prod"]}`))
	_ = bc.nc.PublishRequest(api.NodeHeartbeatSubject("node-1"), api.AgentInboxPrefix(other.PublicKey)+".steal", []byte(`{}`))
	if m, err := sub.NextMsg(2 * time.Second); err == nil {
		t.Errorf("a controller answered into node-2's inbox: %s %s", m.Subject, m.Data)
	}
	ar2Same(t, "enrollments", before, ar2Snapshot(t, f, api.BucketEnrollments))
}

// (c) A scoped join token (groups web, uses 1): other groups, more uses
// (concurrently), reuse after use, expiry and revocation, an existing node
// id, a revoked node's id.
func TestAttackScopedTokenCannotExceedScope(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Groups: func(i int) []string {
		return [][]string{{"web.prod"}, {"db.prod"}}[i]
	}})
	tok := ar2CreateJoinToken(t, f, "webonce", []string{"web"}, time.Hour, 1)
	enrBefore := ar2Snapshot(t, f, api.BucketEnrollments)

	bad := []api.EnrollRequest{
		{NodeID: "evil-1", Groups: []string{"webby"}},
		{NodeID: "evil-2", Groups: []string{"web~x"}},
		{NodeID: "evil-3", Groups: []string{"web.>"}},
		{NodeID: "evil-4", Groups: []string{"web.*"}},
		{NodeID: "evil-5", Groups: []string{"db"}},
		{NodeID: "evil-6", Groups: []string{"db.prod"}},
		{NodeID: "evil-7", Groups: []string{"web", "db"}},
		{NodeID: "evil-8", Groups: []string{"web.prod", "webx.prod"}},
		{NodeID: "evil-9", Groups: []string{"we"}},
		{NodeID: "evil-10", Groups: []string{"WEB"}},
		{NodeID: "evil-11", Groups: []string{"web-"}},
		{NodeID: "evil-12", Groups: []string{".web"}},
		{NodeID: "evil.13", Groups: []string{"web"}},
		{NodeID: "node-1", Groups: []string{"web.prod"}}, // an existing node, another key
		{NodeID: "node-2", Groups: []string{"web"}},
	}
	for i, req := range bad {
		req.Token = tok
		r, err := ar2Stranger(t, f).enroll(req, 5*time.Second)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if r.Error == "" || r.Status != "" {
			t.Errorf("attempt %d (%v %v) not refused: %+v", i, req.NodeID, req.Groups, r)
		}
	}
	ar2Same(t, "enrollments after out-of-scope attempts", enrBefore, ar2Snapshot(t, f, api.BucketEnrollments))
	if info := ar2JoinToken(t, f, "webonce"); info.Used != 0 {
		t.Fatalf("refused attempts used the token: used %d", info.Used)
	}

	// Concurrently, from 10 keys: one use at most.
	keys := make([]*ar2Key, 10)
	for i := range keys {
		keys[i] = ar2Stranger(t, f)
	}
	var wg sync.WaitGroup
	var admitted atomic.Int32
	start := make(chan struct{})
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := k.enroll(api.EnrollRequest{NodeID: fmt.Sprintf("race-%d", i), Groups: []string{"web.dev"}, Token: tok}, 8*time.Second)
			if err == nil && r.Error == "" && r.Status != "" {
				admitted.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := admitted.Load(); n != 1 {
		t.Errorf("a one-use token enrolled %d agents concurrently", n)
	}
	if info := ar2JoinToken(t, f, "webonce"); info.Used != 1 {
		t.Errorf("token used %d times, want 1", info.Used)
	}
	enrolled := 0
	var winner *ar2Key
	var winnerID string
	for i := range keys {
		if e := ar2Enrollment(t, f, fmt.Sprintf("race-%d", i)); e != nil {
			enrolled++
			winner, winnerID = keys[i], e.NodeID
		}
	}
	if enrolled != 1 {
		t.Fatalf("%d enrollments stored from a one-use token", enrolled)
	}
	afterUse := ar2Snapshot(t, f, api.BucketEnrollments)

	// Used up: another key, and the winner widening its own groups.
	time.Sleep(1100 * time.Millisecond)
	for i, req := range []api.EnrollRequest{
		{NodeID: "late-1", Groups: []string{"web"}},
		{NodeID: "late-2"},
	} {
		req.Token = tok
		if r, _ := ar2Stranger(t, f).enroll(req, 5*time.Second); r.Error == "" {
			t.Errorf("used-up token, attempt %d: %+v", i, r)
		}
	}
	for i, g := range [][]string{{"web.prod"}, {"db.prod"}, {"web.dev", "db"}, nil} {
		r, err := winner.enroll(api.EnrollRequest{NodeID: winnerID, Groups: g, Token: tok}, 5*time.Second)
		if err != nil || r.Error == "" {
			t.Errorf("winner widening to %v (%d): %+v %v", g, i, r, err)
		}
		time.Sleep(1100 * time.Millisecond)
	}
	ar2Same(t, "enrollments after the token was used up", afterUse, ar2Snapshot(t, f, api.BucketEnrollments))

	// Revoked, and expired, tokens enroll nobody.
	tok2 := ar2CreateJoinToken(t, f, "webrev", []string{"web"}, time.Hour, 5)
	if _, err := f.Client().RevokeJoinToken(context.Background(), "webrev"); err != nil {
		t.Fatal(err)
	}
	tok3 := ar2CreateJoinToken(t, f, "webexp", []string{"web"}, 500*time.Millisecond, 5)
	time.Sleep(700 * time.Millisecond)
	for _, tk := range []string{tok2, tok3} {
		if r, _ := ar2Stranger(t, f).enroll(api.EnrollRequest{NodeID: "late-3", Groups: []string{"web"}, Token: tk}, 5*time.Second); r.Error == "" {
			t.Errorf("revoked/expired token enrolled: %+v", r)
		}
	}
	// Re-creating a used-up token's name gives a new secret; the old token
	// stays dead.
	ar2CreateJoinToken(t, f, "webonce", []string{"web"}, time.Hour, 5)
	if r, _ := ar2Stranger(t, f).enroll(api.EnrollRequest{NodeID: "late-4", Groups: []string{"web"}, Token: tok}, 5*time.Second); r.Error == "" {
		t.Errorf("the old secret of a re-created token name enrolled: %+v", r)
	}
	for _, n := range []string{"webrev", "webexp"} {
		if info := ar2JoinToken(t, f, n); info.Used != 0 {
			t.Errorf("token %s used %d", n, info.Used)
		}
	}
	if e := ar2Enrollment(t, f, "late-3"); e != nil {
		t.Errorf("late-3 enrolled: %+v", e)
	}
	if e := ar2Enrollment(t, f, "late-4"); e != nil {
		t.Errorf("late-4 enrolled: %+v", e)
	}

	// A revoked node's id: a token holder may ask for it, but it waits for
	// an operator whatever auto_admit says, and gets no agent rights.
	if _, err := f.Client().RevokeNode(context.Background(), "node-2"); err != nil {
		t.Fatal(err)
	}
	tok4 := ar2CreateJoinToken(t, f, "webtake", []string{"web"}, time.Hour, 1)
	k := ar2Stranger(t, f)
	r, err := k.enroll(api.EnrollRequest{NodeID: "node-2", Groups: []string{"web"}, Token: tok4}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status == api.EnrollAdmitted {
		t.Fatalf("a token holder took over revoked node-2 at once: %+v", r)
	}
	k2, err := ar2Connect(t, f, k.kp, nats.Name("grid-agent node-2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k2.nc.SubscribeSync("cmd.node.node-2.>"); err == nil {
		_ = k2.nc.Flush()
		select {
		case err := <-k2.errs:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Errorf("pending take-over: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("a pending take-over of node-2 may hear node-2's commands")
		}
	}
	// Observation: a token scoped to web enrolls a node in no group at all.
	tok5 := ar2CreateJoinToken(t, f, "webnone", []string{"web"}, time.Hour, 1)
	r, _ = ar2Stranger(t, f).enroll(api.EnrollRequest{NodeID: "groupless", Token: tok5}, 5*time.Second)
	t.Logf("a web-scoped token asking for no groups: %+v (enrollment %+v)", r, ar2Enrollment(t, f, "groupless"))
}

// (d) Tokens of role read and operator cannot reach admin-only routes;
// nothing changes.
func TestAttackAPIRolesCannotManage(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	rd := ar2Token(t, f, "viewer", api.RoleRead)
	ar2CreateJoinToken(t, f, "keep", []string{"web"}, time.Hour, 3)
	jtBefore := ar2Snapshot(t, f, api.BucketJoinTokens)
	enrBefore := ar2Snapshot(t, f, api.BucketEnrollments)
	calls := [][3]string{
		{"POST", "/join-token", `{"groups":["web"],"ttl":"1h","uses":5}`},
		{"POST", "/join-token", `{"name":"keep","ttl":"1h","uses":5}`},
		{"GET", "/join-tokens", ""},
		{"DELETE", "/join-token/keep", ""},
		{"POST", "/token", `{"name":"evil","role":"admin"}`},
		{"GET", "/tokens", ""},
		{"DELETE", "/token/admin", ""},
		{"GET", "/enrollments", ""},
		{"POST", "/enrollments/node-1/revoke", ""},
		{"POST", "/enrollments/node-1/approve", ""},
		{"DELETE", "/node/node-1", ""},
	}
	for _, tk := range []string{op, rd} {
		for _, c := range calls {
			code, body := ar2Call(t, f, tk, c[0], c[1], c[2])
			if code != http.StatusForbidden {
				t.Errorf("%s %s with a non-admin token: %d %s", c[0], c[1], code, body)
			}
		}
	}
	for _, c := range calls {
		if code, _ := ar2Call(t, f, "", c[0], c[1], c[2]); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d", c[0], c[1], code)
		}
		if code, _ := ar2Call(t, f, "gridjoin_keep.x", c[0], c[1], c[2]); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a join token as bearer: %d", c[0], c[1], code)
		}
	}
	// A read token cannot submit, cancel, retry, replay or schedule.
	for _, c := range [][3]string{
		{"POST", "/job", `{"target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}`},
		{"POST", "/job/x/cancel", ""},
		{"POST", "/job/x/retry", ""},
		{"DELETE", "/job/x", ""},
		{"POST", "/dlq/x/replay", ""},
		{"POST", "/schedules", `{"name":"s","cron":"@hourly","job":{"target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}}`},
	} {
		if code, body := ar2Call(t, f, rd, c[0], c[1], c[2]); code != http.StatusForbidden {
			t.Errorf("read token %s %s: %d %s", c[0], c[1], code, body)
		}
	}
	ar2Same(t, "join tokens", jtBefore, ar2Snapshot(t, f, api.BucketJoinTokens))
	ar2Same(t, "enrollments", enrBefore, ar2Snapshot(t, f, api.BucketEnrollments))
	// An operator cannot choose a job's id (to take a schedule tick's).
	jobsBefore := ar2Snapshot(t, f, api.BucketJobs)
	for _, b := range []string{
		`{"id":"sched-nightly-1900000000","target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}`,
		`{"ID":"sched-nightly-1900000000","target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}`,
		`{"schedule_id":"nightly","target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}`,
		`{"submitted_by":"admin","target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}`,
	} {
		if code, body := ar2Call(t, f, op, "POST", "/job", b); code != http.StatusBadRequest {
			t.Errorf("operator job with a chosen id/owner: %d %s", code, body)
		}
	}
	ar2Same(t, "jobs", jobsBefore, ar2Snapshot(t, f, api.BucketJobs))
}

// dangerousFleet has agents that offer net.dns_set (dangerous) on a resolver
// file of their own.
func ar2DangerousFleet(t *testing.T, opts fleet.Options) *fleet.Fleet {
	opts.Agent = func(_ int, c *agent.Config) {
		c.Allow = []string{"*"}
		_ = os.MkdirAll(c.DataDir, 0o700)
		c.Backends.ResolvConfPath = filepath.Join(c.DataDir, "resolv.conf")
		_ = os.WriteFile(c.Backends.ResolvConfPath, []byte("nameserver 127.0.0.1\n"), 0o600)
	}
	return fleettest.Start(t, opts)
}

const ar2Dangerous = `{"target":{"scope":"node","value":"node-1"},"tasks":[{"backend":"net","action":"dns_set","params":{"servers":"10.9.9.9"}}]}`

// (d) An operator cannot run a dangerous action: not by submitting it, not
// by retrying an admin's, not in a schedule of its own.
func TestAttackOperatorDangerousActions(t *testing.T) {
	f := ar2DangerousFleet(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, body := ar2Call(t, f, op, "POST", "/job", ar2Dangerous); code != http.StatusForbidden {
		t.Errorf("operator submitted a dangerous action: %d %s", code, body)
	}
	code, body := ar2Call(t, f, f.AdminToken(), "POST", "/job", ar2Dangerous)
	if code != http.StatusAccepted {
		t.Fatalf("admin dangerous job: %d %s", code, body)
	}
	var j api.Job
	_ = json.Unmarshal([]byte(body), &j)
	if fin, err := f.Client().WaitJob(ctx, j.ID); err != nil || fin.Status != api.JobCompleted {
		t.Fatalf("admin's job: %v %+v", err, fin)
	}
	jobsBefore := ar2Snapshot(t, f, api.BucketJobs)
	if code, body := ar2Call(t, f, op, "POST", "/job/"+j.ID+"/retry", ""); code != http.StatusForbidden {
		t.Errorf("operator retried an admin's dangerous job: %d %s", code, body)
	}
	if code, body := ar2Call(t, f, op, "POST", "/schedules",
		`{"name":"opdanger","cron":"* * * * * *","job":`+ar2Dangerous+`}`); code != http.StatusForbidden {
		t.Errorf("operator scheduled a dangerous action: %d %s", code, body)
	}
	time.Sleep(1500 * time.Millisecond)
	ar2Same(t, "jobs", jobsBefore, ar2Snapshot(t, f, api.BucketJobs))
}

// ar2ScheduleJobs lists the jobs a schedule's ticks made.
func ar2ScheduleJobs(t *testing.T, f *fleet.Fleet, id string) []api.Job {
	t.Helper()
	jobs, err := f.Client().ListJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Job
	for _, j := range jobs {
		if j.ScheduleID == id {
			out = append(out, j)
		}
	}
	return out
}

// (d) Schedules run as their creator. An operator must not make an admin's
// schedule fire a dangerous action the operator may not submit (resuming a
// paused one), and must not leave its own job running as the admin after
// its token is revoked (by rewriting an admin's schedule).
func TestAttackOperatorCannotResumeAdminDangerousSchedule(t *testing.T) {
	f := ar2DangerousFleet(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	code, body := ar2Call(t, f, f.AdminToken(), "POST", "/schedules",
		`{"name":"dnsfix","cron":"* * * * * *","paused":true,"job":`+ar2Dangerous+`}`)
	if code != http.StatusCreated {
		t.Fatalf("admin schedule: %d %s", code, body)
	}
	// Rewriting it is checked against the operator's role.
	if code, body := ar2Call(t, f, op, "PUT", "/schedule/dnsfix",
		`{"name":"dnsfix","cron":"* * * * * *","job":`+ar2Dangerous+`}`); code != http.StatusForbidden {
		t.Errorf("operator rewrote a dangerous schedule: %d %s", code, body)
	}
	// Resuming it is not checked at all.
	code, body = ar2Call(t, f, op, "POST", "/schedule/dnsfix/resume", "")
	t.Logf("operator resume of the admin's paused dangerous schedule: %d %s", code, body)
	time.Sleep(3 * time.Second)
	_, _ = ar2Call(t, f, f.AdminToken(), "POST", "/schedule/dnsfix/pause", "")
	for _, j := range ar2ScheduleJobs(t, f, "dnsfix") {
		if !j.CheckMode {
			t.Errorf("an operator's resume made dangerous job %s (net.dns_set, submitted_by %q, status %s)", j.ID, j.SubmittedBy, j.Status)
		}
	}
}

func TestAttackOperatorScheduleStopsWithRevocation(t *testing.T) {
	f := ar2DangerousFleet(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	code, body := ar2Call(t, f, f.AdminToken(), "POST", "/schedules",
		`{"name":"nightly","cron":"0 3 * * *","job":{"target":{"scope":"node","value":"node-1"},"tasks":[{"backend":"net","action":"dns_get"}]}}`)
	if code != http.StatusCreated {
		t.Fatalf("admin schedule: %d %s", code, body)
	}
	// The operator rewrites the admin's schedule: every second, its own job.
	code, body = ar2Call(t, f, op, "PUT", "/schedule/nightly",
		`{"name":"nightly","cron":"* * * * * *","overlap":"allow","job":{"target":{"scope":"all"},"tasks":[{"backend":"net","action":"dns_get"}]}}`)
	if code != http.StatusOK {
		t.Fatalf("operator PUT: %d %s", code, body)
	}
	var sc api.Schedule
	_ = json.Unmarshal([]byte(body), &sc)
	t.Logf("after the operator's rewrite: created_by %q", sc.CreatedBy)
	// The operator is let go.
	if _, err := f.Client().RevokeToken(context.Background(), "ops"); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now().UTC()
	time.Sleep(3 * time.Second)
	_, _ = ar2Call(t, f, f.AdminToken(), "POST", "/schedule/nightly/pause", "")
	n := 0
	for _, j := range ar2ScheduleJobs(t, f, "nightly") {
		if j.CreatedAt.After(revokedAt) {
			n++
			if n == 1 {
				t.Errorf("the revoked operator's rewritten schedule still fires its job %s (target %s) as %q", j.ID, j.Target, j.SubmittedBy)
			}
		}
	}
	if n > 0 {
		t.Errorf("%d jobs of the revoked operator's content fired after its revocation", n)
	}
}

// (d) DLQ replay: an operator replays an admin's dead-lettered dangerous
// job; the job runs again with no policy check for the caller.
func TestAttackOperatorCannotReplayDangerousDeadLetter(t *testing.T) {
	f := ar2DangerousFleet(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, body := ar2Call(t, f, f.AdminToken(), "POST", "/job", ar2Dangerous)
	if code != http.StatusAccepted {
		t.Fatalf("admin dangerous job: %d %s", code, body)
	}
	var j api.Job
	_ = json.Unmarshal([]byte(body), &j)
	if fin, err := f.Client().WaitJob(ctx, j.ID); err != nil || fin.Status != api.JobCompleted {
		t.Fatalf("admin's job: %v %+v", err, fin)
	}
	// Its request dead-lettered, as a crashed claim leaves it (state
	// written with the controller's rights).
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	_ = json.Unmarshal(e.Value(), &stored)
	stored["status"], stored["error"] = string(api.JobFailed), api.DeadLetterPrefix+"claim crashed"
	b, _ := json.Marshal(stored)
	if _, err := kv.Update(ctx, j.ID, b, e.Revision()); err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(api.DeadLetterSubject(j.ID))
	dl.Data = []byte(j.ID)
	dl.Header.Set("Grid-Dead-Letter-Reason", "claim crashed")
	dl.Header.Set("Grid-Dead-Letter-Subject", api.PriorityRequestSubject(api.DefaultPriority, j.ID))
	if _, err := js.PublishMsg(ctx, dl); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	code, body = ar2Call(t, f, op, "POST", "/dlq/"+j.ID+"/replay", "")
	t.Logf("operator replay: %d %s", code, body)
	time.Sleep(3 * time.Second)
	got, err := f.Client().GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != api.JobFailed {
		t.Errorf("an operator's replay ran the admin's dangerous job %s again: status %s, submitted_by %q", j.ID, got.Status, got.SubmittedBy)
	}
}

// Secrets: a scoped join token's secret (and the file token) never reach the
// log or an API answer; GET /join-tokens holds no hash.
func TestAttackJoinTokenSecretsNotLeaked(t *testing.T) {
	var logs syncBuf
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := fleettest.Start(t, fleet.Options{Agents: 1, Logger: log})
	tok := ar2CreateJoinToken(t, f, "leaky", []string{"web"}, time.Hour, 1)
	_, secret, _ := strings.Cut(strings.TrimPrefix(tok, api.JoinTokenPrefix), ".")
	fileTok, _ := pki.ReadToken(f.JoinTokenFile())
	// Use it, misuse it, use it up, revoke it.
	k := ar2Stranger(t, f)
	if r, err := k.enroll(api.EnrollRequest{NodeID: "leak-1", Groups: []string{"web"}, Token: tok}, 5*time.Second); err != nil || r.Error != "" {
		t.Fatalf("enroll: %v %+v", err, r)
	}
	for _, req := range []api.EnrollRequest{
		{NodeID: "leak-2", Groups: []string{"db"}, Token: tok},
		{NodeID: "leak-3", Groups: []string{"web"}, Token: tok},
		{NodeID: "leak-4", Token: tok + "x"},
		{NodeID: "leak-5", Token: "{" + tok},
		{NodeID: "leak-6", Token: fileTok + "x"},
	} {
		_, _ = ar2Stranger(t, f).enroll(req, 5*time.Second)
	}
	// A malformed request whose decode error could echo the token.
	raw := ar2Stranger(t, f)
	_, _ = raw.nc.Request(api.EnrollSubject(raw.pub), []byte(`{"node_id":"leak-7","token":"`+tok+`","groups":"`+tok+`"}`), 3*time.Second)
	_, _ = f.Client().RevokeJoinToken(context.Background(), "leaky")
	_, list := ar2Call(t, f, f.AdminToken(), "GET", "/join-tokens", "")
	_, enr := ar2Call(t, f, f.AdminToken(), "GET", "/enrollments", "")
	hs := sha256.Sum256([]byte(tok))
	h := hex.EncodeToString(hs[:])
	for what, text := range map[string]string{"GET /join-tokens": list, "GET /enrollments": enr} {
		for _, s := range []string{secret, fileTok, h, "sha256"} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %q", what, s)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	all := logs.String()
	for name, s := range map[string]string{"scoped secret": secret, "file token": fileTok, "scoped hash": h} {
		if strings.Contains(all, s) {
			i := strings.Index(all, s)
			t.Errorf("the log holds the %s: …%s…", name, all[max(0, i-200):min(len(all), i+50)])
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// anonymous_role without insecure: the controller does not start, and a
// secured controller answers a request without a token 401.
func TestAttackAnonymousNeedsInsecure(t *testing.T) {
	for _, role := range []api.Role{api.RoleRead, api.RoleOperator, api.RoleAdmin} {
		cfg := controller.DefaultConfig()
		cfg.AnonymousRole = role
		if err := cfg.Validate(); err == nil {
			t.Errorf("anonymous_role %s without insecure validates", role)
		}
		ctx, cancel := context.WithCancel(context.Background())
		fl, err := fleet.Start(ctx, fleet.Options{DataDir: t.TempDir(), Controller: func(c *controller.Config) { c.AnonymousRole = role }})
		if err == nil {
			t.Errorf("a secured controller with anonymous_role %s started", role)
			cancel()
			<-fl.Done()
		}
		cancel()
	}
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	for _, c := range [][2]string{{"GET", "/jobs"}, {"GET", "/nodes"}, {"POST", "/job"}, {"GET", "/metrics"}, {"GET", "/fleet"}} {
		if code, _ := ar2Call(t, f, "", c[0], c[1], ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d", c[0], c[1], code)
		}
	}
	// Plain HTTP to the TLS API is no way in either.
	if resp, err := http.Get(strings.Replace(f.APIURL(), "https://", "http://", 1) + "/jobs"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered 200: %s", b)
		}
	}
}

// Flood protection: strangers over many keys cannot crowd out a real
// enrollment; neither may the holder of a dead (revoked, used-up) join
// token, which vouches for no one.
func TestAttackDeadTokenCannotStarveEnrollment(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	dead := ar2CreateJoinToken(t, f, "old", nil, time.Hour, 1)
	if r, err := ar2Stranger(t, f).enroll(api.EnrollRequest{NodeID: "old-1", Token: dead}, 5*time.Second); err != nil || r.Error != "" {
		t.Fatalf("use the token: %v %+v", err, r)
	}
	if _, err := f.Client().RevokeJoinToken(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	const keys, per = 120, 5 // within each key's own burst
	flood := make([]*ar2Key, keys)
	for i := range flood {
		flood[i] = ar2Stranger(t, f)
	}
	var answered atomic.Int64
	for _, k := range flood {
		inbox := api.AgentInboxPrefix(k.pub) + ".flood"
		if _, err := k.nc.Subscribe(inbox, func(*nats.Msg) { answered.Add(1) }); err != nil {
			t.Fatal(err)
		}
		_ = k.nc.Flush()
	}
	good := ar2CreateJoinToken(t, f, "fresh", nil, time.Hour, 1)
	real := ar2Stranger(t, f)
	req, _ := json.Marshal(api.EnrollRequest{NodeID: "old-2", Token: dead})
	for r := range per {
		for _, k := range flood {
			_ = k.nc.PublishRequest(api.EnrollSubject(k.pub), api.AgentInboxPrefix(k.pub)+".flood", req)
		}
		_ = r
	}
	for _, k := range flood {
		_ = k.nc.Flush()
	}
	// The real agent asks right behind the flood, and once more after its
	// own retry interval, as an agent does.
	var got api.EnrollReply
	var err error
	for try := 0; try < 2; try++ {
		if got, err = real.enroll(api.EnrollRequest{NodeID: "newhost", Token: good}, 2*time.Second); err == nil {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	n := answered.Load()
	t.Logf("dead-token requests answered: %d of %d; real enrollment: %+v %v", n, keys*per, got, err)
	if n > 60 {
		t.Errorf("%d requests with a revoked token were answered: they took the vouched budget (200/s, burst 400) that real enrollments share, not the strangers' (20/s)", n)
	}
	if err != nil || got.Status != api.EnrollAdmitted {
		t.Errorf("a real enrollment behind a dead-token flood: %+v %v", got, err)
	}
}

// ar2FloodAndEnroll floods the enrollment subject with kp's key over
// several connections named as enrollment connections (no duplicate check
// for those), one of them sending 1 MiB requests, and meanwhile enrolls a
// new key with a genuine token as an agent does (5s for an answer, 2s
// pause, three tries). It returns the real enrollment's outcome.
func ar2FloodAndEnroll(t *testing.T, f *fleet.Fleet, kp nkeys.KeyPair) (api.EnrollReply, time.Duration, error) {
	pub, _ := kp.PublicKey()
	const conns = 4
	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	big := bytes.Repeat([]byte("x"), 1<<20)
	small := []byte(`{"node_id":"node-1","groups":["web.prod"]}`)
	for i := range conns {
		k, err := ar2Connect(t, f, kp)
		if err != nil {
			t.Logf("flood connection %d: %v", i, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				msg := small
				if i == 0 {
					msg = big
				}
				if err := k.nc.PublishRequest(api.EnrollSubject(pub), api.AgentInboxPrefix(pub)+".f", msg); err != nil {
					if !k.nc.IsConnected() {
						// Cut off: come back if the server lets it.
						nk, err := ar2Connect(t, f, kp)
						if err != nil {
							time.Sleep(50 * time.Millisecond)
							continue
						}
						k = nk
					}
					time.Sleep(time.Millisecond)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	time.Sleep(time.Second)
	good := ar2CreateJoinToken(t, f, "fresh", nil, time.Hour, 1)
	real := ar2Stranger(t, f)
	var got api.EnrollReply
	var err error
	start := time.Now()
	for try := 0; try < 3; try++ {
		if got, err = real.enroll(api.EnrollRequest{NodeID: "newhost", Token: good}, 5*time.Second); err == nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	took := time.Since(start)
	t.Logf("flood messages sent: %d; real enrollment after %s: %+v %v", sent.Load(), took.Round(time.Millisecond), got, err)
	return got, took, err
}

// Control: the same flood from a stranger's key is cut off and banned, and
// the real enrollment gets through.
func TestAttackStrangerFloodDoesNotStarveEnrollment(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	got, took, err := ar2FloodAndEnroll(t, f, ar2NewKey(t))
	if err != nil || got.Status != api.EnrollAdmitted {
		t.Errorf("a stranger's enrollment flood kept a real enrollment out for %s: %v", took.Round(time.Second), err)
	}
}

// (a) A compromised agent host floods the enrollment subject with its
// admitted key (the agent stopped). An admitted key is never cut off for
// flooding; a real enrollment must still get through.
func TestAttackAdmittedKeyFloodDoesNotStarveEnrollment(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	kp, err := pki.EnsureUserKey(filepath.Join(f.DataDir(), "agents", "node-1", pki.AgentKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	got, took, err := ar2FloodAndEnroll(t, f, kp)
	if err != nil || got.Status != api.EnrollAdmitted {
		t.Errorf("a compromised agent's enrollment flood kept a real enrollment out for %s: %v", took.Round(time.Second), err)
	}
}

// (a)+(d) A compromised agent registers a schema set in which net.dns_set is
// not dangerous while it is the only online node offering net; an operator
// then submits net.dns_set for a group with no node yet, to start later. The
// policy is checked only at submission, against the catalog of the nodes
// online then; a real agent that joins the group before the job starts runs
// the dangerous action for the operator.
func TestAttackWeakenedSchemaDoesNotLetOperatorRunDangerous(t *testing.T) {
	f := ar2DangerousFleet(t, fleet.Options{Agents: 1, Groups: func(int) []string { return []string{"web.prod"} }})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cat, err := f.Client().Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var set []api.BackendSchema
	for _, b := range cat.Backends {
		if b.Name != "net" {
			continue
		}
		for i := range b.Actions {
			b.Actions[i].Dangerous = false
		}
		set = append(set, b)
	}
	if len(set) != 1 {
		t.Fatalf("no net backend in %+v", cat.Backends)
	}
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	var bc *busClient
	for try := 0; ; try++ {
		if bc, err = connectAs(t, f, "node-1"); err == nil {
			break
		}
		if try == 20 {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	schemas, _ := json.Marshal(set)
	now := time.Now().UTC()
	info := api.NodeInfo{ID: "node-1", Hostname: "h", Groups: []string{"web.prod"}, Backends: []string{"net"},
		SchemaDigest: api.SchemaDigestOf(schemas), Status: api.NodeOnline, OnlineSince: now, LastSeen: now}
	reg, _ := json.Marshal(api.NodeRegistration{Node: info, Schemas: schemas})
	if err := bc.ask(ctx, api.NodeRegisterSubject("node-1"), reg); err != nil {
		t.Fatalf("register the weakened set: %v", err)
	}
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		for ctx.Err() == nil {
			info.LastSeen = time.Now().UTC()
			b, _ := json.Marshal(info)
			_ = bc.ask(ctx, api.NodeHeartbeatSubject("node-1"), b)
			time.Sleep(300 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-beat }()
	time.Sleep(time.Second)
	// Refused as it should be while a real node is online: not the case
	// now. The operator submits for group db, which has no node yet.
	code, body := ar2Call(t, f, op, "POST", "/job?allow_empty=true",
		`{"target":{"scope":"group","value":"db"},"not_before":"6s","tasks":[{"backend":"net","action":"dns_set","params":{"servers":"10.9.9.9"}}]}`)
	t.Logf("operator submits net.dns_set for group db: %d %s", code, body)
	if code != http.StatusAccepted {
		return // the policy held
	}
	var j api.Job
	_ = json.Unmarshal([]byte(body), &j)
	// A real agent that allows dns_set joins group db before the job starts.
	a, err := f.AddAgent(ctx, []string{"db.prod"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitOnline(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	fin, err := f.Client().WaitJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	resolv, _ := os.ReadFile(filepath.Join(f.DataDir(), "agents", a.ID(), "resolv.conf"))
	t.Logf("job %s: %s; %s's resolver file now: %q", fin.ID, fin.Status, a.ID(), resolv)
	if strings.Contains(string(resolv), "10.9.9.9") || fin.Status == api.JobCompleted {
		t.Errorf("an operator ran the dangerous net.dns_set on real node %s (job %s %s, submitted_by %q)", a.ID(), fin.ID, fin.Status, fin.SubmittedBy)
	}
}
