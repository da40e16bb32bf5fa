package cert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/cert"
)

// cert reads files anywhere on the host, so pointed at a private key (a
// TLS server's, or a file holding key and certificate together) it must
// say nothing of the key: no bytes of it in the output, the facts or the
// error.
func TestInspectNeverShowsAPrivateKey(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "server.key")
	block := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	// A CERTIFICATE block that does not parse, holding the key's bytes:
	// the parse error must not quote it either.
	block = append(block, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	if err := os.WriteFile(p, block, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := backends.NewRegistry().MustRegister(cert.New())
	b64 := base64.StdEncoding.EncodeToString(der)
	for _, action := range []string{"inspect", "expiry", "verify"} {
		res, err := reg.Run(context.Background(), "cert", &backends.Request{Action: action, Params: api.Params{"path": p}})
		seen := ""
		if res != nil {
			seen = res.Output + " " + fmt.Sprint(res.Facts)
		}
		if err != nil {
			seen += " " + err.Error()
		}
		for _, frag := range []string{b64[:16], b64[len(b64)/2 : len(b64)/2+16], string(der[:8])} {
			if strings.Contains(seen, frag) {
				t.Fatalf("%s of a private key shows its bytes: %s", action, seen)
			}
		}
	}
}
