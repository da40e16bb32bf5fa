package rke2_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/rke2"
)

const hostileVersion = "v1.30.4+rke2r1"

// tarGz is a tarball of one file of n zero bytes: a few KiB compressed
// per MiB unpacked.
func tarGz(t *testing.T, name string, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: n, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 1<<20)
	for left := n; left > 0; {
		k := min(left, int64(len(zero)))
		if _, err := tw.Write(zero[:k]); err != nil {
			t.Fatal(err)
		}
		left -= k
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mirror serves a release whose checksum file publishes the sha256 of
// tarball (a hostile mirror, or one reached through a spoofed name, signs
// what it serves); tarballHandler, when set, answers for the tarball.
func mirror(t *testing.T, tarball []byte, tarballHandler http.HandlerFunc) *httptest.Server {
	t.Helper()
	sum := sha256.Sum256(tarball)
	name := "rke2.linux-amd64.tar.gz"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/sha256sum-amd64.txt"):
			fmt.Fprintf(w, "%s  %s\n", hex.EncodeToString(sum[:]), name)
		case strings.HasSuffix(r.URL.Path, "/"+name) && tarballHandler != nil:
			tarballHandler(w, r)
		case strings.HasSuffix(r.URL.Path, "/"+name):
			_, _ = w.Write(tarball)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func install(t *testing.T, opts rke2.Options) error {
	t.Helper()
	opts.Arch = "amd64"
	opts.SystemctlPath = "/nonexistent/systemctl"
	if opts.InstallRoot == "" {
		opts.InstallRoot = t.TempDir()
	}
	reg := backends.NewRegistry().MustRegister(rke2.New(opts))
	_, err := reg.Run(context.Background(), "rke2", &backends.Request{Action: "install", Params: api.Params{"version": hostileVersion}})
	return err
}

// A tarball that unpacks to far more than RKE2's few hundred MiB (a
// decompression bomb, whose checksum the mirror publishes) is stopped
// at the unpack limit instead of filling the install root's disk.
func TestInstallStopsADecompressionBomb(t *testing.T) {
	bomb := tarGz(t, "bin/rke2", 64<<20)
	srv := mirror(t, bomb, nil)
	root := t.TempDir()
	err := install(t, rke2.Options{ArtifactURL: srv.URL, Client: srv.Client(), InstallRoot: root, MaxUnpackBytes: 8 << 20})
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("install of a bomb: got %v, want an unpack limit error", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "bin", "rke2")); err == nil {
		t.Fatalf("bin/rke2 was written (%d bytes)", fi.Size())
	}
}

// A download larger than the limit is cut off while it arrives, before
// it fills the temp directory, whatever the checksum says.
func TestInstallStopsAHugeDownload(t *testing.T) {
	huge := make([]byte, 4<<20)
	_, _ = rand.Read(huge)
	srv := mirror(t, huge, nil)
	err := install(t, rke2.Options{ArtifactURL: srv.URL, Client: srv.Client(), MaxDownloadBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("install of a 4 MiB tarball with a 1 MiB limit: got %v, want a download limit error", err)
	}
}

// An https mirror that redirects to http would hand the tarball to
// anyone on the path (the checksum was fetched over https, but a
// downgraded checksum fetch would be as bad): redirects must stay on
// https when the mirror is https.
func TestInstallRefusesARedirectToHTTP(t *testing.T) {
	tarball := tarGz(t, "bin/rke2", 1<<10)
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		_, _ = w.Write(tarball)
	}))
	defer plain.Close()
	srv := mirror(t, tarball, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusFound)
	})
	err := install(t, rke2.Options{ArtifactURL: srv.URL, Client: srv.Client()})
	if err == nil {
		t.Fatal("install followed a redirect from https to http")
	}
	if n := plainHits.Load(); n != 0 {
		t.Fatalf("the http server was asked %d times", n)
	}
}
