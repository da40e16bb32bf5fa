package embedded

import (
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// A server that is never ready says which of its addresses another
// process holds.
func TestBindHintNamesTheHeldAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := ln.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	_ = free.Close()

	opts := &server.Options{Host: "127.0.0.1", Port: freePort, Cluster: server.ClusterOpts{Host: "127.0.0.1", Port: held}}
	if h := bindHint(opts); !strings.Contains(h, "cluster address") || !strings.Contains(h, "in use") {
		t.Fatalf("hint %q, want the cluster address named as in use", h)
	}
	opts.Cluster.Port = 0
	if h := bindHint(opts); h != "" {
		t.Fatalf("hint %q for free addresses", h)
	}
}
