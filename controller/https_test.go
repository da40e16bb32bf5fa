package controller_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// httpFor is an HTTP client that trusts ctl's CA (DATA_DIR/ca.pem).
func httpFor(t *testing.T, ctl *controller.Controller) *http.Client {
	t.Helper()
	hc, err := ctl.APIHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

// startWith starts a lone controller (no agents) with cfg adjusted by mod.
func startWith(t *testing.T, mod func(*controller.Config)) (*controller.Controller, string) {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = t.TempDir(), "127.0.0.1:-1", "127.0.0.1:0"
	mod(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-c.Done() })
	return c, cfg.DataDir
}

// TestAPIServesHTTPSWithTheControllerCA: the API is HTTPS by default with a
// certificate of the bus's CA (DATA_DIR/ca.pem); plain HTTP on its port
// reaches no route; a client without the CA gets a verification error
// that says which file to trust; with the CA it works.
func TestAPIServesHTTPSWithTheControllerCA(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	if !strings.HasPrefix(f.APIURL(), "https://") {
		t.Fatalf("API URL %s is not https", f.APIURL())
	}
	if f.Controller.CAFile() != f.CAFile() {
		t.Fatalf("API CA %s is not the bus CA %s", f.Controller.CAFile(), f.CAFile())
	}

	// Plain HTTP with a valid token: no route answers.
	plain := "http://" + strings.TrimPrefix(f.APIURL(), "https://")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, plain+"/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "node-1") {
			t.Fatalf("plain HTTP reached the API: %d %s", resp.StatusCode, body)
		}
	}

	plainCl, _ := api.NewClient(api.ClientConfig{Address: plain, Token: f.AdminToken()})
	if _, err := plainCl.ListNodes(ctx); err == nil || !strings.Contains(err.Error(), "use an https:// address") {
		t.Fatalf("client on plain HTTP: %v, want an error saying to use https", err)
	}

	// No CA: refused, and the error says what to set.
	bare, err := api.NewClient(api.ClientConfig{Address: f.APIURL(), Token: f.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bare.ListNodes(ctx)
	var te *api.TLSError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "GRID_CACERT") || !strings.Contains(err.Error(), "DATA_DIR/ca.pem") {
		t.Fatalf("client without the CA: %v, want a TLS error naming GRID_CACERT and DATA_DIR/ca.pem", err)
	}

	// The CA as a file and as PEM.
	pemText, err := os.ReadFile(f.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	for name, cc := range map[string]api.ClientConfig{
		"file": {Address: f.APIURL(), Token: f.AdminToken(), CAFile: f.CAFile()},
		"pem":  {Address: f.APIURL(), Token: f.AdminToken(), CAPEM: string(pemText)},
		// The provider's insecure_skip_verify, for labs.
		"skip verify": {Address: f.APIURL(), Token: f.AdminToken(), InsecureSkipVerify: true},
	} {
		cl, err := api.NewClient(cc)
		if err != nil {
			t.Fatal(err)
		}
		if nodes, err := cl.ListNodes(ctx); err != nil || len(nodes) != 1 {
			t.Errorf("CA %s: %v %v", name, nodes, err)
		}
	}
}

// TestInsecureAPIIsPlainHTTP: insecure: true serves the API as plain HTTP
// (labs only) and names no CA.
func TestInsecureAPIIsPlainHTTP(t *testing.T) {
	c, _ := startWith(t, func(cfg *controller.Config) { cfg.Insecure = true })
	if !strings.HasPrefix(c.APIURL(), "http://") || c.CAFile() != "" {
		t.Fatalf("insecure API at %s with CA %q, want plain http and no CA", c.APIURL(), c.CAFile())
	}
	cl, err := api.NewClient(c.APIClientConfig(c.AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAPIOperatorCertificate: api_tls_cert/api_tls_key serve the
// operator's certificate; clients trust the operator's CA, not the data
// dir's.
func TestAPIOperatorCertificate(t *testing.T) {
	own := t.TempDir()
	ca, err := pki.EnsureCA(own)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(own, "api.pem"), filepath.Join(own, "api-key.pem")
	if _, err := pki.EnsureCert(ca, certPath, keyPath, pki.CertSpec{CommonName: "api", Hosts: []string{"127.0.0.1"}, Server: true}); err != nil {
		t.Fatal(err)
	}
	c, dataDir := startWith(t, func(cfg *controller.Config) { cfg.APITLSCert, cfg.APITLSKey = certPath, keyPath })
	if c.CAFile() != "" {
		t.Errorf("CAFile with an operator certificate = %q, want none", c.CAFile())
	}
	ctx := context.Background()
	withOwn, _ := api.NewClient(api.ClientConfig{Address: c.APIURL(), Token: c.AdminToken(), CAFile: filepath.Join(own, pki.CAFile)})
	if _, err := withOwn.Status(ctx); err != nil {
		t.Fatalf("client trusting the operator's CA: %v", err)
	}
	// The data dir's CA did not sign the operator's certificate.
	withData, _ := api.NewClient(api.ClientConfig{Address: c.APIURL(), Token: c.AdminToken(), CAFile: filepath.Join(dataDir, pki.CAFile)})
	var te *api.TLSError
	if _, err := withData.Status(ctx); !errors.As(err, &te) {
		t.Fatalf("client trusting the data dir's CA: %v, want a TLS error", err)
	}
}

// TestAPIClientCertificates: with api_client_ca the API requires a client
// certificate of that CA: none, or one of another CA, is refused at the
// handshake; one of that CA passes (and the token is still checked).
func TestAPIClientCertificates(t *testing.T) {
	clientDir, otherDir := t.TempDir(), t.TempDir()
	issue := func(dir string) (string, string) {
		ca, err := pki.EnsureCA(dir)
		if err != nil {
			t.Fatal(err)
		}
		cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
		if _, err := pki.EnsureCert(ca, cert, key, pki.CertSpec{CommonName: "ci", Client: true}); err != nil {
			t.Fatal(err)
		}
		return cert, key
	}
	goodCert, goodKey := issue(clientDir)
	badCert, badKey := issue(otherDir)
	c, _ := startWith(t, func(cfg *controller.Config) { cfg.APIClientCA = filepath.Join(clientDir, pki.CAFile) })
	ctx := context.Background()
	call := func(cert, key, tok string) error {
		cc := c.APIClientConfig(tok)
		cc.CertFile, cc.KeyFile = cert, key
		cl, err := api.NewClient(cc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Status(ctx)
		return err
	}
	if err := call("", "", c.AdminToken()); err == nil {
		t.Fatal("client without a certificate was served")
	}
	if err := call(badCert, badKey, c.AdminToken()); err == nil {
		t.Fatal("client with a certificate of another CA was served")
	}
	if err := call(goodCert, goodKey, c.AdminToken()); err != nil {
		t.Fatalf("client with a certificate of api_client_ca: %v", err)
	}
	if err := call(goodCert, goodKey, ""); !api.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("certificate without a token: %v, want 401", err)
	}
	// The handshake itself fails without a certificate.
	tc, _ := c.APIClientConfig("").TLSConfig()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(c.APIURL(), "https://"), tc)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	if err == nil {
		t.Fatal("TLS connection without a client certificate accepted")
	}
}

func TestAPITLSConfigValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*controller.Config)
		want string
	}{
		"cert without key":   {func(c *controller.Config) { c.APITLSCert = "a.pem" }, "api_tls_cert and api_tls_key"},
		"key without cert":   {func(c *controller.Config) { c.APITLSKey = "a.pem" }, "api_tls_cert and api_tls_key"},
		"insecure with mTLS": {func(c *controller.Config) { c.Insecure, c.APIClientCA = true, "ca.pem" }, "api_client_ca need HTTPS"},
		"insecure with cert": {func(c *controller.Config) { c.Insecure, c.APITLSCert, c.APITLSKey = true, "a", "b" }, "insecure: true serves the API as plain HTTP"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := controller.DefaultConfig()
			tc.mod(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
