package relay

import (
	"net"
	"sync"

	"golang.org/x/time/rate"
)

// Strangers' budget per host. Keys cost nothing to make, hosts do: one
// host flooding over many fresh keys would otherwise spend the whole
// strangers' budget and keep every new agent of the site from enrolling.
// So each host's strangers get a share of their own first; the shared
// budget still bounds what crosses the link.
const (
	// A host enrolls its agent (a few, at most) asking every 2s.
	enrollHostRate  = rate.Limit(2)
	enrollHostBurst = 10
	// sourcesTracked bounds the keys and hosts remembered.
	sourcesTracked = 10000
)

// sources remembers from which host each stranger key connected (the
// relay's auth sees the address, the enrollment proxy only the key) and
// keeps a limiter per host.
type sources struct {
	mu sync.Mutex
	// byKey is in two generations: when cur is full it becomes prev, so
	// a flood of keys forgets the oldest ones, never the recent ones.
	cur, prev map[string]string
	hosts     map[string]*rate.Limiter
}

// host is the part of an address that costs an attacker something: the
// IPv4 address, or the /64 of an IPv6 one (a host may pick any address
// of its /64).
func host(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP == nil {
		return ""
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return tcp.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// note records that key connected from addr.
func (s *sources) note(key string, addr net.Addr) {
	h := host(addr)
	if h == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || len(s.cur) >= sourcesTracked {
		s.prev, s.cur = s.cur, map[string]string{}
	}
	s.cur[key] = h
}

// allow spends from the host's share the key's request; a key whose host
// is not known has the shared budget alone.
func (s *sources) allow(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.cur[key]
	if !ok {
		if h, ok = s.prev[key]; !ok {
			return true
		}
	}
	lim := s.hosts[h]
	if lim == nil {
		if s.hosts == nil || len(s.hosts) >= sourcesTracked {
			s.hosts = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(enrollHostRate, enrollHostBurst)
		s.hosts[h] = lim
	}
	return lim.Allow()
}
