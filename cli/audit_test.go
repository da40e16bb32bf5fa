package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// grid audit list, export and verify against a real controller: the export
// is one JSON record a line, reads back as the records GET /audit returns
// (a round trip), and verifies; the same export with one record edited
// fails verify, naming that record.
func TestAuditListExportVerify(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	for _, n := range []string{"ci", "terraform"} {
		if _, err := c.CreateToken(ctx, n, api.RoleOperator); err != nil {
			t.Fatal(err)
		}
	}
	conn := []string{"--addr", c.Address(), "--token", f.AdminToken(), "--cacert", f.CAFile()}
	grid := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, conn...)...)
	}

	code, out, errOut := grid("audit", "list", "--action", api.AuditTokenCreate, "-o", "json")
	var listed []api.AuditRecord
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != ExitOK || len(listed) != 2 || listed[1].Resource != "terraform" {
		t.Fatalf("audit list: code %d out %q err %q (%v)", code, out, errOut, err)
	}
	if code, out, _ := grid("audit", "list"); code != ExitOK || !strings.Contains(out, "token.create") || !strings.Contains(out, "ACTOR") {
		t.Fatalf("audit list table: code %d out %q", code, out)
	}

	code, out, errOut = grid("audit", "export", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if code != ExitOK {
		t.Fatalf("audit export: code %d err %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var exported []api.AuditRecord
	for i, l := range lines {
		var r api.AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("export line %d %q: %v", i+1, l, err)
		}
		exported = append(exported, r)
	}
	all, err := c.ListAudit(ctx, api.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(all.Records)
	b, _ := json.Marshal(exported)
	if len(exported) < 3 || string(a) != string(b) {
		t.Fatalf("export does not round-trip:\napi    %s\nexport %s", a, b)
	}

	if code, out, errOut := grid("audit", "verify"); code != ExitOK || !strings.Contains(out, "intact") {
		t.Fatalf("audit verify: code %d out %q err %q", code, out, errOut)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(good, []byte(out0(t, grid, "audit", "export")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "audit", "verify", "--file", good); code != ExitOK || !strings.Contains(out, "intact") {
		t.Fatalf("verify --file: code %d out %q err %q", code, out, errOut)
	}
	// The "terraform" token's record, said to be by "ci".
	edited := strings.Replace(string(mustRead(t, good)), `"resource":"terraform"`, `"resource":"ci-other"`, 1)
	bad := filepath.Join(dir, "edited.jsonl")
	if err := os.WriteFile(bad, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "audit", "verify", "--file", bad)
	if code != ExitFailed || !strings.Contains(errOut, "broken at seq "+itoa(listed[1].Seq)) || !strings.Contains(errOut, "edited") {
		t.Fatalf("verify of an edited export: code %d err %q; want exit 1 naming seq %d", code, errOut, listed[1].Seq)
	}
	if code, _, errOut := grid("audit", "list", "--since", "yesterday"); code != ExitUsage || !strings.Contains(errOut, "--since") {
		t.Fatalf("a bad --since: code %d err %q", code, errOut)
	}
}

func out0(t *testing.T, grid func(...string) (int, string, string), args ...string) string {
	t.Helper()
	code, out, errOut := grid(args...)
	if code != ExitOK {
		t.Fatalf("%q: code %d err %q", args, code, errOut)
	}
	return out
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
