// Package gpgtest makes throwaway GPG signing keys for tests, with the gpg
// program in a keyring directory of the test's own.
package gpgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Key is a signing key without a passphrase in the keyring Home.
type Key struct {
	Home        string // the keyring (GNUPGHOME)
	Fingerprint string
	SecretFile  string // the secret key, armored
	PublicFile  string // the public key, armored
}

// New makes a key, skipping the test when gpg is not installed. The
// keyring's gpg-agent is stopped at the end of the test.
func New(t *testing.T) Key {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg is not installed (apt-get install gnupg)")
	}
	// gpg-agent's socket lives in the keyring directory, and a socket path
	// has a short length limit, so it is not below t.TempDir().
	home, err := os.MkdirTemp("", "gpgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run()
		os.RemoveAll(home)
	})
	k := Key{Home: home, SecretFile: filepath.Join(home, "secret.asc"), PublicFile: filepath.Join(home, "public.asc")}
	Run(t, home, "--batch", "--passphrase", "", "--quick-gen-key", "GRID test <test@gridfleet.invalid>", "ed25519", "sign", "never")
	// The fingerprint is the "fpr" record's tenth field.
	for _, l := range strings.Split(Run(t, home, "--batch", "--with-colons", "--list-secret-keys"), "\n") {
		if f := strings.Split(l, ":"); f[0] == "fpr" && len(f) > 9 {
			k.Fingerprint = f[9]
			break
		}
	}
	if k.Fingerprint == "" {
		t.Fatal("gpg listed no fingerprint for the key it made")
	}
	if err := os.WriteFile(k.SecretFile, []byte(Run(t, home, "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--armor", "--export-secret-keys", k.Fingerprint)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.PublicFile, []byte(Run(t, home, "--batch", "--armor", "--export", k.Fingerprint)), 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}

// Run runs gpg with the keyring home and returns its standard output,
// failing the test when gpg fails.
func Run(t *testing.T, home string, args ...string) string {
	t.Helper()
	out, err := exec.Command("gpg", append([]string{"--homedir", home}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("gpg %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// Verify checks the detached signature sig of file with the keyring home,
// returning gpg's error (and its messages) when it does not verify.
func Verify(home, sig, file string) error {
	out, err := exec.Command("gpg", "--homedir", home, "--batch", "--verify", sig, file).CombinedOutput()
	if err != nil {
		return &VerifyError{Err: err, Output: strings.TrimSpace(string(out))}
	}
	return nil
}

// VerifyError is a signature that does not verify.
type VerifyError struct {
	Err    error
	Output string
}

func (e *VerifyError) Error() string { return "gpg --verify: " + e.Err.Error() + ": " + e.Output }
func (e *VerifyError) Unwrap() error { return e.Err }
