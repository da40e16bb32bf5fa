package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// enrollee is a NATS connection with a fresh NKey: a host that has never
// enrolled, or a stranger.
type enrollee struct {
	nc  *nats.Conn
	pub string
}

func newEnrollee(t *testing.T, f *fleet.Fleet) *enrollee {
	t.Helper()
	return newEnrolleeAt(t, f.NATSURL(), f.CAFile())
}

func newEnrolleeAt(t *testing.T, url, caFile string) *enrollee {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(url, nats.RootCAs(caFile), nats.Nkey(pub, kp.Sign),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)), nats.Name(api.EnrollConnName+"test"))
	if err != nil {
		t.Fatalf("connect with a fresh key: %v", err)
	}
	t.Cleanup(nc.Close)
	return &enrollee{nc: nc, pub: pub}
}

// ask sends one enrollment request and returns the answer.
func (e *enrollee) ask(t *testing.T, node string, groups []string, token string) api.EnrollReply {
	t.Helper()
	req, _ := json.Marshal(api.EnrollRequest{NodeID: node, Groups: groups, Token: token})
	m, err := e.nc.Request(api.EnrollSubject(e.pub), req, 5*time.Second)
	if err != nil {
		t.Fatalf("enroll %s: %v", node, err)
	}
	var r api.EnrollReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// bucketState is a bucket's contents (key → value), read with controller
// credentials.
func bucketState(t *testing.T, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]string{}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range l.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = string(e.Value())
	}
	return out
}

func sameState(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s: %d records before, %d after: %v", what, len(before), len(after), after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s: record %s changed:\n%s\n%s", what, k, v, after[k])
		}
	}
}

func joinToken(t *testing.T, f *fleet.Fleet, req api.JoinTokenRequest) *api.NewJoinToken {
	t.Helper()
	nt, err := f.Client().CreateJoinToken(context.Background(), req)
	if err != nil {
		t.Fatalf("create join token: %v", err)
	}
	if !strings.HasPrefix(nt.Token, api.JoinTokenPrefix+nt.Name+".") {
		t.Fatalf("join token %q", nt.Token)
	}
	return nt
}

// A scoped join token enrolls only into its groups (and their sub-groups),
// only until it expires, is used up or revoked; each refusal changes
// neither the enrollments nor the token's use count.
func TestScopedJoinTokens(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{})
	ctx := context.Background()
	enrollKV := fleettest.Bucket(t, ctx, f, api.BucketEnrollments)
	joinKV := fleettest.Bucket(t, ctx, f, api.BucketJoinTokens)
	hour := api.Duration(time.Hour)
	web := joinToken(t, f, api.JoinTokenRequest{Name: "web-batch", Groups: []string{"web"}, TTL: hour, Uses: 2})

	refused := func(what, node string, groups []string, tok, want string) {
		t.Helper()
		eb, jb := bucketState(t, enrollKV), bucketState(t, joinKV)
		r := newEnrollee(t, f).ask(t, node, groups, tok)
		if r.Status != "" || !strings.Contains(r.Error, want) {
			t.Fatalf("%s: %+v, want a refusal saying %q", what, r, want)
		}
		sameState(t, what+": enrollments", eb, bucketState(t, enrollKV))
		sameState(t, what+": join tokens", jb, bucketState(t, joinKV))
	}
	refused("outside its groups", "db-1", []string{"db.prod"}, web.Token, "may not enroll into these groups")
	refused("one group outside", "db-1", []string{"web.prod", "webby"}, web.Token, "webby is outside web")
	refused("a forged secret", "web-1", []string{"web"}, web.Token+"x", "no valid join token")

	// A sub-group is inside the scope; the record counts the use.
	if r := newEnrollee(t, f).ask(t, "web-1", []string{"web.prod"}, web.Token); r.Status != api.EnrollAdmitted {
		t.Fatalf("web.prod with a web token: %+v", r)
	}
	if _, err := enrollKV.Get(ctx, "web-1"); err != nil {
		t.Fatalf("web-1 not stored: %v", err)
	}
	ts, err := f.Client().ListJoinTokens(ctx)
	if err != nil || len(ts) != 1 || ts[0].Used != 1 || ts[0].Uses != 2 {
		t.Fatalf("join tokens after one use: %+v %v", ts, err)
	}
	// A real agent enrolls with the token.
	acfg := agent.DefaultConfig()
	acfg.Name, acfg.Groups, acfg.NATSURLs = "web-2", []string{"web"}, []string{f.NATSURL()}
	acfg.DataDir, acfg.CAFile, acfg.JoinToken = filepath.Join(f.DataDir(), "agents", "web-2"), f.CAFile(), web.Token
	a, err := agent.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	defer func() { stop(); <-a.Done() }()
	if err := a.Start(actx); err != nil {
		t.Fatalf("agent with a scoped token: %v", err)
	}
	refused("used up", "web-3", []string{"web"}, web.Token, "used up")

	short := joinToken(t, f, api.JoinTokenRequest{Groups: []string{"web"}, TTL: api.Duration(time.Second), Uses: 5})
	time.Sleep(1100 * time.Millisecond)
	refused("expired", "web-3", []string{"web"}, short.Token, "expired")

	gone := joinToken(t, f, api.JoinTokenRequest{Name: "gone", TTL: hour, Uses: 5})
	if info, err := f.Client().RevokeJoinToken(ctx, "gone"); err != nil || info.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", info, err)
	}
	refused("revoked", "web-3", []string{"web"}, gone.Token, "revoked")
	if _, err := f.Client().RevokeJoinToken(ctx, "nosuch"); !api.IsStatus(err, 404) {
		t.Fatalf("revoke an unknown join token: %v, want 404", err)
	}

	// Concurrent enrollments through a token with one use: exactly one wins.
	one := joinToken(t, f, api.JoinTokenRequest{Name: "once", TTL: hour, Uses: 1})
	const n = 8
	ens := make([]*enrollee, n)
	for i := range ens {
		ens[i] = newEnrollee(t, f)
	}
	replies := make([]api.EnrollReply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = ens[i].ask(t, fmt.Sprintf("race-%d", i), nil, one.Token) })
	}
	wg.Wait()
	won := 0
	for i, r := range replies {
		_, err := enrollKV.Get(ctx, fmt.Sprintf("race-%d", i))
		switch {
		case r.Status == api.EnrollAdmitted && err == nil:
			won++
		case r.Status == "" && strings.Contains(r.Error, "used up") && errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			t.Errorf("race-%d: %+v, stored: %v", i, r, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d enrollments with a one-use token, want 1: %+v", won, replies)
	}
	e, err := joinKV.Get(ctx, "once")
	if err != nil || !strings.Contains(string(e.Value()), `"used":1,`) {
		t.Fatalf("stored one-use token: %v %s", err, e.Value())
	}
	// The token itself is never stored.
	for k, v := range bucketState(t, joinKV) {
		for _, tok := range []string{web.Token, short.Token, gone.Token, one.Token} {
			if strings.Contains(v, tok[len(api.JoinTokenPrefix)+len(k)+1:]) {
				t.Fatalf("join token %s stored in clear", k)
			}
		}
	}
}

// Without a valid token the answer is the same whether the node id is
// enrolled or not; the reason is in the controller's log only.
func TestEnrollmentAnswerRevealsNothing(t *testing.T) {
	var logs lockedBuffer
	f := fleettest.Start(t, fleet.Options{Agents: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	enrollKV := fleettest.Bucket(t, ctx, f, api.BucketEnrollments)
	before := bucketState(t, enrollKV)
	var answers []string
	for _, c := range []struct{ node, token string }{
		{"node-1", ""}, {"nosuch", ""},
		{"node-1", "wrong"}, {"nosuch", "wrong"},
		{"node-1", api.JoinTokenPrefix + "nosuch.secret"}, {"nosuch", api.JoinTokenPrefix + "nosuch.secret"},
	} {
		r := newEnrollee(t, f).ask(t, c.node, []string{"web.prod"}, c.token)
		b, _ := json.Marshal(r)
		answers = append(answers, string(b))
	}
	for i, a := range answers {
		if a != answers[0] {
			t.Fatalf("answer %d differs:\n%s\n%s", i, answers[0], a)
		}
	}
	if strings.Contains(answers[0], "node-1") || strings.Contains(answers[0], "another key") || !strings.Contains(answers[0], "join token") {
		t.Fatalf("uniform answer %s", answers[0])
	}
	sameState(t, "enrollments", before, bucketState(t, enrollKV))
	if !strings.Contains(logs.String(), "unknown key, no join token") {
		t.Fatalf("the reason is not in the log:\n%s", logs.String())
	}
	// With the join token the holder learns why.
	tok, err := pki.ReadToken(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	if r := newEnrollee(t, f).ask(t, "node-1", []string{"web.prod"}, tok); !strings.Contains(r.Error, "enrolled with another key") {
		t.Fatalf("with the token: %+v", r)
	}
	sameState(t, "enrollments", before, bucketState(t, enrollKV))
}

// A flood of oversized requests and of many small ones from strangers is
// dropped, and a real agent still enrolls meanwhile.
func TestEnrollmentFloodDoesNotStarveRealEnrollment(t *testing.T) {
	var logs lockedBuffer
	f := fleettest.Start(t, fleet.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// An oversized request is dropped unanswered.
	big := newEnrollee(t, f)
	huge := make([]byte, 5<<10)
	if _, err := big.nc.Request(api.EnrollSubject(big.pub), huge, time.Second); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("oversized request: %v, want no answer", err)
	}
	// Four flooders, each on a fresh key and connection whenever the
	// controller closes the last one; the first sends 1 MiB requests.
	flood, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sent, kicked atomic.Int64
	bigMsg := make([]byte, 1<<20)
	small, _ := json.Marshal(api.EnrollRequest{NodeID: "node-1", Groups: []string{"web"}, Token: "guess"})
	kickedKey := make(chan nkeys.KeyPair, 1)
	for i := range 4 {
		wg.Go(func() {
			for flood.Err() == nil {
				kp, _ := nkeys.CreateUser()
				pub, _ := kp.PublicKey()
				nc, err := nats.Connect(f.NATSURL(), nats.RootCAs(f.CAFile()), nats.Nkey(pub, kp.Sign), nats.NoReconnect(),
					nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)))
				if err != nil {
					continue
				}
				for n := 0; flood.Err() == nil; n++ {
					data := small
					if i == 0 && n < 300 {
						data = bigMsg
					}
					if nc.Publish(api.EnrollSubject(pub), data) != nil {
						break
					}
					sent.Add(1)
					if n%200 == 0 && nc.Flush() != nil {
						break
					}
				}
				if flood.Err() == nil {
					kicked.Add(1)
					select {
					case kickedKey <- kp:
					default:
					}
				}
				nc.Close()
			}
		})
	}
	defer func() { stopFlood(); wg.Wait() }()
	waitFor(t, 10*time.Second, "the flood under way", func() bool { return sent.Load() > 2000 })
	start, before := time.Now(), sent.Load()
	a, err := f.AddAgent(ctx, []string{"web"})
	if err != nil {
		t.Fatalf("a real enrollment during the flood: %v", err)
	}
	t.Logf("enrolled in %s during the flood (%d requests sent meanwhile, %d in all, %d flooding connections closed)",
		time.Since(start).Round(time.Millisecond), sent.Load()-before, sent.Load(), kicked.Load())
	if err := f.WaitOnline(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	// The flood goes on until a flooding key has been cut off (how soon
	// depends on how fast this machine lets the flooders send).
	waitFor(t, 30*time.Second, "a flooding connection closed", func() bool { return kicked.Load() > 0 })
	stopFlood()
	wg.Wait()
	// A flooding key was disconnected and may not come back for a while.
	select {
	case kp := <-kickedKey:
		pub, _ := kp.PublicKey()
		if nc, err := nats.Connect(f.NATSURL(), nats.RootCAs(f.CAFile()), nats.Nkey(pub, kp.Sign), nats.NoReconnect()); err == nil {
			nc.Close()
			t.Fatal("a key disconnected for flooding connected again at once")
		}
	default:
		t.Fatal("no flooding connection was closed")
	}
	// The controller's own connection survived: once the backlog the
	// flood left in the server's buffers is read, it answers strangers
	// again.
	late := newEnrollee(t, f)
	req, _ := json.Marshal(api.EnrollRequest{NodeID: "late"})
	waitFor(t, 20*time.Second, "an answer after the flood", func() bool {
		m, err := late.nc.Request(api.EnrollSubject(late.pub), req, time.Second)
		return err == nil && strings.Contains(string(m.Data), "enrollment refused")
	})
	if _, err := f.Client().ListEnrollments(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "dropping enrollment requests") || strings.Count(out, "dropping enrollment requests") > 3 {
		t.Fatalf("the drops were not logged once per 10s:\n%s", out)
	}
}

// A second process with an admitted agent's key (a cloned image) is
// refused while the first is connected, with a warning naming both
// addresses; the agent's enrollment connection is not a duplicate, and the
// first agent keeps working.
func TestDuplicateIdentityRefused(t *testing.T) {
	var logs lockedBuffer
	f := fleettest.Start(t, fleet.Options{Agents: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.WaitOnline(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	_, err := connectAs(t, f, "node-1", nats.Timeout(3*time.Second), nats.NoReconnect())
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a clone of node-1 connected: %v", err)
	}
	out := logs.String()
	i := strings.Index(out, "refused a second connection")
	if i < 0 {
		t.Fatalf("no warning about the clone:\n%s", out)
	}
	line := out[i:]
	line = line[:strings.IndexByte(line, '\n')]
	if !strings.Contains(out[strings.LastIndexByte(out[:i], '\n')+1:i], "level=WARN") ||
		!strings.Contains(line, "live_addr=127.0.0.1:") || !strings.Contains(line, "refused_addr=127.0.0.1:") || !strings.Contains(line, "node=node-1") {
		t.Fatalf("warning %q", line)
	}
	// The enrollment connection is not a duplicate.
	enc, err := connectAs(t, f, "node-1", nats.Name(api.EnrollConnName+"node-1"), nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("node-1's enrollment connection: %v", err)
	}
	enc.nc.Close()
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := f.Client().WaitJob(ctx, j.ID); err != nil || done.Status != api.JobCompleted {
		t.Fatalf("node-1 after the clone was refused: %v %+v", err, done)
	}
	// Once the first process is gone the key connects again.
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the key connects after its agent is gone", func() bool {
		bc, err := connectAs(t, f, "node-1", nats.Timeout(3*time.Second), nats.NoReconnect())
		if err == nil {
			bc.nc.Close()
		}
		return err == nil
	})
}

// A revoked agent stops, with an error that says so and what to do,
// instead of failing its heartbeat forever.
func TestRevokedAgentExits(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := f.Agent("node-1")
	if _, err := f.Client().RevokeNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked agent is still running")
	}
	err := a.Err()
	if !errors.Is(err, agent.ErrRevoked) || !strings.Contains(err.Error(), "grid node approve") ||
		!strings.Contains(err.Error(), pki.AgentKeyFile) {
		t.Fatalf("revoked agent ended with %v, want ErrRevoked saying what to do", err)
	}
	e, err := fleettest.Bucket(t, ctx, f, api.BucketEnrollments).Get(ctx, "node-1")
	if err != nil || !strings.Contains(string(e.Value()), `"status":"revoked"`) {
		t.Fatalf("enrollment after the agent stopped: %v", err)
	}
}
