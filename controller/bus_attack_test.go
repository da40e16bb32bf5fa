package controller_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// busState is what the attacks below aim at, read with the controller's
// credentials: whole buckets (key → value) and the streams' last sequence.
type busState struct {
	buckets map[string]map[string]string
	streams map[string]uint64
}

func readBusState(t *testing.T, ctx context.Context, js jetstream.JetStream, buckets []string) busState {
	t.Helper()
	st := busState{buckets: map[string]map[string]string{}, streams: map[string]uint64{}}
	for _, b := range buckets {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatalf("bucket %s: %v", b, err)
		}
		m := map[string]string{}
		for _, k := range keysOf(t, ctx, kv) {
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatalf("%s/%s: %v", b, k, err)
			}
			m[k] = string(e.Value())
		}
		st.buckets[b] = m
	}
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		st.streams[name] = s.CachedInfo().State.LastSeq
	}
	return st
}

// keysOf lists a bucket's keys, sorted.
func keysOf(t *testing.T, ctx context.Context, kv jetstream.KeyValue) []string {
	t.Helper()
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("keys: %v", err)
	}
	slices.Sort(keys)
	return keys
}

// sameBuckets fails the test when a bucket differs between before and
// after.
func sameBuckets(t *testing.T, before, after busState) {
	t.Helper()
	for b, want := range before.buckets {
		if got := after.buckets[b]; !maps.Equal(got, want) {
			t.Errorf("bucket %s changed:\nbefore %v\nafter  %v", b, want, got)
		}
	}
	for name := range before.streams {
		if _, ok := after.streams[name]; !ok {
			t.Errorf("stream %s is gone", name)
		}
	}
}

// waitRefused waits until the controller has dropped n more requests for
// their reply subject than it had at from.
func waitRefused(t *testing.T, f *fleet.Fleet, from int64, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, strconv.Itoa(n)+" requests dropped for their reply subject", func() bool {
		return f.Controller.RefusedReplies() >= from+int64(n)
	})
}

// An enrolled agent, node-1, uses its own key the way an attacker on its
// host would: JetStream requests and stores with reply subjects that
// name other state, headers that delete or roll up buckets, a result that
// takes node-2's message id first, and schema sets under another digest.
// Each attempt fails, and the buckets and streams aimed at are unchanged.
func TestAgentReplySubjectsAndHeadersReachNoState(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2}) // node-1 web.prod, node-2 db.prod
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := fleettest.JetStream(t, f)
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sleep to start on node-2", func() bool {
		cur, err := f.Client().GetJob(ctx, job.ID)
		return err == nil && nodeStatus(cur, 0, "node-2") == api.StepRunning
	})
	n1, err := f.Client().GetNode(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	digest := n1.SchemaDigest
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	watched := []string{api.BucketTokens, api.BucketSchemas, api.BucketEnrollments, api.BucketKeys}
	before := readBusState(t, ctx, js, watched)
	jobKeys := keysOf(t, ctx, fleettest.Bucket(t, ctx, f, api.BucketJobs))

	// node-2's message id, which a publish to the results stream would
	// have taken first.
	node2ID := job.ID + ".0.node-2.1"
	mine, _ := json.Marshal(api.TaskResult{JobID: job.ID, NodeID: "node-1", Attempt: 1, Status: api.StepSuccess, Output: "forged", Timestamp: time.Now().UTC()})
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	req := func(subj, reply string, h nats.Header, data []byte) func() error {
		return func() error { return a.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Header: h, Data: data}) }
	}

	// 1. JetStream itself: the server refuses every such publish.
	for _, c := range []struct {
		what, subject string
		act           func() error
	}{
		{"a direct get answered into the tokens bucket", "$JS.API.DIRECT.GET.KV_" + api.BucketSchemas,
			req("$JS.API.DIRECT.GET.KV_"+api.BucketSchemas+".$KV."+api.BucketSchemas+"."+digest, "$KV.tokens.x", nil, nil)},
		{"a schema put acked into the jobs bucket", "$KV." + api.BucketSchemas + "." + digest,
			req("$KV."+api.BucketSchemas+"."+digest, "$KV.jobs.x", nil, []byte("[]"))},
		{"its own node put acked into the requests stream", "$KV.nodes.node-1",
			req("$KV.nodes.node-1", "request.1.x", nil, []byte(`{}`))},
		{"a result acked into the stream API", api.ResultSubject(job.ID),
			req(api.ResultSubject(job.ID), "$JS.API.STREAM.DELETE.results", nil, mine)},
		{"a schema delete marker", "$KV." + api.BucketSchemas + "." + digest,
			req("$KV."+api.BucketSchemas+"."+digest, "", hdr("KV-Operation", "DEL"), nil)},
		{"a schema roll-up", "$KV." + api.BucketSchemas + ".x",
			req("$KV."+api.BucketSchemas+".x", "", hdr("Nats-Rollup", "all"), []byte("[]"))},
		{"a node roll-up", "$KV.nodes.node-1",
			req("$KV.nodes.node-1", "", hdr("Nats-Rollup", "all"), []byte(`{}`))},
		{"a result with node-2's message id", api.ResultSubject(job.ID),
			req(api.ResultSubject(job.ID), "", hdr(nats.MsgIdHdr, node2ID), mine)},
		{"a result on an earlier version's per-node subject", "result." + job.ID + ".0.node-1",
			req("result."+job.ID+".0.node-1", "", hdr(nats.MsgIdHdr, node2ID), mine)},
	} {
		a.refused(t, c.what, c.subject, c.act)
	}

	// 2. Its own core subjects, with a reply subject that is not its
	// inbox: the controller drops them, answering nowhere and storing
	// nothing.
	rec, _ := json.Marshal(api.NodeInfo{ID: "node-1", Groups: n1.Groups, Status: api.NodeOnline, SchemaDigest: digest,
		OnlineSince: n1.OnlineSince, LastSeen: time.Now().UTC()})
	set, _ := json.Marshal(n1.Schemas)
	reg, _ := json.Marshal(api.NodeRegistration{Node: api.NodeInfo{ID: "node-1", Status: api.NodeOnline, SchemaDigest: digest,
		OnlineSince: n1.OnlineSince, LastSeen: time.Now().UTC()}, Schemas: set})
	from := f.Controller.RefusedReplies()
	attempts := 0
	for _, reply := range []string{"$KV.tokens.x", "$KV.jobs.x", "request.1.x", "$JS.API.STREAM.DELETE.results", "cancel." + job.ID} {
		for _, m := range []*nats.Msg{
			{Subject: api.ReportSubject(job.ID, 0, "node-1"), Reply: reply, Data: mine},
			{Subject: api.NodeHeartbeatSubject("node-1"), Reply: reply, Data: rec},
			{Subject: api.NodeRegisterSubject("node-1"), Reply: reply, Data: reg},
		} {
			if err := a.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			attempts++
		}
	}
	_ = a.nc.Flush()
	waitRefused(t, f, from, attempts)

	// 3. Headers on its own subjects, asked properly: the controller
	// stores a message of its own making, without them.
	for _, h := range []nats.Header{
		hdr("KV-Operation", "DEL"), hdr("Nats-Rollup", "all"), hdr(nats.MsgIdHdr, node2ID),
		hdr("Nats-Expected-Last-Sequence", "1"), hdr("KV-Operation", "PURGE", "Nats-Rollup", "sub"),
	} {
		if err := a.askMsg(ctx, &nats.Msg{Subject: api.NodeHeartbeatSubject("node-1"), Header: h, Data: rec}); err != nil {
			t.Fatalf("heartbeat with headers %v: %v", h, err)
		}
		// node-1's own result for a job it does not run: stored under an
		// id naming node-1, and ignored by the run.
		if err := a.askMsg(ctx, &nats.Msg{Subject: api.ReportSubject(job.ID, 0, "node-1"), Header: h, Data: mine}); err != nil {
			t.Fatalf("report with headers %v: %v", h, err)
		}
	}

	// 4. Schema sets: another digest than the set's, or no backend at all.
	for _, c := range []struct {
		what   string
		digest string
		set    string
	}{
		{"an empty set under the fleet's digest", digest, "[]"},
		{"a smaller set under the fleet's digest", digest, `[{"name":"ping"}]`},
		{"an empty set under its own digest", api.SchemaDigestOf([]byte("[]")), "[]"},
		{"no set", api.SchemaDigestOf([]byte("null")), "null"},
	} {
		b, _ := json.Marshal(api.NodeRegistration{Node: api.NodeInfo{ID: "node-1", Status: api.NodeOnline, SchemaDigest: c.digest,
			LastSeen: time.Now().UTC()}, Schemas: json.RawMessage(c.set)})
		if err := a.ask(ctx, api.NodeRegisterSubject("node-1"), b); err == nil {
			t.Errorf("%s: registered", c.what)
		}
	}

	// node-2's real result counts, and node-1 changed nothing it aimed at.
	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := done.Results.Node(0, "node-2")
	if done.Status != api.JobCompleted || r == nil || r.Status != api.StepSuccess || r.Output == "forged" {
		t.Fatalf("job %s, node-2 result %+v: want node-2's own success", done.Status, r)
	}
	if done.Results.Node(0, "node-1") != nil {
		t.Fatalf("node-1's report counted for a job it was not sent: %+v", done.Results)
	}
	stored, err := storedResultOfNode(ctx, js, job.ID, "node-2")
	if err != nil {
		t.Fatalf("node-2's result is not in the results stream: %v", err)
	}
	if id := stored.Headers().Get(nats.MsgIdHdr); id != node2ID {
		t.Errorf("node-2's stored result has id %q, want %q", id, node2ID)
	}
	if forged, err := storedResultOfNode(ctx, js, job.ID, "node-1"); err != nil {
		t.Errorf("node-1's own report was not stored: %v", err)
	} else {
		for _, h := range []string{"KV-Operation", "Nats-Rollup", "Nats-Expected-Last-Sequence"} {
			if forged.Headers().Get(h) != "" {
				t.Errorf("node-1's stored report carries its header %s", h)
			}
		}
		if id := forged.Headers().Get(nats.MsgIdHdr); !strings.Contains(id, ".node-1.") {
			t.Errorf("node-1's stored report has id %q, not one naming node-1", id)
		}
	}
	// Both stored results share the job's one subject: the server's
	// per-subject index holds one entry per job, not one per node.
	info, err := resultsStream(t, ctx, js).Info(ctx, jetstream.WithSubjectFilter(api.SubjectResults))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint64{api.ResultSubject(job.ID): 2}; !maps.Equal(info.State.Subjects, want) {
		t.Errorf("results stream subjects %v, want %v", info.State.Subjects, want)
	}
	after := readBusState(t, ctx, js, watched)
	sameBuckets(t, before, after)
	if got := keysOf(t, ctx, fleettest.Bucket(t, ctx, f, api.BucketJobs)); !slices.Equal(got, jobKeys) {
		t.Errorf("jobs bucket keys %v, were %v", got, jobKeys)
	}
	if after.streams[api.StreamRequests] != before.streams[api.StreamRequests] {
		t.Errorf("requests stream went from sequence %d to %d: a job was queued", before.streams[api.StreamRequests], after.streams[api.StreamRequests])
	}
	// Every node record stands, node-2's with its own groups and set.
	n2, err := f.Client().GetNode(ctx, "node-2")
	if err != nil || strings.Join(n2.Groups, ",") != "db.prod" || n2.SchemaDigest != digest || len(n2.Schemas) == 0 {
		t.Fatalf("node-2 after the attacks: %+v %v", n2, err)
	}
	if n, err := f.Client().GetNode(ctx, "node-1"); err != nil || n.SchemaDigest != digest {
		t.Fatalf("node-1 after the attacks: %+v %v", n, err)
	}
	cat, err := f.Client().Backends(ctx)
	if err != nil || len(cat.Backends) == 0 {
		t.Fatalf("catalog after the attacks: %+v %v", cat, err)
	}
}

// A stranger (a key of its own making, no join token, not trusting the CA)
// asks to be enrolled with a reply subject that names controller state: the
// cluster key, an enrollment, a job, a cancellation. The controller answers
// nowhere but the stranger's own inbox, so each attempt fails and the state
// is unchanged; asked properly, it is refused.
func TestStrangerEnrollmentRepliesReachNoState(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := fleettest.JetStream(t, f)
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
		Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1500ms"}}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sleep to start on node-1", func() bool {
		cur, err := f.Client().GetJob(ctx, job.ID)
		return err == nil && nodeStatus(cur, 0, "node-1") == api.StepRunning
	})
	// A stranger uses a fresh key for each reply subject it tries (each key
	// may ask a few times a second; more is a flood, cut off unanswered).
	stranger := func() (*nats.Conn, string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect(f.NATSURL(), nats.Nkey(pub, kp.Sign),
			nats.Secure(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}), //nolint:gosec // an attacker trusts nothing
			nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)))
		if err != nil {
			t.Fatalf("a stranger's key may connect to ask for enrollment: %v", err)
		}
		t.Cleanup(nc.Close)
		return nc, pub
	}
	watched := []string{api.BucketKeys, api.BucketEnrollments, api.BucketTokens}
	before := readBusState(t, ctx, js, watched)

	from := f.Controller.RefusedReplies()
	attempts := 0
	for _, reply := range []string{"$KV." + api.BucketKeys + ".params", "$KV." + api.BucketEnrollments + ".node-1",
		"$KV.jobs." + job.ID, api.CancelSubject(job.ID), "_INBOX.x", api.AgentInboxPrefix("UOTHERKEY") + ".1"} {
		nc, pub := stranger()
		for _, body := range [][]byte{[]byte(`{"node_id":"node-1"}`), []byte(`{"node_id":"evil","groups":["web.prod"]}`), []byte("not json")} {
			if err := nc.PublishRequest(api.EnrollSubject(pub), reply, body); err != nil {
				t.Fatal(err)
			}
			attempts++
		}
		_ = nc.Flush()
	}
	waitRefused(t, f, from, attempts)

	nc, pub := stranger()
	// Asked properly, in its own inbox: refused, with nothing learned.
	m, err := nc.Request(api.EnrollSubject(pub), []byte(`{"node_id":"evil"}`), 5*time.Second)
	if err != nil {
		t.Fatalf("the stranger's own request: %v", err)
	}
	var r api.EnrollReply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Error == "" || r.Status != "" {
		t.Fatalf("the stranger's own request answered %s (%v), want a refusal", m.Data, err)
	}

	done, err := f.Client().WaitJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s after the stranger's requests, want completed", done.Status)
	}
	sameBuckets(t, before, readBusState(t, ctx, js, watched))
	// The cluster key still opens what it sealed: a sensitive param round
	// trip would fail with a key overwritten, which sameBuckets has shown
	// it was not.
	if _, err := f.Client().GetNode(ctx, "evil"); err == nil {
		t.Fatal("the stranger became a node")
	}
}

// askMsg is ask with the message's headers.
func (bc *busClient) askMsg(ctx context.Context, m *nats.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reply, err := bc.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	var r api.StoreReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// storedResultOfNode is the last result the results stream holds for job
// whose body names node (a job's results share one subject).
func storedResultOfNode(ctx context.Context, js jetstream.JetStream, job, node string) (jetstream.Msg, error) {
	cons, err := js.OrderedConsumer(ctx, api.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{api.ResultSubject(job)}})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var last jetstream.Msg
	for n := info.NumPending; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, err
		}
		var tr api.TaskResult
		if json.Unmarshal(m.Data(), &tr) == nil && tr.NodeID == node {
			last = m
		}
	}
	if last == nil {
		return nil, fmt.Errorf("no result of node %s for job %s", node, job)
	}
	return last, nil
}

func resultsStream(t *testing.T, ctx context.Context, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	s, err := js.Stream(ctx, api.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
