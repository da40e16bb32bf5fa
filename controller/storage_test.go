package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// startSized starts a controller on dataDir with its config adjusted by
// adjust, and returns it with a JetStream connection of the test's own.
func startSized(t *testing.T, dataDir, natsAddr string, adjust func(*controller.Config)) (*controller.Controller, *nats.Conn, jetstream.JetStream, context.CancelFunc) {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = dataDir, natsAddr, "127.0.0.1:0"
	cfg.FlushInterval = config.Duration(20 * time.Millisecond)
	adjust(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.NATSURL(), c.NATSOptions()...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc, js, func() { nc.Close(); cancel(); <-c.Done() }
}

// checkLimits compares every stream's and bucket's caps with want.
func checkLimits(t *testing.T, js jetstream.JetStream, want map[string]bus.Limit) {
	t.Helper()
	streams, buckets := bus.DefaultTopology().Names()
	names := map[string]string{}
	for _, s := range streams {
		names[s] = s
	}
	for _, b := range buckets {
		names[b] = bus.KVStream(b)
	}
	if len(names) != len(want) {
		t.Errorf("%d streams and buckets, %d limits", len(names), len(want))
	}
	for name, stream := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, stream)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		cfg := s.CachedInfo().Config
		w, ok := want[name]
		if !ok || w.MaxBytes <= 0 || w.MaxMsgSize <= 0 {
			t.Errorf("%s: no limit %+v", name, w)
			continue
		}
		if cfg.MaxBytes != w.MaxBytes || cfg.MaxMsgSize != w.MaxMsgSize {
			t.Errorf("%s: max_bytes %d max_msg_size %d, want %d and %d", stream, cfg.MaxBytes, cfg.MaxMsgSize, w.MaxBytes, w.MaxMsgSize)
		}
	}
}

// TestStreamsAndBucketsBounded: after start every stream and bucket has the
// configured cap and per-message cap; a restart with raised caps raises
// them; a message over a per-message cap is refused.
func TestStreamsAndBucketsBounded(t *testing.T) {
	dataDir, natsAddr := t.TempDir(), freeAddr(t)
	sizes := func(requests, commands, results, dlq, jobs, small controller.ByteSize) func(*controller.Config) {
		return func(c *controller.Config) {
			c.RequestsMaxBytes, c.CommandsMaxBytes, c.ResultsMaxBytes = requests, commands, results
			c.DLQMaxBytes, c.JobsMaxBytes, c.SmallBucketsMaxBytes = dlq, jobs, small
		}
	}
	const mib = 1 << 20
	_, nc, js, stop := startSized(t, dataDir, natsAddr, sizes(20*mib, 24*mib, 28*mib, 12*mib, 32*mib, 0))
	mp := nc.MaxPayload()
	// small_buckets_max_bytes 0: a sixteenth of jobs_max_bytes, at least 64 MiB.
	checkLimits(t, js, bus.Limits(mp, 20*mib, 24*mib, 28*mib, 12*mib, 32*mib, 64*mib))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A schema set, a node record and a result over their caps are refused.
	schemas, err := js.KeyValue(ctx, api.BucketSchemas)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.Put(ctx, "too-big", make([]byte, bus.SchemaMaxMsgSize+1)); !tooLarge(err) {
		t.Errorf("a schema set over %d bytes: %v, want refused", bus.SchemaMaxMsgSize, err)
	}
	if _, err := schemas.Put(ctx, "fits", make([]byte, 20<<10)); err != nil {
		t.Errorf("a schema set of 20 KiB: %v", err)
	}
	nodes, err := js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Put(ctx, "node-x", make([]byte, bus.NodeMaxMsgSize+1)); !tooLarge(err) {
		t.Errorf("a node record over %d bytes: %v, want refused", bus.NodeMaxMsgSize, err)
	}
	if _, err := js.Publish(ctx, "result.job-x.0.node-x", make([]byte, bus.ResultMaxMsgSize+1)); !tooLarge(err) {
		t.Errorf("a result over %d bytes: %v, want refused", bus.ResultMaxMsgSize, err)
	}
	stop()

	// Restarted with raised caps, the existing streams and buckets are raised.
	_, _, js, stop = startSized(t, dataDir, natsAddr, sizes(40*mib, 48*mib, 56*mib, 24*mib, 2048*mib, 96*mib))
	defer stop()
	checkLimits(t, js, bus.Limits(mp, 40*mib, 48*mib, 56*mib, 24*mib, 2048*mib, 96*mib))
}

// tooLarge reports JetStream's refusal of a message over the stream's
// per-message cap.
func tooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// TestFullJobsBucketAnswers507: with the jobs bucket filled near its cap
// by waiting jobs, a new submission is refused with 507 naming
// jobs_max_bytes, and a job that was running meanwhile still completes,
// its entry growing with a large result after the bucket filled.
func TestFullJobsBucketAnswers507(t *testing.T) {
	const jobsMax = 16 << 20
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) {
		c.JobsMaxBytes = jobsMax
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := f.Client()
	big := strings.Repeat("x", 60<<10) // under the agent's max_output_bytes
	running, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
		{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}},
		{Backend: "ping", Action: "echo", Params: api.Params{"message": big}},
	}})
	if err != nil {
		t.Fatal(err)
	}

	// Fill the bucket with jobs of about 700 KiB that wait an hour.
	filler := strings.Repeat("f", 700<<10)
	accepted := 0
	var full error
	for i := range 40 {
		_, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, NotBefore: "1h", Tasks: []api.Phase{
			{Backend: "ping", Action: "echo", Params: api.Params{"message": fmt.Sprintf("%d %s", i, filler)}},
		}})
		if err != nil {
			full = err
			break
		}
		accepted++
	}
	if full == nil {
		t.Fatalf("%d jobs of 700 KiB fit in a jobs bucket of %d bytes", accepted, jobsMax)
	}
	if !api.IsStatus(full, 507) || !strings.Contains(full.Error(), "jobs_max_bytes") {
		t.Fatalf("after %d jobs: %v, want a 507 naming jobs_max_bytes", accepted, full)
	}
	if accepted < 15 {
		t.Errorf("only %d jobs of 700 KiB were accepted before the 507", accepted)
	}
	kv := fleettest.Bucket(t, ctx, f, api.BucketJobs)
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Bytes(); used < jobsMax*3/4 || used > jobsMax {
		t.Errorf("the jobs bucket holds %d bytes, want near its cap of %d", used, jobsMax)
	}

	// The running job's results still land: it completes with its large
	// output.
	j, err := cl.WaitJob(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != api.JobCompleted {
		t.Fatalf("running job %s: %s", j.Status, j.Error)
	}
	if out := j.Results.Node(1, "node-1").Output; len(out) < len(big) {
		t.Errorf("the running job's last output has %d bytes, want %d", len(out), len(big))
	}
	if _, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
		{Backend: "ping", Action: "echo", Params: api.Params{"message": filler}},
	}}); !api.IsStatus(err, 507) {
		t.Errorf("another job of 700 KiB with the bucket full: %v, want 507", err)
	}
}
