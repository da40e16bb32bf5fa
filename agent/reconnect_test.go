package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
)

// TestReregistersAfterServerLosesState replaces the controller and its
// server with new ones, with no state, on the same port: after
// reconnecting, the agent must register its schemas and NodeInfo again
// and still hear commands.
func TestReregistersAfterServerLosesState(t *testing.T) {
	t.Parallel()
	first := startControllerFor(t, "127.0.0.1:0")
	url := first.NATSURL()
	port := strings.TrimPrefix(url, "nats://127.0.0.1:")

	a, err := New(Config{Name: "phoenix", NATSURLs: []string{url}, HeartbeatInterval: Duration(100 * time.Millisecond),
		ShutdownGrace: Duration(time.Second), Registry: testRegistry(t, &probe{}), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first.stop()
	second := startControllerFor(t, "127.0.0.1:"+port)
	t.Cleanup(func() {
		stop()
		select {
		case <-a.Done():
		case <-time.After(15 * time.Second):
			t.Error("agent did not stop")
		}
		second.stop()
	})

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	get := func(bucket, key string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		return e.Value(), nil
	}
	eventually(t, 8*time.Second, "node and schemas registered again on the new server", func() bool {
		_, nerr := get(api.BucketNodes, "phoenix")
		_, serr := get(api.BucketSchemas, a.Info().SchemaDigest)
		return nerr == nil && serr == nil
	})

	// The subscriptions came back with the connection.
	sub, err := nc.SubscribeSync(api.ResultSubject("after"))
	if err != nil {
		t.Fatal(err)
	}
	storeJob(t, js, "after")
	cmd := echo("after")
	data, _ := json.Marshal(cmd)
	if err := nc.Publish(api.NodeCommandSubject("phoenix", "ping", "echo"), data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no final result after the reconnect: %v", err)
		}
		if strings.Contains(string(m.Data), `"status":"success"`) {
			break
		}
	}
}

func TestStartFailsWithoutController(t *testing.T) {
	t.Parallel()
	// A server without a controller: nobody answers the registration.
	srv, err := embedded.StartServer(context.Background(), embedded.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	a, err := New(Config{Name: "lonely", NATSURLs: []string{srv.ClientURL()}, Registry: testRegistry(t, &probe{}), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err = a.Start(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "controller") {
		t.Errorf("Start = %v, want a deadline error that mentions the controller", err)
	}
	select {
	case <-a.Done():
	case <-time.After(time.Second):
		t.Error("Done not closed after a failed Start")
	}
	if err := a.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
}

// stoppable is a controller a test stops when it chooses.
type stoppable struct {
	t      testing.TB
	url    string
	cancel context.CancelFunc
	done   <-chan struct{}
}

func (s *stoppable) NATSURL() string { return s.url }

func (s *stoppable) stop() {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.t.Errorf("controller did not stop within 20s")
	}
}

// startControllerFor starts an insecure controller with its embedded NATS
// on natsAddr, stopped by stop (or at the end of the test).
func startControllerFor(t testing.TB, natsAddr string) *stoppable {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATSAddr = natsAddr
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Insecure = true
	cfg.Logger = testLogger().With("test", t.Name(), "component", "controller")
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ctl.Start(ctx); err != nil {
		cancel()
		t.Fatalf("start controller: %v", err)
	}
	s := &stoppable{t: t, url: ctl.NATSURL(), cancel: cancel, done: ctl.Done()}
	t.Cleanup(s.stop)
	return s
}
