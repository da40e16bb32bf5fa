package relay

import (
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/busperm"
)

// auth decides on every connection to the relay's server
// (server.Authentication): the relay's own in-process client may do
// anything locally; an agent that proves its NKey gets exactly what a
// controller would give it (busperm), from the site's roster; anything
// else is refused. Whatever an agent is allowed here is what can reach the
// leaf connection, and so the hub: the relay's server is the only place
// that knows which agent sent a message.
type auth struct {
	log    *slog.Logger
	roster *roster
	// selfKey is the public NKey of the relay's own client, made in memory
	// at start: it is nowhere on disk for an agent to find.
	selfKey string

	ns   atomic.Pointer[server.Server]
	live liveConns
	// cut holds the keys refused for flooding the enrollment proxy, until
	// when.
	cut struct {
		mu    sync.Mutex
		until map[string]time.Time
	}
	// sources learns the hosts of the keys given the enrollment rights,
	// for the enrollment proxy's per-host budget.
	sources *sources
}

// Check implements server.Authentication.
func (a *auth) Check(c server.ClientAuthentication) bool {
	// Agents are clients. Leaf and route connections are never accepted
	// (the server listens for neither, and a relay joins no cluster).
	if c.Kind() != server.CLIENT {
		return false
	}
	if !busperm.ProvesKey(c) {
		return false
	}
	key := c.GetOpts().Nkey
	if key == a.selfKey {
		// The key alone is not enough: only a connection inside this
		// process is the relay's own.
		if !inProcess(c) {
			a.log.Warn("refused a network connection with the relay's own key", "addr", remoteAddr(c))
			return false
		}
		c.RegisterUser(&server.User{Username: "relay"})
		return true
	}
	if a.isCut(key) {
		if _, ok := a.roster.admitted(key); !ok {
			return false
		}
	}
	// The agent's enrollment connection only ever asks to be enrolled; it
	// gets that alone, whatever its key's enrollment says, so that sparing
	// it from the duplicate check gives a name nothing.
	if strings.HasPrefix(c.GetOpts().Name, api.EnrollConnName) {
		a.noteSource(key, c)
		c.RegisterUser(&server.User{Username: "enrolling", Permissions: busperm.Enrollee(key)})
		return true
	}
	if e, ok := a.roster.admitted(key); ok {
		if !a.admitOnce(c, key, e.NodeID) {
			return false
		}
		c.RegisterUser(&server.User{Username: "node:" + e.NodeID, Permissions: busperm.Agent(&e)})
		return true
	}
	// Unknown, pending or revoked: only the enrollment request, whose
	// answer (from the hub) tells the agent where it stands.
	a.noteSource(key, c)
	c.RegisterUser(&server.User{Username: "enrolling", Permissions: busperm.Enrollee(key)})
	return true
}

func (a *auth) noteSource(key string, c server.ClientAuthentication) {
	if a.sources != nil {
		a.sources.note(key, c.RemoteAddress())
	}
}

// inProcess reports whether the connection was made inside this process
// (nats.InProcessServer): its remote address is a pipe's.
func inProcess(c server.ClientAuthentication) bool {
	a := c.RemoteAddress()
	return a != nil && a.Network() == "pipe"
}

func remoteAddr(c server.ClientAuthentication) string {
	if a := c.RemoteAddress(); a != nil {
		return a.String()
	}
	return ""
}

// Second connections of one key. Two live connections of one admitted key
// are two processes sharing one identity (a cloned image, a copied
// agent.nk): both would run every command of the node. The one connected
// first keeps running; the second is refused, unless the first has been
// silent long enough to be a host that vanished without closing it.
const (
	// dupStaleAfter: an agent heartbeats every 10s by default and its
	// client pings every 2 minutes; a live one is never this quiet.
	dupStaleAfter = 3 * time.Minute
	// An agent that restarts closes its old connection just before it
	// opens the new one: the second waits this long in all for the first
	// to go.
	dupRetries   = 6
	dupRetryWait = 50 * time.Millisecond
)

// liveConns is, per admitted key, the client id of the connection last
// let in.
type liveConns struct {
	mu    sync.Mutex
	byKey map[string]uint64
}

// admitOnce decides on an admitted key's connection. Check runs without
// the server's or the client's lock held, so asking the server about its
// connections here is safe.
func (a *auth) admitOnce(c server.ClientAuthentication, key, node string) bool {
	for try := 0; ; try++ {
		if a.admitOnceTry(c.GetID(), key) {
			return true
		}
		if try == dupRetries {
			a.log.Warn("refused a second connection with a node's key while its first is live: "+
				"two processes share one identity (a cloned image or a copied agent.nk?); give each host its own key",
				"node", node, "key", key, "refused_addr", remoteAddr(c))
			return false
		}
		time.Sleep(dupRetryWait)
	}
}

func (a *auth) admitOnceTry(cid uint64, key string) bool {
	a.live.mu.Lock()
	defer a.live.mu.Unlock()
	if a.live.byKey == nil {
		a.live.byKey = map[string]uint64{}
	}
	if prev, ok := a.live.byKey[key]; ok && prev != cid {
		if ns := a.ns.Load(); ns != nil {
			cz, err := ns.Connz(&server.ConnzOptions{CID: prev, State: server.ConnOpen})
			if err == nil && len(cz.Conns) == 1 && cz.Conns[0].Cid == prev {
				if time.Since(cz.Conns[0].LastActivity) < dupStaleAfter {
					return false
				}
				a.log.Warn("closing a silent connection of a node's key for its new one", "key", key, "cid", prev)
				_ = ns.DisconnectClientByID(prev)
			}
		}
	}
	a.live.byKey[key] = cid
	return true
}

// forget drops the key's live connection if it is cid.
func (l *liveConns) forget(key string, cid uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.byKey[key]; ok && prev == cid {
		delete(l.byKey, key)
	}
}

// disconnect closes the connections of a key whose rights changed; the
// agent reconnects and gets what the roster now says.
func (a *auth) disconnect(ch keyChange) {
	ns := a.ns.Load()
	if ns == nil {
		return
	}
	cz, err := ns.Connz(&server.ConnzOptions{User: ch.key, Username: true, Limit: 1 << 20})
	if err != nil {
		a.log.Warn("list connections to close", "key", ch.key, "err", err)
		return
	}
	for _, ci := range cz.Conns {
		if ch.keepEnrolling && strings.HasPrefix(ci.Name, api.EnrollConnName) {
			continue
		}
		a.live.forget(ch.key, ci.Cid)
		if err := ns.DisconnectClientByID(ci.Cid); err == nil {
			a.log.Info("closed an agent connection whose rights changed with the roster", "key", ch.key, "cid", ci.Cid)
		}
	}
}

// cutOff closes the connections of a key that floods the enrollment proxy
// and refuses it for floodWindow, unless it is admitted: an admitted
// agent's questions pile up while it is disconnected, and it is never cut
// off for asking too often (as on a controller).
func (a *auth) cutOff(key string) {
	if _, ok := a.roster.admitted(key); ok {
		return
	}
	a.cut.mu.Lock()
	if a.cut.until == nil || len(a.cut.until) >= enrollKeysTracked {
		now := time.Now()
		if a.cut.until == nil {
			a.cut.until = map[string]time.Time{}
		}
		maps.DeleteFunc(a.cut.until, func(_ string, t time.Time) bool { return now.After(t) })
		if len(a.cut.until) >= enrollKeysTracked {
			clear(a.cut.until)
		}
	}
	a.cut.until[key] = time.Now().Add(floodWindow)
	a.cut.mu.Unlock()
	a.log.Warn("closed the connections of a key flooding the enrollment proxy; refusing it for a while", "key", key, "for", floodWindow)
	a.disconnect(keyChange{key: key})
}

func (a *auth) isCut(key string) bool {
	a.cut.mu.Lock()
	defer a.cut.mu.Unlock()
	t, ok := a.cut.until[key]
	return ok && time.Now().Before(t)
}
