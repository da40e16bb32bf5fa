package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// grid agent, revoked while it runs, exits with an error that says it was
// revoked and what to do, instead of failing its heartbeat forever.
func TestAgentProcessExitsWhenRevoked(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "test", []string{"agent", "--name", "web-01", "--groups", "web.prod", "--nats", f.NATSURL(),
			"--data-dir", filepath.Join(t.TempDir(), "agent"), "--ca-file", f.CAFile(), "--join-token-file", f.JoinTokenFile()}, &out, &errOut)
	}()
	testwait.Until(t, 30*time.Second, 100*time.Millisecond, "web-01 online", func() bool {
		n, err := f.Client().GetNode(ctx, "web-01")
		return err == nil && n.Status == api.NodeOnline
	})
	if _, err := f.Client().RevokeNode(ctx, "web-01"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		msg := errOut.String()
		if code == ExitOK || !strings.Contains(msg, "revoked") || !strings.Contains(msg, "grid node approve") || !strings.Contains(msg, "agent.nk") {
			t.Fatalf("revoked agent exited %d:\n%s", code, msg)
		}
	case <-time.After(40 * time.Second): // within two heartbeats (10s) of the revocation
		t.Fatalf("the revoked agent still runs:\n%s", errOut.String())
	}
}
