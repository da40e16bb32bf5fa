package regularfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/cert"
	"github.com/gridfleet/terraform-provider-grid/backends/health"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/regularfile"
)

// Read-only actions that take a file anywhere on the host (cert's path
// and ca_file, health.http's ca_file) must refuse what is not a regular
// file before opening it: a FIFO's open waits for a writer past every
// timeout, /dev/zero never ends (health read it whole: the agent ran out
// of memory), and opening some devices acts on the host.
func TestSpecialFilesAreRefusedBeforeOpening(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	reg := backends.NewRegistry().MustRegister(cert.New(), health.New(health.Options{}))
	cases := []struct {
		name, backend string
		req           backends.Request
	}{
		{"cert inspect fifo", "cert", backends.Request{Action: "inspect", Params: api.Params{"path": fifo}}},
		{"cert verify ca_file fifo", "cert", backends.Request{Action: "verify", Params: api.Params{"path": fifo, "ca_file": fifo}}},
		{"health http ca_file fifo", "health", backends.Request{Action: "http", Params: api.Params{"url": "https://127.0.0.1:1/", "ca_file": fifo, "timeout": "1s"}}},
		{"cert inspect /dev/null", "cert", backends.Request{Action: "inspect", Params: api.Params{"path": "/dev/null"}}},
		{"health http ca_file dir", "health", backends.Request{Action: "http", Params: api.Params{"url": "https://127.0.0.1:1/", "ca_file": dir, "timeout": "1s"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := reg.Run(context.Background(), tc.backend, &tc.req)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, regularfile.ErrNotRegular) {
					t.Fatalf("got %v, want %v", err, regularfile.ErrNotRegular)
				}
			case <-time.After(10 * time.Second):
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatal("the action blocked opening a FIFO")
			}
		})
	}
}

func TestReadRegularFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pem")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		max     int64
		want    string
		wantErr bool
	}{
		{p, 10, "0123456789", false},
		{link, 10, "0123456789", false}, // links to certificates are common
		{p, 9, "", true},
		{filepath.Join(dir, "missing"), 10, "", true},
	} {
		got, err := regularfile.Read(tc.path, tc.max)
		if (err != nil) != tc.wantErr || string(got) != tc.want {
			t.Errorf("Read(%s, %d) = %q, %v", tc.path, tc.max, got, err)
		}
	}
}
