package controller

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/busperm"
)

// No subject an agent or a stranger may publish is stored by a stream or
// reaches the JetStream API, so no reply subject or header they choose is
// ever acted on by the JetStream server with its rights: only controllers
// write to streams and buckets. A subject added to the topology or to the
// agents' permissions that breaks this fails here.
func TestAgentSubjectsReachNoStream(t *testing.T) {
	const key = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	captured := append(bus.DefaultTopology().CapturedSubjects(),
		// The JetStream API, every bucket and object store, the system
		// account's subjects, whatever the topology holds.
		"$JS.>", "$KV.>", "$O.>", "$JSC.>", "$NRG.>", "$SYS.>")
	perms := map[string]*server.Permissions{
		"agent":    busperm.Agent(&api.Enrollment{NodeID: "node-1", PublicKey: key, Groups: []string{"web.prod", "db"}, Status: api.EnrollAdmitted}),
		"enrollee": busperm.Enrollee(key),
	}
	for who, p := range perms {
		if len(p.Publish.Allow) == 0 {
			t.Fatalf("%s may publish nothing: the test would prove nothing", who)
		}
		if len(p.Publish.Deny) != 0 {
			t.Errorf("%s: publish deny list %v: permissions here are allow lists only", who, p.Publish.Deny)
		}
		for _, pub := range p.Publish.Allow {
			for _, c := range captured {
				if server.SubjectsCollide(pub, c) {
					t.Errorf("%s may publish %s, which %s captures", who, pub, c)
				}
			}
		}
	}
	// And the check itself sees a collision where there is one.
	if !server.SubjectsCollide("result.*.*.node-1", api.SubjectResults) {
		t.Fatal("SubjectsCollide misses a collision")
	}
}
