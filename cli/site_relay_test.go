package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

func TestSiteRelayRefusesBadFlagsAsUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no credential", []string{"--listen", "127.0.0.1:0"}, "no site credential"},
		{"a listen address without a port", []string{"--credential", "x.json", "--listen", "localhost"}, "want host:port"},
		{"a hub URL of another scheme", []string{"--credential", "x.json", "--hub", "https://h:7422"}, "want tls://"},
		{"an argument", []string{"--credential", "x.json", "extra"}, "takes no arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := newSiteRelayCmd(&globals{stdout: &bytes.Buffer{}, stderr: &stderr})
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (exit %d), want a usage error saying %q", err, exitCode(err), tc.want)
			}
		})
	}
}

// grid site relay serves the site's agents from the credential's
// certificate (they check it with the hub's ca.pem) until it is stopped.
func TestSiteRelayServesAgentsUntilStopped(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureCert(ca, filepath.Join(dir, "relay.pem"), filepath.Join(dir, "relay-key.pem"),
		pki.CertSpec{CommonName: "relay", Hosts: []string{"127.0.0.1"}, Server: true}); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	site, _ := nkeys.CreateUser()
	seed, _ := site.Seed()
	// No hub listens there: the relay serves its agents all the same.
	cred, _ := json.Marshal(api.SiteCredential{Site: "paris", Seed: string(seed), CA: string(ca.PEM),
		Cert: read("relay.pem"), Key: read("relay-key.pem"), HubURLs: []string{"tls://127.0.0.1:1"}})
	credFile := filepath.Join(dir, "paris.site.json")
	if err := os.WriteFile(credFile, cred, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	cmd := newSiteRelayCmd(&globals{stdout: &bytes.Buffer{}, stderr: &stderr})
	cmd.SetArgs([]string{"--credential", credFile, "--listen", addr, "--data-dir", filepath.Join(dir, "relay")})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	agent, _ := nkeys.CreateUser()
	pub, _ := agent.PublicKey()
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "the relay accepting an agent", func() bool {
		nc, err := nats.Connect("tls://"+addr, nats.RootCAs(filepath.Join(dir, pki.CAFile)), nats.Nkey(pub, agent.Sign))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop when its context ended")
	}
}
