package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// The README's join-token commands, against a real controller: create
// prints the token alone (once), list shows its scope and uses, revoke
// ends it.
func TestJoinTokenCommands(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{})
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, "--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile())...)
	}
	code, out, errOut := grid("join-token", "create", "--groups", "web", "--ttl", "24h", "--uses", "10")
	tok := strings.TrimSpace(out)
	name, ok := api.JoinTokenName(tok)
	if code != ExitOK || !ok || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "not shown again") || !strings.Contains(errOut, name) {
		t.Fatalf("create: code %d out %q err %q", code, out, errOut)
	}
	code, out, _ = grid("join-token", "list")
	if code != ExitOK || !strings.Contains(out, name) || !strings.Contains(out, "web") || !strings.Contains(out, "0/10") ||
		!strings.Contains(out, "valid") || strings.Contains(out, tok) {
		t.Fatalf("list: code %d\n%s", code, out)
	}
	code, out, _ = grid("join-token", "revoke", name)
	if code != ExitOK || strings.TrimSpace(out) != "join token \""+name+"\" revoked" {
		t.Fatalf("revoke: code %d out %q", code, out)
	}
	if code, out, _ = grid("join-token", "list"); code != ExitOK || !strings.Contains(out, "revoked") {
		t.Fatalf("list after revoke: code %d\n%s", code, out)
	}
	ts, err := f.Client().ListJoinTokens(context.Background())
	if err != nil || len(ts) != 1 || ts[0].RevokedAt == nil || ts[0].RevokedBy != "admin" {
		t.Fatalf("stored: %+v %v", ts, err)
	}
	if code, _, errOut = grid("join-token", "create", "--groups", "not a group"); code != ExitUsage || !strings.Contains(errOut, "--groups") {
		t.Fatalf("bad group: code %d err %q", code, errOut)
	}
	if code, _, errOut = grid("join-token", "revoke", "nosuch"); code == ExitOK || !strings.Contains(errOut, "no join token named") {
		t.Fatalf("revoke unknown: code %d err %q", code, errOut)
	}
}
