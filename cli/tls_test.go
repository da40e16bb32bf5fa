package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// The CLI presents a client certificate (--client-cert/--client-key or
// GRID_CLIENT_CERT/GRID_CLIENT_KEY) to a controller that requires one
// (api_client_ca); without it the controller refuses the connection.
func TestCLIClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a controller")
	}
	clients := t.TempDir()
	ca, err := pki.EnsureCA(clients)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(clients, "cli.pem"), filepath.Join(clients, "cli-key.pem")
	if _, err := pki.EnsureCert(ca, cert, key, pki.CertSpec{CommonName: "cli", Client: true}); err != nil {
		t.Fatal(err)
	}
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = t.TempDir(), "127.0.0.1:-1", "127.0.0.1:0"
	cfg.APIClientCA = filepath.Join(clients, pki.CAFile)
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ctl.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-ctl.Done() })
	for _, env := range []string{"GRID_ADDR", "GRID_TOKEN", "GRID_CACERT", "GRID_CLIENT_CERT", "GRID_CLIENT_KEY"} {
		t.Setenv(env, "")
	}
	base := []string{"--addr", ctl.APIURL(), "--token", ctl.AdminToken(), "--cacert", ctl.CAFile()}

	if code, out, errOut := runCLI(t, append(base, "node", "list")...); code == ExitOK {
		t.Fatalf("node list without a client certificate: code %d out %q", code, out+errOut)
	}
	if code, out, errOut := runCLI(t, append(base, "--client-cert", cert, "--client-key", key, "node", "list")...); code != ExitOK {
		t.Fatalf("node list with --client-cert: code %d out %q err %q", code, out, errOut)
	}
	t.Setenv("GRID_CLIENT_CERT", cert)
	t.Setenv("GRID_CLIENT_KEY", key)
	if code, out, errOut := runCLI(t, append(base, "status")...); code != ExitOK {
		t.Fatalf("status with GRID_CLIENT_CERT: code %d out %q err %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, append(base, "--client-key", "", "status")...); code != ExitUsage || !strings.Contains(errOut, "both the certificate and its key") {
		t.Fatalf("certificate without its key: code %d err %q", code, errOut)
	}
}
