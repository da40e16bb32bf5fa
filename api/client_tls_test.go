package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad CA settings are refused when the client is built, naming what to fix.
func TestClientTLSConfigErrors(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg  ClientConfig
		want string
	}{
		"missing file": {ClientConfig{Address: "https://h:1", CAFile: filepath.Join(t.TempDir(), "none.pem")}, "GRID_CACERT"},
		"not PEM":      {ClientConfig{Address: "https://h:1", CAFile: notPEM}, "no PEM certificate"},
		"bad PEM text": {ClientConfig{Address: "https://h:1", CAPEM: "junk"}, "ca_pem"},
		"cert, no key": {ClientConfig{Address: "https://h:1", CertFile: notPEM}, "both the certificate and its key"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewClient(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewClient: %v, want an error with %q", err, tc.want)
			}
		})
	}
	if got := NormalizeAddress("h:1"); got != "https://h:1" {
		t.Errorf("bare address means %s, want https://h:1", got)
	}
}
