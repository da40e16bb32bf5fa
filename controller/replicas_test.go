package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// clusterMember is one controller of an in-process cluster: its fixed
// addresses and data dir survive a restart.
type clusterMember struct {
	cfg  controller.Config
	ctl  *controller.Controller
	stop context.CancelFunc
	logs *syncBuffer
}

// clusterConfigs returns the configs of n controllers whose embedded
// servers form one NATS cluster, each routing to the others, with replicas
// as given (0: unset).
func clusterConfigs(t *testing.T, n, replicas int) []controller.Config {
	t.Helper()
	dir := t.TempDir()
	cfgs := make([]controller.Config, n)
	for i := range cfgs {
		cfg := controller.DefaultConfig()
		cfg.Name = fmt.Sprintf("c%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.Name)
		cfg.APIAddr, cfg.NATSAddr, cfg.ClusterAddr = "127.0.0.1:0", freeAddr(t), freeAddr(t)
		cfg.ClusterName = "ha"
		// Replication is under test here, not the bus's security (the
		// security tests run a secured cluster); insecure keeps the test
		// free of a shared CA.
		cfg.Insecure = true
		cfg.Replicas = replicas
		cfg.HeartbeatInterval = config.Duration(200 * time.Millisecond)
		cfgs[i] = cfg
	}
	for i := range cfgs {
		for j := range cfgs {
			if i != j {
				cfgs[i].Routes = append(cfgs[i].Routes, "nats://"+cfgs[j].ClusterAddr)
			}
		}
	}
	return cfgs
}

// start starts the controller with a fresh log buffer; it stops when the
// test ends unless stopped before.
func (m *clusterMember) start(t *testing.T) error {
	m.logs = &syncBuffer{}
	cfg := m.cfg
	cfg.Logger = slog.New(slog.NewJSONHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := controller.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		stop()
		return err
	}
	m.ctl, m.stop = c, stop
	t.Cleanup(m.halt)
	return nil
}

// halt stops the controller and its embedded server and waits for both.
func (m *clusterMember) halt() {
	if m.stop != nil {
		m.stop()
		<-m.ctl.Done()
		m.stop = nil
	}
}

// startCluster starts the members at once: each waits in Start for enough
// of the others to elect JetStream's leaders.
func startCluster(t *testing.T, members []*clusterMember) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for i, m := range members {
		wg.Go(func() { errs[i] = m.start(t) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", members[i].cfg.Name, err)
		}
	}
}

// allStreams are the streams behind GRID's streams and buckets.
var allStreams = func() []string {
	streams, buckets := bus.DefaultTopology().Names()
	for _, b := range buckets {
		streams = append(streams, bus.KVStream(b))
	}
	return streams
}()

// streamReplicas reads each stream's configured replicas through url.
func streamReplicas(t *testing.T, url string) map[string]int {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, name := range allStreams {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, name)
		cancel()
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().Config.Replicas
	}
	return out
}

// logged reports whether a log line at level has a message containing msg.
func logged(logs *syncBuffer, level, msg string) bool {
	for _, l := range logs.lines() {
		if l["level"] == level && strings.Contains(fmt.Sprint(l["msg"]), msg) {
			return true
		}
	}
	return false
}

// A cluster of three whose controllers say replicas: 1 warns at every
// start; a controller restarted with replicas unset chooses 3 from its
// routes and raises every stream and bucket to it, and /status and the
// metrics show three current replicas and a leader for each.
func TestClusterReplicasDefaultRaisesAndWarns(t *testing.T) {
	runsInChaos(t)
	cfgs := clusterConfigs(t, 3, 1)
	members := make([]*clusterMember, len(cfgs))
	for i, cfg := range cfgs {
		members[i] = &clusterMember{cfg: cfg}
	}
	startCluster(t, members)
	const warning = "replicas is 1 in a cluster"
	for _, m := range members {
		if !logged(m.logs, "WARN", warning) {
			t.Errorf("%s: no warning %q for an explicit replicas: 1 in a cluster", m.cfg.Name, warning)
		}
	}
	for name, n := range streamReplicas(t, members[1].ctl.NATSURL()) {
		if n != 1 {
			t.Fatalf("stream %s has %d replicas with replicas: 1", name, n)
		}
	}

	// c1 comes back without replicas in its config.
	first := members[0]
	first.halt()
	first.cfg.Replicas = 0
	if err := first.start(t); err != nil {
		t.Fatalf("restart c1 with replicas unset: %v", err)
	}
	if logged(first.logs, "WARN", warning) {
		t.Error("warned about replicas 1 with replicas unset")
	}
	if !logged(first.logs, "INFO", "chosen from the cluster's size") {
		t.Error("no log of the replicas chosen from the cluster's size")
	}
	for name, n := range streamReplicas(t, first.ctl.NATSURL()) {
		if n != 3 {
			t.Errorf("stream %s has %d replicas after a start with replicas unset in a cluster of three, want 3", name, n)
		}
	}
	if !logged(first.logs, "INFO", "raised replicas") {
		t.Error("no log of the raised replicas")
	}

	cl, err := api.NewClient(first.ctl.APIClientConfig(first.ctl.AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	var st *api.Status
	defer func() {
		if t.Failed() {
			t.Logf("last /status: %+v (err %v)", st, err)
		}
	}()
	// Every stream has 3 replicas and a leader, and a quorum of them is
	// current. The replicas just added to the controllers bucket, which
	// three controllers write five times a second each here, can stay
	// pending for longer than this test waits, so that bucket is held to
	// its count and leader only.
	waitFor(t, 30*time.Second, "every stream with 3 replicas, a leader and a current quorum in /status", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err = cl.Status(ctx)
		if err != nil || len(st.Streams) != len(allStreams) {
			return false
		}
		for _, h := range st.Streams {
			if h.Error != "" || !h.HasLeader || h.Replicas != 3 || h.Leader == "" {
				return false
			}
			if h.Name != api.BucketControllers && h.Current < 2 {
				return false
			}
		}
		return true
	})
	if st.Replicas != 3 {
		t.Errorf("status replicas %d, want 3", st.Replicas)
	}
	reg := first.ctl.Registry()
	for _, s := range allStreams {
		labels := map[string]string{"stream": s}
		if m := metric(t, reg, "grid_jetstream_stream_replicas", labels); m == nil || m.GetGauge().GetValue() != 3 {
			t.Errorf("grid_jetstream_stream_replicas{stream=%q} = %v, want 3", s, m)
		}
		if m := metric(t, reg, "grid_jetstream_stream_current_replicas", labels); m == nil || (s != bus.KVStream(api.BucketControllers) && m.GetGauge().GetValue() < 2) {
			t.Errorf("grid_jetstream_stream_current_replicas{stream=%q} = %v, want at least 2", s, m)
		}
		if m := metric(t, reg, "grid_jetstream_stream_leaderless", labels); m == nil || m.GetGauge().GetValue() != 0 {
			t.Errorf("grid_jetstream_stream_leaderless{stream=%q} = %v, want 0", s, m)
		}
	}
	scrape(t, httpFor(t, first.ctl), first.ctl.APIURL(), first.ctl.AdminToken())

	// A chosen count never lowers: c2 back with a route to c1 only (c3
	// routes to it) chooses 2 and leaves the streams at 3.
	second := members[1]
	second.halt()
	second.cfg.Replicas, second.cfg.Routes = 0, second.cfg.Routes[:1]
	if err := second.start(t); err != nil {
		t.Fatalf("restart c2 with one route: %v", err)
	}
	for name, n := range streamReplicas(t, second.ctl.NATSURL()) {
		if n != 3 {
			t.Errorf("stream %s lowered to %d replicas by a count chosen from fewer routes", name, n)
		}
	}

	// One server lost: every stream keeps a leader and shows the missing
	// replica, and /readyz stays ready while saying so.
	members[2].halt()
	waitFor(t, 30*time.Second, "streams with 2 of 3 current replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err = cl.Status(ctx)
		if err != nil {
			return false
		}
		for _, h := range st.Streams {
			// The controllers bucket may still have a replica catching up
			// (above); it must show the loss all the same.
			if !h.HasLeader || h.Replicas != 3 || h.Current > 2 || (h.Name != api.BucketControllers && h.Current != 2) {
				return false
			}
		}
		return true
	})
	if m := metric(t, reg, "grid_jetstream_stream_current_replicas", map[string]string{"stream": bus.KVStream(api.BucketJobs)}); m == nil || m.GetGauge().GetValue() != 2 {
		t.Errorf("grid_jetstream_stream_current_replicas{stream=KV_jobs} = %v with one server down, want 2", m)
	}
	if code := getStatus(t, httpFor(t, first.ctl), first.ctl.APIURL()+"/readyz"); code != 200 {
		t.Errorf("readyz with one of three servers down: %d, want 200", code)
	}
}
