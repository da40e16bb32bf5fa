// Package busperm holds what a NATS server of GRID lets an agent's
// connection do, and how it tells that the connection holds its key: one
// piece for the controllers' embedded servers and the sites' relays, so
// that an agent at a site has exactly the rights of one on the hub.
package busperm

import (
	"encoding/base64"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// ProvesKey reports whether the connection named an NKey user key in its
// CONNECT and signed the server's nonce with it.
func ProvesKey(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil || !nkeys.IsValidPublicUserKey(o.Nkey) {
		return false
	}
	pub, err := nkeys.FromPublicKey(o.Nkey)
	if err != nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(o.Sig)
	if err != nil {
		if sig, err = base64.StdEncoding.DecodeString(o.Sig); err != nil {
			return false
		}
	}
	return len(c.GetNonce()) > 0 && pub.Verify(c.GetNonce(), sig) == nil
}

// Agent is all an admitted agent may do: hear its own node's
// commands, its groups' and everyone's, and cancellations; send its own
// final results, progress, registration and heartbeats as core messages
// (a controller validates and stores them); read its own replies. No
// JetStream at all: no subject it may publish is captured by a stream or
// reaches the JetStream API, so no reply subject or header it chooses is
// ever acted on with the server's rights.
func Agent(e *api.Enrollment) *server.Permissions {
	id := e.NodeID
	sub := append(api.AgentCommandSubjects(id, e.Site, e.Groups), api.SubjectCancelAll, api.AgentInboxPrefix(e.PublicKey)+".>")
	pub := []string{
		api.NodeReportSubjects(id),
		api.NodeProgressSubjects(id),
		api.NodeRegisterSubject(id),
		api.NodeHeartbeatSubject(id),
		api.EnrollSubject(e.PublicKey),
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// Enrollee allows an unknown key only to ask to be enrolled.
func Enrollee(key string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{api.EnrollSubject(key)}},
		Subscribe: &server.SubjectPermission{Allow: []string{api.AgentInboxPrefix(key) + ".>"}},
	}
}
