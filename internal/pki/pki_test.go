package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The CA, certificates and token are made once and reused; secrets are
// 0600; a certificate is reissued when it no longer names a listen host.
func TestGeneratedOnceReusedAndPrivate(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EnsureCA(dir)
	if err != nil || !bytes.Equal(ca.PEM, again.PEM) || again.Key == nil {
		t.Fatalf("second EnsureCA: %v (same cert: %v)", err, err == nil && bytes.Equal(ca.PEM, again.PEM))
	}
	cp, kp := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	c1, err := EnsureCert(ca, cp, kp, CertSpec{CommonName: "s", Hosts: []string{"127.0.0.1", "a.example"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := EnsureCert(ca, cp, kp, CertSpec{CommonName: "s", Hosts: []string{"127.0.0.1"}, Server: true})
	if !bytes.Equal(c1.Certificate[0], c2.Certificate[0]) {
		t.Fatal("a certificate covering the hosts was reissued")
	}
	c3, _ := EnsureCert(ca, cp, kp, CertSpec{CommonName: "s", Hosts: []string{"10.9.8.7"}, Server: true})
	if bytes.Equal(c1.Certificate[0], c3.Certificate[0]) {
		t.Fatal("a certificate missing a host was kept")
	}
	tok, err := EnsureToken(filepath.Join(dir, JoinTokenFile))
	if err != nil || len(tok) != 64 {
		t.Fatalf("token %q %v", tok, err)
	}
	if tok2, _ := EnsureToken(filepath.Join(dir, JoinTokenFile)); tok2 != tok {
		t.Fatal("token not reused")
	}
	k1, err := EnsureUserKey(filepath.Join(dir, AgentKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := EnsureUserKey(filepath.Join(dir, AgentKeyFile))
	p1, _ := k1.PublicKey()
	p2, _ := k2.PublicKey()
	if p1 != p2 {
		t.Fatal("NKey not reused")
	}
	for _, name := range []string{CAKeyFile, ServerKeyFile, JoinTokenFile, AgentKeyFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v, want 0600", name, err, st.Mode().Perm())
		}
	}
	// A CA brought without its key verifies but does not issue.
	byo := t.TempDir()
	if err := os.WriteFile(filepath.Join(byo, CAFile), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	bca, err := EnsureCA(byo)
	if err != nil || bca.Key != nil {
		t.Fatalf("CA without key: %v", err)
	}
	if _, err := EnsureCert(bca, filepath.Join(byo, ServerCertFile), filepath.Join(byo, ServerKeyFile), CertSpec{Server: true}); err == nil {
		t.Fatal("issued a certificate without the CA key")
	}
}
