// Package testport gives tests free loopback ports for servers whose
// address must be known before they start (a cluster's routes, a process's
// flags).
package testport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// The ports Addr picks from: below Linux's default ephemeral range
// (32768-60999).
const (
	low  = 20000
	high = 32000
)

// given are the ports handed out in this process.
var given struct {
	mu    sync.Mutex
	ports map[int]bool
}

// Addr is a free port of 127.0.0.1 as host:port. A port the kernel hands
// out for :0 lies in its ephemeral range, which it also hands to every
// outgoing connection: between that check and the server's bind, any
// client on the machine (a busy CI runs hundreds) may take it, and the
// server then fails to start. Ports below that range are never handed out
// on their own, and none is given twice in one process.
func Addr(t testing.TB) string {
	t.Helper()
	given.mu.Lock()
	defer given.mu.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	for range 1000 {
		port := low + rand.IntN(high-low)
		if given.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		given.ports[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}

// Port is Addr's port.
func Port(t testing.TB) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(Addr(t))
	n, _ := strconv.Atoi(p)
	return n
}
