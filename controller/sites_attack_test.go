package controller_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// Attacks on the hub's side of sites from a compromised relay host: it
// holds its site's credential and runs whatever NATS server it likes
// towards the leaf port.

// siteFleet is a fleet whose controller accepts relays.
func siteFleet(t *testing.T, agents int) *fleet.Fleet {
	t.Helper()
	return fleettest.Start(t, fleet.Options{Agents: agents, Controller: func(c *controller.Config) { c.LeafAddr = "127.0.0.1:0" }})
}

// newSite creates a site and returns its credential.
func newSite(t *testing.T, f *fleet.Fleet, name string) api.SiteCredential {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cred, err := f.Client().CreateSite(ctx, api.SiteCreateRequest{Name: name})
	if err != nil {
		t.Fatalf("create site %s: %v", name, err)
	}
	return cred
}

// evilRelay is a NATS server the attacker runs with a site's credential,
// connected to the hub as a leaf node, and a local client of it: what it
// publishes goes to the hub as the relay's, what it subscribes is asked
// of the hub.
type evilRelay struct {
	site string
	ns   *server.Server
	nc   *nats.Conn
}

// startEvilRelay connects a leaf server with cred; edit adjusts its
// remote (for a relay that claims more than it should).
func startEvilRelay(t *testing.T, cred api.SiteCredential, edit func(*server.RemoteLeafOpts)) *evilRelay {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cred.CA)) {
		t.Fatal("credential CA")
	}
	var urls []*url.URL
	for _, s := range cred.HubURLs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	remote := &server.RemoteLeafOpts{URLs: urls, Nkey: cred.Seed, TLS: true, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	if edit != nil {
		edit(remote)
	}
	ns, err := server.NewServer(&server.Options{ServerName: "evil-" + cred.Site, Host: "127.0.0.1", Port: -1,
		NoLog: true, NoSigs: true, LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{remote},
			ReconnectInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("relay server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(api.SiteInboxPrefix(cred.Site)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &evilRelay{site: cred.Site, ns: ns, nc: nc}
	// Ready once the hub answers its roster request through the link.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := r.roster(500 * time.Millisecond); err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay of %s: the hub never answered its roster request", cred.Site)
		}
	}
}

func (r *evilRelay) roster(timeout time.Duration) (api.SiteRoster, error) {
	var out api.SiteRoster
	m, err := r.nc.Request(api.SiteRosterSubject(r.site), nil, timeout)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(m.Data, &out)
	return out, err
}

// enroll sends an enrollment for key through the relay and returns the
// hub's answer.
func (r *evilRelay) enroll(key string, req api.EnrollRequest, timeout time.Duration) (api.EnrollReply, error) {
	var out api.EnrollReply
	b, _ := json.Marshal(req)
	m, err := r.nc.Request(api.SiteEnrollSubject(r.site, key), b, timeout)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(m.Data, &out)
	return out, err
}

// The relay names any key in its enrollment subject (its agents' keys
// are not proved to the hub, only to the relay): flooding with the key of
// an agent that is not at its site must neither cut that agent off nor
// keep it from enrolling at the hub.
func TestSiteAttackRelayFloodCannotBanOtherKeys(t *testing.T) {
	f := siteFleet(t, 0)
	relay := startEvilRelay(t, newSite(t, f, "paris"), nil)

	victim := ar2Stranger(t, f)
	for range 200 {
		_ = relay.nc.PublishRequest(api.SiteEnrollSubject("paris", victim.pub), api.SiteInboxPrefix("paris")+".x",
			[]byte(`{"node_id":"hub-1"}`))
	}
	if err := relay.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The hub has read the flood once the relay's next question is
	// answered (messages over one link keep their order).
	if _, err := relay.roster(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	tok := readJoinToken(t, f)
	r, err := victim.enroll(api.EnrollRequest{NodeID: "hub-1", Token: tok}, 5*time.Second)
	if err != nil || r.Status != api.EnrollAdmitted {
		t.Fatalf("a hub agent's enrollment after a relay's flood naming its key: %+v %v", r, err)
	}
	if _, err := ar2Connect(t, f, victim.kp); err != nil {
		t.Fatalf("a hub agent's key is refused after a relay's flood naming it: %v", err)
	}
}

func readJoinToken(t *testing.T, f *fleet.Fleet) string {
	t.Helper()
	tok, err := pki.ReadToken(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
