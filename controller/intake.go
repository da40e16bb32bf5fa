package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// The agents' intake: agents have no JetStream rights at all. They send
// final results, registrations and heartbeats as core requests; a
// controller (one of the queue group) takes the sender from the subject
// (the server lets a node publish only on its own), validates the body,
// builds a fresh message (never the agent's headers) and stores it, then
// answers in the sender's own inbox. Only controllers write to streams
// and buckets. See DESIGN.md, "Bus security".

// A node may add newSetBurst schema sets not stored before at once, then
// one per newSetEvery (see intake.newSets).
const (
	newSetBurst = 4
	newSetEvery = 10 * time.Minute
)

const (
	// intakeQueue is the queue group of the controllers' intake.
	intakeQueue = "grid-intake"
	// intakeTimeout bounds one store (the stream's acknowledgement).
	intakeTimeout = 5 * time.Second
	// intakePending bounds the stores waiting for their acknowledgement;
	// past it the subscription callbacks wait (back-pressure).
	intakePending = 8192
	// storedFor is how long a schema set found stored is not looked up
	// again: a burst of registrations of the same set reads it once, and a
	// bucket that lost it (a fresh server) gets it back soon after.
	storedFor = 30 * time.Second
)

// intake holds the intake's subscriptions and the one goroutine that waits
// for the stores' acknowledgements, in order, and answers the senders.
type intake struct {
	c  *Controller
	js jetstream.JetStream
	// schemasKV is where sets are stored; stored remembers when each
	// digest was last found stored under its own digest.
	schemasKV jetstream.KeyValue
	stored    sync.Map
	// newSets bounds, per node, how many schema sets not stored before a
	// node may add: a real node changes its set when its agent is
	// upgraded or reconfigured, while one that made up sets could fill
	// the bucket (its byte cap) and shut new nodes out.
	newSets *keyedLimiter
	// acks carries the stores under way to the waiting goroutine; stop
	// closes when it must return.
	acks chan pendingStore
	stop chan struct{}
	done chan struct{}
	subs []*nats.Subscription
}

// pendingStore is one store under way and the request to answer once it
// is acknowledged.
type pendingStore struct {
	fut jetstream.PubAckFuture
	req *nats.Msg
}

// startIntake subscribes the intake (queue group) and starts its waiting
// goroutine. stopIntake stops them, in that order.
func (c *Controller) startIntake(schemasKV jetstream.KeyValue) (*intake, error) {
	js, err := jetstream.New(c.nc, jetstream.WithPublishAsyncTimeout(intakeTimeout),
		jetstream.WithPublishAsyncMaxPending(intakePending))
	if err != nil {
		return nil, fmt.Errorf("intake: jetstream: %w", err)
	}
	in := &intake{c: c, js: js, schemasKV: schemasKV, acks: make(chan pendingStore, intakePending),
		stop: make(chan struct{}), done: make(chan struct{}),
		newSets: newKeyedLimiter(rate.Every(newSetEvery), newSetBurst)}
	go in.wait()
	for _, s := range []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{api.SubjectReportAll, in.onReport},
		{api.SubjectNodeRegisterAll, in.onRegister},
		{api.SubjectNodeHeartbeatAll, in.onHeartbeat},
	} {
		sub, err := c.nc.QueueSubscribe(s.subject, intakeQueue, s.handle)
		if err != nil {
			in.close()
			return nil, fmt.Errorf("subscribe %s: %w", s.subject, err)
		}
		// A fan-out to thousands of nodes brings their results at once.
		_ = sub.SetPendingLimits(-1, 64<<20)
		in.subs = append(in.subs, sub)
	}
	return in, nil
}

// close unsubscribes, then stops the waiting goroutine and waits for it.
// Stores still unacknowledged are not answered: their senders retry.
func (in *intake) close() {
	for _, s := range in.subs {
		_ = s.Unsubscribe()
	}
	close(in.stop)
	<-in.done
}

// wait answers each store once the stream acknowledged it, in the order
// they were made (an acknowledgement comes in that order too, so waiting
// on the oldest first holds up nothing).
func (in *intake) wait() {
	defer close(in.done)
	for {
		select {
		case <-in.stop:
			return
		case p := <-in.acks:
			select {
			case <-p.fut.Ok():
				in.answer(p.req, nil)
			case err := <-p.fut.Err():
				in.answer(p.req, err)
			case <-in.stop:
				return
			}
		}
	}
}

// store publishes msg to its stream without waiting, and hands the wait
// for the acknowledgement and the answer to req to the waiting goroutine.
func (in *intake) store(req, msg *nats.Msg, opts ...jetstream.PublishOpt) {
	fut, err := in.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		in.answer(req, err)
		return
	}
	select {
	case in.acks <- pendingStore{fut: fut, req: req}:
	case <-in.stop:
	}
}

// answer replies to an agent's request (already checked to come with its
// own inbox as reply subject).
func (in *intake) answer(req *nats.Msg, err error) {
	var r api.StoreReply
	if err != nil {
		r.Error = err.Error()
	}
	b, _ := json.Marshal(r)
	_ = req.Respond(b)
}

// sender returns the node id a request's subject names (its last token,
// which the server guarantees is the sender's own id), and whether its
// reply subject is the sender's own inbox; a request that fails either is
// dropped without an answer.
func (in *intake) sender(m *nats.Msg) (string, bool) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if !api.ValidToken(id) {
		return "", false
	}
	key := ""
	if sec := in.c.sec; sec != nil {
		sec.mu.RLock()
		e := sec.byNode[id]
		sec.mu.RUnlock()
		if e == nil || e.Status != api.EnrollAdmitted {
			return "", false
		}
		key = e.PublicKey
	}
	return id, in.c.replies.ownInbox(m, key)
}

// onReport takes a final result on report.<job>.<step>.<node> and stores
// it on result.<job> (the job's one results subject; the step and node go
// in the body, taken from the report's subject) with a message id made of
// the subject's node, so no node can take another's id.
func (in *intake) onReport(m *nats.Msg) {
	node, ok := in.sender(m)
	if !ok {
		return
	}
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 4 {
		return
	}
	step, err := strconv.Atoi(parts[2])
	if !api.ValidToken(parts[1]) || err != nil || step < 0 || strconv.Itoa(step) != parts[2] {
		in.answer(m, fmt.Errorf("report subject %q: want report.<job>.<step>.<node>", m.Subject))
		return
	}
	job := parts[1]
	// Only results of jobs that exist are stored: a node cannot fill the
	// results stream (pushing out others' results) with reports of jobs
	// made up. (A job that ended still takes them: a task stopped by a
	// cancel or the job's timeout reports after the job ended, and its
	// report is the record of what it did.) A job this controller has not
	// seen yet (its index follows the bucket) is asked again by the agent.
	if _, known := in.c.jobIdx.statusOf(job); !known {
		in.answer(m, fmt.Errorf("job %s is not known here (yet)", job))
		return
	}
	var r api.TaskResult
	if err := json.Unmarshal(m.Data, &r); err != nil {
		in.answer(m, fmt.Errorf("malformed result: %w", err))
		return
	}
	if r.Status != api.StepSuccess && r.Status != api.StepFailed {
		in.answer(m, fmt.Errorf("a report carries a final result (success or failed), not %q", r.Status))
		return
	}
	if r.Attempt < 0 {
		in.answer(m, fmt.Errorf("attempt %d", r.Attempt))
		return
	}
	// The subject names the sender and the step; the body cannot say
	// otherwise.
	r.JobID, r.TaskIndex, r.NodeID = job, step, node
	capReport(&r)
	data, err := json.Marshal(&r)
	if err != nil {
		in.answer(m, err)
		return
	}
	id := job + "." + parts[2] + "." + node + "." + strconv.Itoa(r.Attempt)
	if m.Header.Get(api.ReportResendHdr) != "" {
		// Sent again for a repeated command: stored again, under an id of
		// the controller's making that still names the node.
		id = "resend." + id + "." + strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	out := &nats.Msg{Subject: api.ResultSubject(job), Data: data, Header: nats.Header{}}
	// The trace goes on, re-encoded from its parsed form.
	bus.InjectTrace(bus.ExtractTrace(context.Background(), m), out)
	in.store(m, out, jetstream.WithMsgID(id), jetstream.WithExpectStream(api.StreamResults))
}

// nodeRecord checks a node record sent by node and makes the one to store:
// its id is the sender's, its groups the enrollment's, no schemas, and a
// last_seen no later than now.
func (in *intake) nodeRecord(node string, n api.NodeInfo) ([]byte, error) {
	if n.ID != node {
		return nil, fmt.Errorf("node record of %q sent by node %s", n.ID, node)
	}
	if n.Status != api.NodeOnline && n.Status != api.NodeOffline {
		return nil, fmt.Errorf("node status %q: want %s or %s", n.Status, api.NodeOnline, api.NodeOffline)
	}
	// Free text a node reports about itself is printed on operators'
	// terminals and pages: control characters (ANSI escapes) are refused.
	for field, v := range map[string]string{"hostname": n.Hostname, "version": n.Version, "seal_key": n.SealKey,
		"schema_digest": n.SchemaDigest, "backends": strings.Join(n.Backends, ",")} {
		if api.HasControl(v) {
			return nil, fmt.Errorf("node record field %s holds control characters", field)
		}
	}
	if in.c.sec != nil {
		as, ok := in.c.sec.admitted(node)
		if !ok {
			return nil, errors.New("node not admitted")
		}
		n.Groups, n.Site = as.groups, as.site
	}
	if now := time.Now().UTC(); n.LastSeen.After(now) {
		n.LastSeen = now
	}
	n.Schemas = nil
	return json.Marshal(&n)
}

// putNode stores a node record; its put is also a core message on
// $KV.nodes.<id>, which every controller's registry hears.
func (in *intake) putNode(req *nats.Msg, node string, data []byte) {
	in.store(req, &nats.Msg{Subject: bus.KVSubject(api.BucketNodes, node), Data: data},
		jetstream.WithExpectStream(bus.KVStream(api.BucketNodes)))
}

// onHeartbeat takes a node record without schemas on node.heartbeat.<id>.
func (in *intake) onHeartbeat(m *nats.Msg) {
	node, ok := in.sender(m)
	if !ok {
		return
	}
	var n api.NodeInfo
	if err := json.Unmarshal(m.Data, &n); err != nil {
		in.answer(m, fmt.Errorf("malformed node record: %w", err))
		return
	}
	data, err := in.nodeRecord(node, n)
	if err != nil {
		in.answer(m, err)
		return
	}
	in.putNode(m, node, data)
}

// onRegister takes a NodeRegistration on node.register.<id>: the schema
// set is stored under the digest this controller computes, and only if it
// is the one the record names; then the record.
func (in *intake) onRegister(m *nats.Msg) {
	node, ok := in.sender(m)
	if !ok {
		return
	}
	var reg api.NodeRegistration
	if err := json.Unmarshal(m.Data, &reg); err != nil {
		in.answer(m, fmt.Errorf("malformed registration: %w", err))
		return
	}
	digest := api.SchemaDigestOf(reg.Schemas)
	if reg.Node.SchemaDigest != digest {
		in.answer(m, fmt.Errorf("schema digest %q is not the digest of the set sent (%s)", reg.Node.SchemaDigest, digest))
		return
	}
	var set []api.BackendSchema
	if err := json.Unmarshal(reg.Schemas, &set); err != nil {
		in.answer(m, fmt.Errorf("malformed schema set: %w", err))
		return
	}
	if len(set) == 0 {
		in.answer(m, errors.New("a node must offer at least one backend"))
		return
	}
	data, err := in.nodeRecord(node, reg.Node)
	if err != nil {
		in.answer(m, err)
		return
	}
	if err := in.storeSchemas(node, digest, reg.Schemas); err != nil {
		in.answer(m, err)
		return
	}
	in.putNode(m, node, data)
}

// storeSchemas makes sure the set is stored under its digest. A set is
// stored once; an entry under the digest that is not the set (left by an
// older version, when agents wrote the bucket) is replaced.
func (in *intake) storeSchemas(node, digest string, set []byte) error {
	if at, ok := in.stored.Load(digest); ok && time.Since(at.(time.Time)) < storedFor {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), intakeTimeout)
	defer cancel()
	e, err := in.schemasKV.Get(ctx, digest)
	if errors.Is(err, jetstream.ErrKeyNotFound) && !in.newSets.allow(node) {
		return fmt.Errorf("node %s registered more new schema sets than a node changes its set (%d at once, then one per %s); try again later",
			node, newSetBurst, newSetEvery)
	}
	switch {
	case err == nil && api.SchemaDigestOf(e.Value()) == digest:
	case err == nil:
		if _, err := in.schemasKV.Update(ctx, digest, set, e.Revision()); err != nil {
			return fmt.Errorf("store schemas %s: %w", digest, err)
		}
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if _, err := in.schemasKV.Create(ctx, digest, set); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("store schemas %s: %w", digest, err)
		}
	default:
		return fmt.Errorf("read schemas %s: %w", digest, err)
	}
	in.stored.Store(digest, time.Now())
	return nil
}
