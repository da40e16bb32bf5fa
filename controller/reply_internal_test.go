package controller

import (
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// A request is answered only in its sender's own inbox: _INBOX.<key>. for
// a key, _INBOX. without keys (insecure); anything else is counted.
func TestRepliesOnlyToOwnInbox(t *testing.T) {
	const key = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	own := api.AgentInboxPrefix(key) + ".abc.1"
	cases := []struct {
		key, reply string
		ok         bool
	}{
		{key, own, true},
		{key, "", false},
		{key, api.AgentInboxPrefix(key), false},
		{key, api.AgentInboxPrefix(key) + ".", false},
		{key, api.AgentInboxPrefix(key) + "X.1", false},
		{key, api.AgentInboxPrefix("UOTHER") + ".1", false},
		{key, "_INBOX.abc.1", false},
		{key, "$KV.tokens.x", false},
		{key, "$JS.API.STREAM.DELETE.results", false},
		{key, "cancel.job-1", false},
		{"", "_INBOX.abc.1", true},
		{"", own, true},
		{"", "$KV.jobs.x", false},
		{"", "request.1.x", false},
		{"", "_INBOX.", false},
	}
	rp := &replies{log: slog.New(slog.DiscardHandler)}
	refused := 0
	for _, c := range cases {
		if got := rp.ownInbox(&nats.Msg{Subject: "node.heartbeat.n1", Reply: c.reply}, c.key); got != c.ok {
			t.Errorf("ownInbox(reply %q, key %q) = %v, want %v", c.reply, c.key, got, c.ok)
		}
		if !c.ok {
			refused++
		}
	}
	if got := rp.refused.Load(); got != int64(refused) {
		t.Errorf("refused %d, want %d", got, refused)
	}
}
