package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// busClient is a NATS connection that records the server's asynchronous
// errors (permission violations arrive that way).
type busClient struct {
	nc   *nats.Conn
	errs chan error
}

// connectAs connects to the fleet's NATS with the NKey an agent keeps in
// its data dir: what an attacker on a compromised agent host holds.
func connectAs(t *testing.T, f *fleet.Fleet, node string, extra ...nats.Option) (*busClient, error) {
	t.Helper()
	seed := filepath.Join(f.DataDir(), "agents", node, pki.AgentKeyFile)
	kpOpt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.EnsureUserKey(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	bc := &busClient{errs: make(chan error, 64)}
	opts := append([]nats.Option{kpOpt, nats.RootCAs(filepath.Join(f.DataDir(), "controller", pki.CAFile)),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { bc.errs <- err })}, extra...)
	bc.nc, err = nats.Connect(f.NATSURL(), opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(bc.nc.Close)
	return bc, nil
}

// ask sends a request as the agent does (reply in its own inbox) and
// returns the controller's answer as an error.
func (bc *busClient) ask(ctx context.Context, subject string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := bc.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return err
	}
	var r api.StoreReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// refused runs act and waits for the server to report a permissions
// violation naming subject.
func (bc *busClient) refused(t *testing.T, what, subject string, act func() error) {
	t.Helper()
	for len(bc.errs) > 0 {
		<-bc.errs
	}
	if err := act(); err != nil && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		t.Fatalf("%s: %v", what, err)
	}
	_ = bc.nc.Flush()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case err := <-bc.errs:
			if strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the server did not refuse %s", what, subject)
		}
	}
}

func TestAnonymousClientRefused(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	if nc, err := nats.Connect(f.NATSURL(), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without TLS connected")
	}
	ca := nats.RootCAs(filepath.Join(f.DataDir(), "controller", pki.CAFile))
	nc, err := nats.Connect(f.NATSURL(), ca, nats.Timeout(3*time.Second))
	if err == nil {
		nc.Close()
		t.Fatal("an anonymous TLS client connected")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous client: %v, want an authorization violation", err)
	}
	// A key never enrolled gets in, but may only ask to be enrolled.
	if _, err := os.Stat(filepath.Join(f.DataDir(), "controller", pki.JoinTokenFile)); err != nil {
		t.Fatalf("join token: %v", err)
	}
}

// Agent node-1, with its own credentials, tries every attack of issue 11
// on node-2 and the bus; the server refuses each, and node-2's real result
// stands.
func TestAgentCannotActOutsideItsPermissions(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2}) // node-1 web.prod, node-2 db.prod
	ctx := context.Background()
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sleep to start on node-2", func() bool {
		cur, err := f.Client().GetJob(ctx, job.ID)
		return err == nil && nodeStatus(cur, 0, "node-2") == api.StepRunning
	})
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatalf("node-1 with its own key: %v", err)
	}
	forged, _ := json.Marshal(api.TaskResult{JobID: job.ID, NodeID: "node-2", Status: api.StepSuccess, Output: "forged"})
	nodeRec, _ := json.Marshal(api.NodeInfo{ID: "node-2", Groups: []string{"web.prod"}, Status: api.NodeOnline, LastSeen: time.Now().UTC()})
	pub := func(subj string, data []byte) func() error { return func() error { return a.nc.Publish(subj, data) } }
	sub := func(subj string) func() error {
		return func() error { _, err := a.nc.Subscribe(subj, func(*nats.Msg) {}); return err }
	}
	for _, c := range []struct {
		what, subject string
		act           func() error
	}{
		{"command to node-2", "cmd.node.node-2.file.write", pub("cmd.node.node-2.file.write", []byte(`{}`))},
		{"node-2's result", api.ResultSubject(job.ID), pub(api.ResultSubject(job.ID), forged)},
		{"a result on an earlier version's per-node subject", "result." + job.ID + ".0.node-2", pub("result."+job.ID+".0.node-2", forged)},
		{"node-2's progress", api.ProgressSubject(job.ID, 0, "node-2"), pub(api.ProgressSubject(job.ID, 0, "node-2"), forged)},
		{"node-2's commands", "cmd.node.node-2.*.*", sub("cmd.node.node-2.*.*")},
		{"every command", "cmd.>", sub("cmd.>")},
		{"another group's commands", "cmd.group.db.*.*", sub("cmd.group.db.*.*")},
		{"every result", "result.>", sub("result.>")},
		{"every progress report", "progress.>", sub("progress.>")},
		{"every KV change", "$KV.>", sub("$KV.>")},
		{"other replies", "_INBOX.>", sub("_INBOX.>")},
		{"a job's record", "$KV.jobs." + job.ID, pub("$KV.jobs."+job.ID, []byte(`{}`))},
		{"node-2's record", "$KV.nodes.node-2", pub("$KV.nodes.node-2", nodeRec)},
		{"a node '*'", "$KV.nodes.*", pub("$KV.nodes.*", nodeRec)},
		{"an enrollment", "$KV.enrollments.node-1", pub("$KV.enrollments.node-1", []byte(`{}`))},
		{"a rate limit's window", "$KV." + api.BucketRateLimits + ".ping.echo", pub("$KV."+api.BucketRateLimits+".ping.echo", []byte(`{"starts":1000000}`))},
		{"reading the rate limits bucket", "$JS.API.DIRECT.GET.KV_" + api.BucketRateLimits, pub("$JS.API.DIRECT.GET.KV_"+api.BucketRateLimits+".$KV."+api.BucketRateLimits+".ping.echo", nil)},
		{"reading the jobs bucket", "$JS.API.DIRECT.GET.KV_jobs", pub("$JS.API.DIRECT.GET.KV_jobs.$KV.jobs."+job.ID, nil)},
		{"creating a stream", "$JS.API.STREAM.CREATE.evil", pub("$JS.API.STREAM.CREATE.evil", []byte(`{"name":"evil","subjects":["evil.>"]}`))},
		{"deleting a stream", "$JS.API.STREAM.DELETE.commands", pub("$JS.API.STREAM.DELETE.commands", nil)},
		{"a consumer on the commands", "$JS.API.CONSUMER.CREATE.commands", pub("$JS.API.CONSUMER.CREATE.commands", []byte(`{}`))},
		{"replaying the commands stream", "$JS.API.STREAM.MSG.GET.commands", pub("$JS.API.STREAM.MSG.GET.commands", []byte(`{"seq":1}`))},
	} {
		a.refused(t, c.what, c.subject, c.act)
	}
	// Its own work is allowed: the checks above are not refusing everything.
	for len(a.errs) > 0 {
		<-a.errs
	}
	if _, err := a.nc.Subscribe("cmd.node.node-1.*.*", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Publish(api.ProgressSubject(job.ID, 0, "node-1"), forged); err != nil {
		t.Fatal(err)
	}
	_ = a.nc.Flush()
	select {
	case err := <-a.errs:
		t.Fatalf("node-1's own subjects refused: %v", err)
	case <-time.After(500 * time.Millisecond):
	}

	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := done.Results.Node(0, "node-2")
	if done.Status != api.JobCompleted || r == nil || r.Output == "forged" {
		t.Fatalf("job %s, node-2 result %+v: want node-2's own result", done.Status, r)
	}
	// node-2 is still in its own group only.
	n, err := f.Client().GetNode(ctx, "node-2")
	if err != nil || strings.Join(n.Groups, ",") != "db.prod" {
		t.Fatalf("node-2: %+v %v", n, err)
	}
	// The streams are untouched.
	if _, err := f.Client().Status(ctx); err != nil {
		t.Fatal(err)
	}
}

// An agent writing its own record cannot claim a group it was not admitted
// with: the registry keeps the admitted groups.
func TestAgentCannotClaimAGroup(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.KillAgent("node-2"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := f.Client().GetNode(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(api.NodeInfo{ID: "node-2", Groups: []string{"web.prod"}, Status: api.NodeOnline,
		SchemaDigest: cur.SchemaDigest, OnlineSince: cur.OnlineSince, LastSeen: time.Now().UTC()})
	if err := a.ask(ctx, api.NodeHeartbeatSubject("node-2"), rec); err != nil {
		t.Fatalf("node-2 sends its own record: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	n, err := f.Client().GetNode(ctx, "node-2")
	if err != nil || strings.Join(n.Groups, ",") != "db.prod" {
		t.Fatalf("node-2 after claiming web.prod: %+v %v", n, err)
	}
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := f.Client().WaitJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.JobCompleted || done.Results.Node(0, "node-2") != nil {
		t.Fatalf("group:web job %s reached node-2: %+v", done.Status, done.Results)
	}
}

// The registry takes a record only under its own valid id, and a last_seen
// in the future does not keep a silent node online.
func TestRegistryRefusesForgedRecords(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1}) // node_offline_after 2s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"ghost", "future-1"} {
		if err := f.AdmitNode(ctx, id, []string{"web.prod"}); err != nil {
			t.Fatal(err)
		}
	}
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	put := func(key string, n api.NodeInfo) {
		b, _ := json.Marshal(n)
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put("ghost", api.NodeInfo{ID: "*", Groups: []string{"web.prod"}, Status: api.NodeOnline, LastSeen: now})
	put("ghost", api.NodeInfo{ID: "node-1", Groups: []string{"web.prod"}, Status: api.NodeOffline, LastSeen: now})
	put("future-1", api.NodeInfo{ID: "future-1", Groups: []string{"web.prod"}, Status: api.NodeOnline, LastSeen: now.Add(time.Hour)})
	waitFor(t, 5*time.Second, "future-1 listed", func() bool {
		_, err := f.Client().GetNode(ctx, "future-1")
		return err == nil
	})
	nodes, err := f.Client().ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID == "*" || n.ID == "ghost" || (n.ID == "node-1" && n.Status != api.NodeOnline) {
			t.Fatalf("forged record taken: %+v", n)
		}
	}
	n, _ := f.Client().GetNode(ctx, "future-1")
	if n.LastSeen.After(time.Now().Add(time.Minute)) {
		t.Fatalf("future-1 last_seen %s kept", n.LastSeen)
	}
	// Silent since: offline after node_offline_after, whatever it claimed.
	waitFor(t, 10*time.Second, "future-1 offline", func() bool {
		n, err := f.Client().GetNode(ctx, "future-1")
		return err == nil && n.Status == api.NodeOffline
	})
}

// A revoked agent is disconnected at once and refused from then on.
func TestRevokedAgentDisconnectedAndRefused(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closed := make(chan struct{})
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1", nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := f.Client().RevokeNode(ctx, "node-1"); err != nil || e.Status != api.EnrollRevoked {
		t.Fatalf("revoke: %+v %v", e, err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked agent's connection stayed open")
	}
	_ = a
	// The revoked key gets in again only to hear that it was revoked.
	rc, err := connectAs(t, f, "node-1", nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("the revoked key: %v", err)
	}
	rc.refused(t, "node-1's commands after revocation", "cmd.node.node-1.*.*", func() error {
		_, err := rc.nc.Subscribe("cmd.node.node-1.*.*", func(*nats.Msg) {})
		return err
	})
	kp, _ := pki.EnsureUserKey(filepath.Join(f.DataDir(), "agents", "node-1", pki.AgentKeyFile))
	pub, _ := kp.PublicKey()
	m, err := rc.nc.Request(api.EnrollSubject(pub), []byte(`{"node_id":"node-1","groups":["web.prod"]}`), 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"status":"revoked"`) {
		t.Fatalf("the revoked key's enrollment request: %v", err)
	}
	waitFor(t, 5*time.Second, "node-1 gone from the registry", func() bool {
		_, err := f.Client().GetNode(ctx, "node-1")
		return err != nil
	})
	// The agent itself, restarted with the same key and the join token,
	// is refused.
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.Groups, cfg.NATSURLs = "node-1", []string{"web.prod"}, []string{f.NATSURL()}
	cfg.DataDir = filepath.Join(f.DataDir(), "agents", "node-1")
	cfg.CAFile = filepath.Join(f.DataDir(), "controller", pki.CAFile)
	cfg.JoinTokenFile = filepath.Join(f.DataDir(), "controller", pki.JoinTokenFile)
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := ag.Start(sctx); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("revoked agent restarted: %v, want refused", err)
	}
}

// With auto_admit off an enrolled agent waits until approved.
func TestPendingAgentWaitsForApproval(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Controller: func(c *controller.Config) {
		off := false
		c.AutoAdmit = &off
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	added := make(chan error, 1)
	go func() {
		_, err := f.AddAgent(ctx, nil)
		added <- err
	}()
	waitFor(t, 10*time.Second, "node-1 pending", func() bool {
		es, err := f.Client().ListEnrollments(ctx, api.EnrollPending)
		return err == nil && len(es) == 1 && es[0].NodeID == "node-1"
	})
	select {
	case err := <-added:
		t.Fatalf("agent started while pending: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if nodes, _ := f.Client().ListNodes(ctx); len(nodes) != 0 {
		t.Fatalf("pending node listed: %+v", nodes)
	}
	if _, err := f.Client().ApproveNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := <-added; err != nil {
		t.Fatalf("agent after approval: %v", err)
	}
	if err := f.WaitOnline(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
}
