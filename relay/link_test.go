package relay_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/relay"
)

// forwarder passes TCP connections on to a target until closed, as a
// proxy or a NAT between a site and the hub would.
type forwarder struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func forward(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) url() string { return "tls://" + f.ln.Addr().String() }

// close stops accepting and drops every connection.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.ln.Close()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

// The relay links only through the hub URLs it was given: the addresses
// the hub's servers advertise for themselves (their leaf ports as they
// see them) may not be reachable from the site, or may bypass the way the
// operator chose (a proxy, a NAT), so they are not tried.
func TestRelayLinksOnlyThroughTheHubURLsItWasGiven(t *testing.T) {
	p := newPKI(t)
	h := startHub(t, p)
	fw := forward(t, h.leafURL()[len("tls://"):])
	cfg := relay.DefaultConfig()
	cfg.Credential = credential(t, p, fw.url())
	cfg.Listen = "127.0.0.1:0"
	r := startRelayConfig(t, cfg)
	waitLinked(t, r)
	lz, err := h.ns.Leafz(nil)
	if err != nil || len(lz.Leafs) != 1 {
		t.Fatalf("the hub's leaf connections: %+v, %v", lz, err)
	}
	first := lz.Leafs[0].ID
	// The way to the hub closes; the hub itself is still there.
	fw.close()
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		lz, err := h.ns.Leafz(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lz.Leafs {
			if l.ID != first {
				t.Fatalf("the relay linked to the hub again, from %s:%d, by an address it was not given", l.IP, l.Port)
			}
		}
	}
}
