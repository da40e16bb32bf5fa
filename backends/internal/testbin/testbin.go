// Package testbin builds small helper programs for backend tests: fake
// systemctl, apt-get, ping, and processors, each a real binary so that
// tests see exactly the argv a backend passes.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Build compiles the main package in pkgDir (relative to the calling test's
// package, e.g. "testdata/fakesystemctl") once per test binary and returns
// the executable's path.
func Build(t testing.TB, pkgDir string) string {
	t.Helper()
	abs, err := filepath.Abs(pkgDir)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[abs]; ok {
		return p
	}
	if dir == "" {
		// Not t.TempDir: the binary outlives the test that built it.
		d, err := os.MkdirTemp("", "grid-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, filepath.Base(abs))
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = abs
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkgDir, err, b)
	}
	built[abs] = out
	return out
}

// Cleanup removes built binaries; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
