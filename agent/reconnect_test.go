package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
)

// TestReregistersAfterServerLosesState replaces the server with an empty one
// on the same port: after reconnecting, the agent must put its schemas and
// NodeInfo back and still hear commands.
func TestReregistersAfterServerLosesState(t *testing.T) {
	t.Parallel()
	start := func(port int) *server.Server {
		t.Helper()
		srv, err := embedded.StartServer(context.Background(), embedded.ServerConfig{Port: port, DataDir: t.TempDir()})
		if err != nil {
			t.Fatalf("start NATS: %v", err)
		}
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := bus.EnsureTopology(ctx, js, bus.DefaultTopology()); err != nil {
			t.Fatalf("topology: %v", err)
		}
		return srv
	}
	first := start(-1)
	port := first.Addr().(*net.TCPAddr).Port
	url := first.ClientURL()

	a, err := New(Config{Name: "phoenix", NATSURLs: []string{url}, HeartbeatInterval: Duration(100 * time.Millisecond),
		ShutdownGrace: Duration(time.Second), Registry: testRegistry(t, &probe{}), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	first.WaitForShutdown()
	second := start(port)
	t.Cleanup(func() {
		stop()
		select {
		case <-a.Done():
		case <-time.After(15 * time.Second):
			t.Error("agent did not stop")
		}
		second.Shutdown()
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
	sub, err := nc.SubscribeSync(api.ResultSubject("after", 0, "phoenix"))
	if err != nil {
		t.Fatal(err)
	}
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
	// A server without the topology: no controller ever created the buckets.
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
