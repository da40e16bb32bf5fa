package testport

import (
	"net"
	"strconv"
	"testing"
)

// Ports are free, below the ephemeral range, and never given twice.
func TestPortsAreFreeAndDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if p < low || p >= high || seen[p] {
			t.Fatalf("port %d: outside [%d, %d) or given twice", p, low, high)
		}
		seen[p] = true
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t))))
	if err != nil {
		t.Fatalf("a given port is not free: %v", err)
	}
	_ = ln.Close()
}
