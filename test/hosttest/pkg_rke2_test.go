package hosttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/test/internal/debrepo"
)

const (
	rke2Good = "v1.30.4+rke2r1"
	// rke2Bad is published with a checksum its tarball does not have.
	rke2Bad = "v1.30.5+rke2r1"
)

// TestPackageAndRKE2InContainer runs the package backend (its apt driver)
// and the rke2 backend in the Debian systemd container: a package from a
// local repository installed, held and removed; an RKE2 release (a fake
// with a unit that sleeps) served by this process, checksum-verified,
// installed, its unit started and stopped by the container's systemd, and
// uninstalled; a release whose checksum does not match refused.
func TestPackageAndRKE2InContainer(t *testing.T) {
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("host test: set GRID_HOST_TESTS=1 (or run make host-test) to run the package and rke2 backends in a Docker container")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("host test: the docker command is not installed")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("host test: no Docker engine reachable (docker info: %v): %s", err, lastLines(out, 5))
	}
	if why := debrepo.Available(); why != "" {
		t.Skip("host test: " + why)
	}
	ensureImage(t)

	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	grid := buildGrid(t, work)
	repo := buildRepo(t, work)
	mirror := serveRKE2(t)

	f := fleettest.Start(t, fleet.Options{Agents: 0, Controller: func(c *controller.Config) {
		c.NATSAddr = "127.0.0.1:0"
		c.NodeOfflineAfter = config.Duration(30 * time.Second)
	}})
	ct, systemdReason := startContainer(t, work, grid, repo)
	startAgentWithConfig(t, ct, work, fmt.Sprintf(`name: %s
groups: [hosttest]
nats: [%s]
data_dir: /var/lib/grid-agent
ca_file: /etc/grid-ca.pem
join_token_file: /etc/grid-join-token
allow: ["*"]   # the container is disposable: dangerous actions too
backends:
  rke2: {artifact_url: %q}
`, node, f.NATSURL(), mirror), f.CAFile(), f.JoinTokenFile())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.WaitOnline(ctx, node); err != nil {
		t.Fatalf("agent %s in the container did not come online: %v\nagent log:\n%s", node, err, agentLog(ct))
	}
	c := f.Client()

	t.Run("package", func(t *testing.T) {
		name := api.Params{"name": pkg}
		run(t, c, "package", "update", nil, true)
		r := run(t, c, "package", "install", name, true)
		if r.Facts["version"] != "1.0" || r.Facts["name"] != pkg {
			t.Errorf("install facts %v", r.Facts)
		}
		run(t, c, "package", "install", name, false)
		run(t, c, "package", "install", api.Params{"name": pkg, "version": "1.0"}, false)
		if r := run(t, c, "package", "list", api.Params{"filter": "grid-hel"}, false); r.Facts["count"] != float64(1) {
			t.Errorf("list facts %v", r.Facts)
		}
		if r := run(t, c, "package", "info", name, false); r.Facts["version"] != "1.0" || r.Facts["manager"] != "apt" {
			t.Errorf("info facts %v", r.Facts)
		}
		run(t, c, "package", "hold", name, true)
		run(t, c, "package", "hold", name, false)
		if out, err := dockerExec(ct, "apt-mark", "showhold"); err != nil || strings.TrimSpace(out) != pkg {
			t.Errorf("apt-mark showhold after hold: %q %v", out, err)
		}
		run(t, c, "package", "unhold", name, true)
		run(t, c, "package", "unhold", name, false)
		run(t, c, "package", "remove", name, true)
		run(t, c, "package", "remove", name, false)
		if _, err := dockerExec(ct, "test", "-e", "/usr/share/grid-hello/hello"); err == nil {
			t.Errorf("package file still there after remove")
		}
	})

	t.Run("rke2", func(t *testing.T) {
		if r := runFailing(t, c, "rke2", "install", api.Params{"version": rke2Bad}); !strings.Contains(r.Error, "refusing to install") {
			t.Errorf("install with a wrong checksum: %q", r.Error)
		}
		if _, err := dockerExec(ct, "test", "-e", "/usr/local/bin/rke2"); err == nil {
			t.Fatalf("/usr/local/bin/rke2 written by a refused install")
		}
		r := run(t, c, "rke2", "install", api.Params{"version": rke2Good}, true)
		if r.Facts["version"] != rke2Good {
			t.Errorf("install facts %v", r.Facts)
		}
		run(t, c, "rke2", "install", api.Params{"version": rke2Good}, false)
		if systemdReason != "" {
			t.Skip("systemd in a container does not work on this machine: " + systemdReason)
		}
		if r := run(t, c, "rke2", "status", nil, false); r.Facts["active_state"] != "inactive" || r.Facts["version"] != rke2Good {
			t.Errorf("status before start: %v", r.Facts)
		}
		run(t, c, "rke2", "start", api.Params{"mode": "server"}, true)
		if out, err := dockerExec(ct, "systemctl", "is-active", "rke2-server"); err != nil || strings.TrimSpace(out) != "active" {
			t.Errorf("systemctl is-active rke2-server: %q %v", out, err)
		}
		run(t, c, "rke2", "start", api.Params{"mode": "server"}, false)
		run(t, c, "rke2", "uninstall", nil, true)
		if out, err := dockerExec(ct, "systemctl", "is-active", "rke2-server"); strings.TrimSpace(out) == "active" {
			t.Errorf("rke2-server still active after uninstall: %q %v", out, err)
		}
		for _, p := range []string{"/usr/local/bin/rke2", "/usr/local/lib/systemd/system/rke2-server.service", "/usr/local/share/rke2"} {
			if _, err := dockerExec(ct, "test", "-e", p); err == nil {
				t.Errorf("%s left after uninstall", p)
			}
		}
		run(t, c, "rke2", "uninstall", nil, false)
	})
}

// serveRKE2 serves, on 127.0.0.1 (which the container shares), a mirror of
// two fake RKE2 releases laid out as the real ones are; the second one's
// checksum file publishes a sum its tarball does not have. It returns the
// mirror's base URL.
func serveRKE2(t *testing.T) string {
	t.Helper()
	files := map[string][]byte{}
	for _, v := range []string{rke2Good, rke2Bad} {
		tgz := fakeRKE2(t, v)
		sum := sha256.Sum256(tgz)
		published := hex.EncodeToString(sum[:])
		if v == rke2Bad {
			published = strings.Repeat("0", 64)
		}
		files["/rke2/"+v+"/rke2.linux-amd64.tar.gz"] = tgz
		files["/rke2/"+v+"/sha256sum-amd64.txt"] = []byte(published + "  rke2.linux-amd64.tar.gz\n")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return (&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/rke2"}).String()
}

// fakeRKE2 is a release tarball: a stand-in binary (never run) and units
// whose service sleeps, so systemd can really start and stop them.
func fakeRKE2(t *testing.T, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range []struct {
		name, body string
		mode       int64
	}{
		{"bin/rke2", "fake rke2 " + version + "\n", 0o755},
		{"lib/systemd/system/rke2-server.service", "[Unit]\nDescription=fake rke2 server\n\n[Service]\nExecStart=/bin/sleep infinity\n", 0o644},
		{"lib/systemd/system/rke2-agent.service", "[Unit]\nDescription=fake rke2 agent\n\n[Service]\nExecStart=/bin/sleep infinity\n", 0o644},
		{"share/rke2/rke2-cis-sysctl.conf", "vm.overcommit_memory=1\n", 0o644},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// startAgentWithConfig starts the agent in the container with an
// agent.yaml (for the settings that have no flag), enrolling with the
// controller's CA and join token.
func startAgentWithConfig(t *testing.T, ct, work, yaml, caFile, tokenFile string) {
	t.Helper()
	cfg := filepath.Join(work, "agent.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{caFile: "/etc/grid-ca.pem", tokenFile: "/etc/grid-join-token", cfg: "/etc/grid-agent.yaml"} {
		if out, err := exec.Command("docker", "cp", src, ct+":"+dst).CombinedOutput(); err != nil {
			t.Fatalf("copy %s into the container: %v: %s", src, err, out)
		}
	}
	if out, err := exec.Command("docker", "exec", "-d", ct, "/bin/sh", "-c",
		"exec /usr/local/bin/grid agent --config /etc/grid-agent.yaml >/var/log/grid-agent.log 2>&1").CombinedOutput(); err != nil {
		t.Fatalf("start the agent: %v: %s", err, out)
	}
}
