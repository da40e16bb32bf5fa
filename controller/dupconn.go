package controller

import (
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// dupStaleAfter is how long the older of two connections of one key must
// have been silent to be taken for dead (a host that vanished without
// closing its TCP connection): an agent heartbeats every 10s by default
// and the client pings every 2 minutes, so a live one is never this quiet
// unless its heartbeat_interval is longer.
const dupStaleAfter = 3 * time.Minute

// liveConns remembers, per admitted key, the connection this server last
// let in (its client id and remote address), to refuse a second one. It is
// per server: a clone that connects to another server of a cluster is not
// seen here (the registry then hears two agents under one node id).
type liveConns struct {
	mu    sync.Mutex
	byKey map[string]liveConn
}

type liveConn struct {
	cid  uint64
	addr string
}

// admitOnce decides on an admitted key's real connection (not its
// enrollment connection). A key with a live connection on this server is
// refused a second one, logged at WARN with both addresses: the older one
// keeps running (it may be mid-task), and a clone that cannot connect
// fails at start, loudly, rather than both processes running every
// command. The older connection is closed instead only when it has been
// silent for dupStaleAfter. Called from Check, which the server runs
// without holding its own or the client's lock, so Connz is safe here.
func (s *security) admitOnce(c server.ClientAuthentication, key, node string) bool {
	addr := ""
	if a := c.RemoteAddress(); a != nil {
		addr = a.String()
	}
	// An agent that restarts closes its old connection just before it
	// opens the new one; give the server a moment to notice.
	for try := 0; ; try++ {
		ok, live := s.admitOnceTry(c.GetID(), key, node, addr, try == dupRetries)
		if ok || !live || try == dupRetries {
			return ok
		}
		time.Sleep(dupRetryWait)
	}
}

// How long a second connection waits for the first to go (in all) before
// it is refused.
const (
	dupRetries   = 6
	dupRetryWait = 50 * time.Millisecond
)

// admitOnceTry admits the connection unless another of the key is live
// (then live is true); last logs the refusal.
func (s *security) admitOnceTry(cid uint64, key, node, addr string, last bool) (ok, live bool) {
	ns := s.ns.Load()
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if s.live.byKey == nil {
		s.live.byKey = map[string]liveConn{}
	}
	if prev, found := s.live.byKey[key]; found && prev.cid != cid && ns != nil {
		cz, err := ns.Connz(&server.ConnzOptions{CID: prev.cid, State: server.ConnOpen})
		if err == nil && len(cz.Conns) == 1 && cz.Conns[0].Cid == prev.cid {
			idle := time.Since(cz.Conns[0].LastActivity)
			if idle < dupStaleAfter {
				if last {
					s.log.Warn("refused a second connection with a node's key while its first is live: "+
						"two processes share one identity (a cloned image or a copied agent.nk?); give each host its own key",
						"node", node, "key", key, "live_addr", prev.addr, "live_cid", prev.cid, "refused_addr", addr,
						"idle", idle.Round(time.Second))
				}
				return false, true
			}
			s.log.Warn("closing a silent connection of a node's key for its new one",
				"node", node, "key", key, "old_addr", prev.addr, "new_addr", addr, "idle", idle.Round(time.Second))
			_ = ns.DisconnectClientByID(prev.cid)
		}
	}
	s.live.byKey[key] = liveConn{cid: cid, addr: addr}
	return true, false
}

// forget drops the key's live connection if it is cid: this controller is
// closing it, so the agent's reconnect must not wait for it to go.
func (l *liveConns) forget(key string, cid uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.byKey[key]; ok && prev.cid == cid {
		delete(l.byKey, key)
	}
}
