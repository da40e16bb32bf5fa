// Package release installs the provider as users install it: `make
// release` builds the linux_amd64 zip, terraform init takes it from a
// filesystem mirror, from a network mirror and from a provider registry
// (both served over HTTPS by the test), the checksums Terraform records are
// checked against SHA256SUMS, and the quickstart is planned against a dev
// fleet run from the released binary.
//
// It builds the provider and runs terraform, so it runs only with
// GRID_RELEASE_TEST=1 (make release-test).
package release

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/dirhash"

	"github.com/gridfleet/terraform-provider-grid/internal/gpgtest"
)

const (
	version  = "0.1.0"
	platform = "linux_amd64"
	source   = "registry.terraform.io/gridfleet/grid"
	zipName  = "terraform-provider-grid_" + version + "_" + platform + ".zip"
	sumsName = "terraform-provider-grid_" + version + "_SHA256SUMS"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// built is the release this test made.
type built struct {
	release, mirror string
	sums            map[string]string // file name => hex SHA-256
	key             gpgtest.Key       // the key SHA256SUMS is signed with
}

func TestReleaseInstallsThroughMirrors(t *testing.T) {
	if os.Getenv("GRID_RELEASE_TEST") != "1" {
		t.Skip("builds a release and runs terraform init and plan; set GRID_RELEASE_TEST=1 (make release-test)")
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatal("terraform is not on PATH")
	}
	b := buildRelease(t)

	// The lock file of each install: the provider's version and hashes.
	var h1 string
	t.Run("filesystem mirror", func(t *testing.T) {
		work := quickstartDir(t)
		cfg := cliConfig(t, fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = [%q]
  }
}
`, b.mirror, source))
		terraform(t, work, cfg, nil, "init", "-input=false")
		h1 = checkLock(t, work, b, false)

		// A zip that is not the one the lock file recorded is refused.
		tampered := copyMirror(t, b.mirror)
		rezip(t, filepath.Join(tampered, filepath.FromSlash(source), zipName), []byte("not the provider"))
		cfg2 := cliConfig(t, strings.ReplaceAll(mustRead(t, cfg), b.mirror, tampered))
		// Without the installed copy, so that init installs again.
		if err := os.RemoveAll(filepath.Join(work, ".terraform")); err != nil {
			t.Fatal(err)
		}
		out, err := terraformErr(work, cfg2, nil, "init", "-input=false")
		if err == nil || !strings.Contains(out, "checksum") {
			t.Fatalf("terraform init of an altered zip with the lock file: err %v, output:\n%s", err, out)
		}
	})

	t.Run("network mirror", func(t *testing.T) {
		srv, caFile := serveMirror(t, b.mirror, nil)
		work := quickstartDir(t)
		cfg := cliConfig(t, fmt.Sprintf(`provider_installation {
  network_mirror {
    url     = "%s/"
    include = [%q]
  }
}
`, srv.URL, source))
		env := []string{"SSL_CERT_FILE=" + caFile}
		terraform(t, work, cfg, env, "init", "-input=false")
		if got := checkLock(t, work, b, false); h1 != "" && got != h1 {
			t.Errorf("the network mirror's install records %s, the filesystem mirror's %s", got, h1)
		}

		// A VERSION.json whose hashes are not the zip's: refused. (Terraform
		// takes a zip that matches any one of the listed hashes.)
		bad, badCA := serveMirror(t, b.mirror, func(name string, data []byte) []byte {
			if name != version+".json" {
				return data
			}
			return hashesRE.ReplaceAll(data, []byte(`"hashes": ["zh:`+strings.Repeat("0", 64)+`"]`))
		})
		work2 := quickstartDir(t)
		cfgBad := cliConfig(t, strings.ReplaceAll(mustRead(t, cfg), srv.URL, bad.URL))
		out, err := terraformErr(work2, cfgBad, []string{"SSL_CERT_FILE=" + badCA}, "init", "-input=false")
		if err == nil {
			t.Fatalf("terraform init accepted a zip whose checksum the mirror does not list:\n%s", out)
		}
		if !strings.Contains(out, "checksum") {
			t.Errorf("terraform init failed, but not on the checksum:\n%s", out)
		}
	})

	// The release files as a provider registry serves them: Terraform
	// checks SHA256SUMS's signature against the registry's key, the zip
	// against SHA256SUMS, and records its zh: hashes.
	t.Run("registry protocol", func(t *testing.T) {
		srv, caFile := serveRegistry(t, b, b.key)
		work := quickstartDir(t)
		cfg := cliConfig(t, registryConfig(srv.URL))
		env := []string{"SSL_CERT_FILE=" + caFile}
		out := terraform(t, work, cfg, env, "init", "-input=false")
		if !strings.Contains(out, "key ID "+b.key.Fingerprint[len(b.key.Fingerprint)-16:]) {
			t.Errorf("terraform init does not name the signing key:\n%s", out)
		}
		checkLock(t, work, b, true)

		// Signed by another key than the registry's: refused.
		other := gpgtest.New(t)
		srv2, ca2 := serveRegistry(t, b, other)
		out, err := terraformErr(quickstartDir(t), cliConfig(t, registryConfig(srv2.URL)), []string{"SSL_CERT_FILE=" + ca2}, "init", "-input=false")
		if err == nil || !strings.Contains(out, "signature") {
			t.Fatalf("terraform init with a signature of an unknown key: err %v, output:\n%s", err, out)
		}
	})

	t.Run("plan quickstart", func(t *testing.T) {
		work := quickstartDir(t)
		cfg := cliConfig(t, fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = [%q]
  }
}
`, b.mirror, source))
		terraform(t, work, cfg, nil, "init", "-input=false")
		// The released binary is also grid itself: it runs the dev fleet.
		bin := filepath.Join(work, ".terraform", "providers", filepath.FromSlash(source), version, platform, "terraform-provider-grid_v"+version)
		env := startDev(t, bin)
		out := terraform(t, work, cfg, env, "plan", "-input=false")
		for _, want := range []string{
			"grid_job.hello will be created",
			"Plan: 1 to add, 0 to change, 0 to destroy.",
			// The nodes output: the web nodes the data source read.
			"+ node-1 = {",
			"+ node-3 = {",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the plan lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "node-2") {
			t.Errorf("the plan names node-2, which is not in group web:\n%s", out)
		}
	})

	// OpenTofu reads "gridfleet/grid" as registry.opentofu.org/gridfleet/grid:
	// the mirror has the provider under that host too.
	t.Run("opentofu filesystem mirror", func(t *testing.T) {
		tofu, err := filepath.Abs(filepath.Join(repoRoot, "bin", "tofu"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(tofu); err != nil {
			t.Skipf("no OpenTofu at %s (make bin/tofu builds it)", tofu)
		}
		work := quickstartDir(t)
		cfg := cliConfig(t, fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.opentofu.org/gridfleet/grid"]
  }
}
`, b.mirror))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tofu, "-chdir="+work, "init", "-input=false", "-no-color")
		cmd.Env = terraformEnv(cfg, nil)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tofu init: %v\n%s", err, out)
		}
		lock := mustRead(t, filepath.Join(work, ".terraform.lock.hcl"))
		h1, err := dirhash.HashZip(filepath.Join(b.release, zipName), dirhash.Hash1)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(lock, `provider "registry.opentofu.org/gridfleet/grid"`) || !strings.Contains(lock, h1) {
			t.Errorf("tofu's lock file lacks registry.opentofu.org/gridfleet/grid with %s:\n%s", h1, lock)
		}
	})
}

// buildRelease runs make release for linux_amd64 into a temporary
// directory, signed with a throwaway key, and checks the signature.
func buildRelease(t *testing.T) built {
	t.Helper()
	key := gpgtest.New(t)
	dir := t.TempDir()
	b := built{release: filepath.Join(dir, "release"), mirror: filepath.Join(dir, "mirror"), key: key}
	cmd := exec.Command("make", "--no-print-directory", "release",
		"PLATFORMS="+platform, "RELEASE_VERSION="+version, "RELEASE_PKG_ARCHES=",
		"RELEASE_DIR="+b.release, "MIRROR_DIR="+b.mirror,
		"RELEASE_GPG_KEY_FILE="+key.SecretFile, "RELEASE_REQUIRE_SIGNATURE=1")
	cmd.Dir = repoRoot
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release PLATFORMS=%s: %s", platform, time.Since(start).Round(time.Second))

	sumsFile := filepath.Join(b.release, sumsName)
	if err := gpgtest.Verify(key.Home, sumsFile+".sig", sumsFile); err != nil {
		t.Fatal(err)
	}
	b.sums = map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(mustRead(t, sumsFile)), "\n") {
		sum, name, _ := strings.Cut(l, "  ")
		b.sums[name] = sum
	}
	zip := filepath.Join(b.release, zipName)
	data, err := os.ReadFile(zip)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != b.sums[zipName] {
		t.Fatalf("SHA256SUMS has %q for %s, the file's SHA-256 is %x", b.sums[zipName], zipName, got)
	}
	return b
}

var (
	hashesRE       = regexp.MustCompile(`"hashes": \[[^\]]*\]`)
	lockProviderRE = regexp.MustCompile(`provider "([^"]+)" \{\s*version\s*=\s*"([^"]+)"`)
	lockHashRE     = regexp.MustCompile(`"((?:h1|zh):[^"]+)"`)
)

// checkLock checks what terraform init wrote in .terraform.lock.hcl: the
// provider at the release's version, with the h1: hash of the released zip
// (Terraform's hash of the package's contents, recomputed here from the
// zip); every zh: hash must be a line of SHA256SUMS, and wantZH says the
// zip's must be there (Terraform records zh: hashes only from a registry's
// signed SHA256SUMS; from a mirror it records the h1: alone). It returns
// the h1: hash.
func checkLock(t *testing.T, work string, b built, wantZH bool) string {
	t.Helper()
	lock := mustRead(t, filepath.Join(work, ".terraform.lock.hcl"))
	m := lockProviderRE.FindStringSubmatch(lock)
	if m == nil || m[1] != source || m[2] != version {
		t.Fatalf("the lock file does not record %s %s:\n%s", source, version, lock)
	}
	want, err := dirhash.HashZip(filepath.Join(b.release, zipName), dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, h := range lockHashRE.FindAllStringSubmatch(lock, -1) {
		hashes = append(hashes, h[1])
	}
	if !slices.Contains(hashes, want) {
		t.Errorf("the lock file's hashes %q lack the zip's %s", hashes, want)
	}
	sums := map[string]bool{}
	for _, s := range b.sums {
		sums["zh:"+s] = true
	}
	for _, h := range hashes {
		if strings.HasPrefix(h, "zh:") && !sums[h] {
			t.Errorf("the lock file has %s, which is no line of SHA256SUMS", h)
		}
	}
	if zh := "zh:" + b.sums[zipName]; wantZH && !slices.Contains(hashes, zh) {
		t.Errorf("the lock file's hashes %q lack %s, the zip's SHA256SUMS line", hashes, zh)
	}
	t.Logf("lock file hashes: %q", hashes)
	return want
}

// quickstartDir is a directory with examples/quickstart's configuration.
func quickstartDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(repoRoot, "examples", "quickstart", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func cliConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "terraform.rc")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// terraformEnv is the environment terraform runs with: this process's,
// without TF_ variables (a developer's TF_CLI_CONFIG_FILE, a plugin cache)
// or GRID_ ones, plus cfg as the CLI config and extra.
func terraformEnv(cfg string, extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_") && !strings.HasPrefix(kv, "GRID_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "TF_CLI_CONFIG_FILE="+cfg, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"), extra...)
}

func terraformErr(work, cfg string, extra []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "terraform", append([]string{"-chdir=" + work}, append(args, "-no-color")...)...)
	cmd.Env = terraformEnv(cfg, extra)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func terraform(t *testing.T, work, cfg string, extra []string, args ...string) string {
	t.Helper()
	out, err := terraformErr(work, cfg, extra, args...)
	if err != nil {
		t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// copyMirror copies a mirror directory tree (small: one zip).
func copyMirror(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// rezip replaces the zip at path with one holding the provider binary's
// name with other content.
func rezip(t *testing.T, path string, content []byte) {
	t.Helper()
	cmdDir := t.TempDir()
	name := "terraform-provider-grid_v" + version
	if err := os.WriteFile(filepath.Join(cmdDir, name), content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("zip", "-q", path, name)
	cmd.Dir = cmdDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zip: %v: %s", err, out)
	}
}

// serveMirror serves the mirror directory over HTTPS as a static web server
// does, through edit when it is not nil (name is the file's base name). It
// returns the server and a file with its CA certificate.
func serveMirror(t *testing.T, root string, edit func(name string, data []byte) []byte) (*httptest.Server, string) {
	t.Helper()
	files := http.FileServer(http.Dir(root))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if edit == nil || !strings.HasSuffix(r.URL.Path, ".json") {
			files.ServeHTTP(w, r)
			return
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(edit(filepath.Base(r.URL.Path), data))
	}))
	t.Cleanup(srv.Close)
	return srv, writeCA(t, srv)
}

// registryConfig is a CLI config that installs registry.terraform.io's
// providers from the provider registry at url (a host block overrides
// the host's service discovery).
func registryConfig(url string) string {
	return fmt.Sprintf(`host "registry.terraform.io" {
  services = {
    "providers.v1" = "%s/v1/providers/"
  }
}
provider_installation {
  direct {}
}
`, url)
}

// serveRegistry serves the release's linux_amd64 zip, SHA256SUMS and its
// signature through the provider registry protocol over HTTPS, giving key
// as the provider's signing key. It returns the server and a file with its
// CA certificate.
func serveRegistry(t *testing.T, b built, key gpgtest.Key) (*httptest.Server, string) {
	t.Helper()
	armor := mustRead(t, key.PublicFile)
	mux := http.NewServeMux()
	var srv *httptest.Server
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/providers/gridfleet/grid/versions", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"versions": []any{map[string]any{
			"version":   version,
			"protocols": []string{"6.0"},
			"platforms": []any{map[string]string{"os": "linux", "arch": "amd64"}},
		}}})
	})
	mux.HandleFunc("GET /v1/providers/gridfleet/grid/"+version+"/download/linux/amd64", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"protocols":             []string{"6.0"},
			"os":                    "linux",
			"arch":                  "amd64",
			"filename":              zipName,
			"download_url":          srv.URL + "/files/" + zipName,
			"shasums_url":           srv.URL + "/files/" + sumsName,
			"shasums_signature_url": srv.URL + "/files/" + sumsName + ".sig",
			"shasum":                b.sums[zipName],
			"signing_keys": map[string]any{"gpg_public_keys": []any{map[string]string{
				"key_id":      key.Fingerprint[len(key.Fingerprint)-16:],
				"ascii_armor": armor,
			}}},
		})
	})
	mux.Handle("GET /files/", http.StripPrefix("/files/", http.FileServer(http.Dir(b.release))))
	srv = httptest.NewUnstartedServer(mux)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, writeCA(t, srv)
}

// writeCA writes the server's certificate, which is its own CA, to a file.
func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemData, 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

var exportRE = regexp.MustCompile(`^\s*export (GRID_ADDR=https://\S+) (GRID_TOKEN=\S+) (GRID_CACERT=\S+)$`)

// startDev runs `dev` of the binary (a controller and 3 agents on a free
// port) until the test ends, and returns the GRID_ variables of the export
// line it prints once its agents are online.
func startDev(t *testing.T, bin string) []string {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--agents", "3", "--api-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := exportRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1:]
				break
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case env, ok := <-found:
		if !ok {
			t.Fatalf("%s dev exited without its export line:\n%s", bin, stderr.String())
		}
		return env
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s dev printed no export line in 2 minutes:\n%s", bin, stderr.String())
	}
	return nil
}

// syncBuffer is a bytes.Buffer the child's output is copied into while the
// test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
