package controller

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// replyLogEvery bounds the log lines about refused reply subjects.
const replyLogEvery = 10 * time.Second

// replies answers a request only in its sender's own inbox. A reply
// subject names where the answerer writes, with the answerer's rights
// (NATS checks the right to publish, not the right to name a reply), so
// a controller that answered anywhere would write, as a controller, where
// the sender chose: an API token, a job, a cancel. Every request handler
// of a controller answers through reply.
type replies struct {
	log *slog.Logger
	// refused counts the requests dropped for their reply subject;
	// lastLog is when one was last logged (unix nanoseconds).
	refused atomic.Int64
	lastLog atomic.Int64
}

// inboxOf is the reply prefix of the holder of key: its own inbox, which
// only it may subscribe to. Without a key (insecure, or an external NATS
// whose deployment authenticates) it is the default inbox prefix.
func inboxOf(key string) string {
	if key == "" {
		return nats.InboxPrefix
	}
	return api.AgentInboxPrefix(key) + "."
}

// ownInbox reports whether m's reply subject lies in the inbox of key
// ("" when there are no keys); otherwise it counts and (at a bounded rate)
// logs the refusal.
func (rp *replies) ownInbox(m *nats.Msg, key string) bool {
	return rp.under(m, inboxOf(key))
}

// under reports whether m's reply subject lies under the prefix want (a
// literal subject, longer than want); otherwise it counts and (at a
// bounded rate) logs the refusal.
func (rp *replies) under(m *nats.Msg, want string) bool {
	if len(m.Reply) > len(want) && strings.HasPrefix(m.Reply, want) && !strings.ContainsAny(m.Reply, "*> \t") {
		return true
	}
	n := rp.refused.Add(1)
	now := time.Now().UnixNano()
	if last := rp.lastLog.Load(); now-last >= int64(replyLogEvery) && rp.lastLog.CompareAndSwap(last, now) {
		rp.log.Warn("dropped a request whose reply subject is not its sender's own inbox",
			"subject", m.Subject, "reply", m.Reply, "refused_total", n)
	}
	return false
}

// respond answers m with data if its reply subject is the own inbox of
// key; it reports whether it did.
func (rp *replies) respond(m *nats.Msg, key string, data []byte) bool {
	if !rp.ownInbox(m, key) {
		return false
	}
	_ = m.Respond(data)
	return true
}
