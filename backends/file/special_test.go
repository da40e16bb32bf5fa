package file_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

// A named pipe planted under a prefix (any local user can make one in a
// directory they may write) must be refused, not opened: opening a FIFO
// for reading waits for a writer, which would hang the action past its
// timeout and hold one of the agent's workers for good.
func TestFIFOIsRefusedNotWaitedOn(t *testing.T) {
	dir := t.TempDir()
	b, err := file.New(file.Options{AllowedPrefixes: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		action string
		params api.Params
	}{
		{"read", api.Params{"encoding": "text"}},
		{"write", api.Params{"content": "x", "encoding": "text", "mode": "0644"}},
		{"line", api.Params{"line": "x", "state": "present", "create": "false", "mode": "0644"}},
		{"block", api.Params{"block": "x", "marker": file.DefaultMarker, "state": "present", "create": "false", "mode": "0644"}},
	} {
		t.Run(tc.action, func(t *testing.T) {
			fifo := filepath.Join(dir, tc.action)
			if err := syscall.Mkfifo(fifo, 0o666); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			tc.params["path"] = fifo
			done := make(chan error, 1)
			go func() {
				_, err := b.Run(context.Background(), &backends.Request{Action: tc.action, Params: tc.params})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("%s of a FIFO: no error", tc.action)
				}
				t.Logf("%s: %v", tc.action, err)
			case <-time.After(10 * time.Second):
				// Let the stuck open return so the test ends.
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("%s of a FIFO blocked waiting for a writer", tc.action)
			}
		})
	}
}
