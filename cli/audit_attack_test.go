package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// An export is evidence read by other tools too (jq, a SIEM). Go's decoder
// matches keys without regard to case, takes the last of repeated keys and
// skips unknown ones, so a line could show one actor to every other reader
// ("actor") while verify hashed another ("ACTOR", later in the line), or
// carry a field GRID never wrote, and still verify. verify --file takes
// only lines exactly as GRID writes them.
func TestAuditAttackExportForgeryIsNamed(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	conn := []string{"--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile()}
	for _, name := range []string{"alice", "mallory"} {
		if _, err := f.Client().CreateToken(t.Context(), name, api.RoleRead); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, append([]string{"audit", "export"}, conn...)...)
	if code != ExitOK {
		t.Fatalf("export: %d %s", code, errOut)
	}
	lines := strings.SplitAfter(out, "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], `"actor":"admin"`) {
		t.Fatalf("export: %q", out)
	}
	dir := t.TempDir()
	verify := func(name, content string) (int, string) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, "audit", "verify", "--file", p)
		return code, errOut
	}
	if code, errOut := verify("intact.jsonl", out); code != ExitOK {
		t.Fatalf("the export as written: %d %s", code, errOut)
	}
	second := strings.TrimSuffix(lines[1], "}\n")
	for _, c := range []struct{ name, line string }{
		{"case", strings.Replace(second, `"actor":"admin"`, `"actor":"alice"`, 1) + `,"ACTOR":"admin"}` + "\n"},
		{"repeated", strings.Replace(second, `"actor":"admin"`, `"actor":"alice"`, 1) + `,"actor":"admin"}` + "\n"},
		{"unknown", second + `,"approved_by":"ciso"}` + "\n"},
		{"spaced", strings.Replace(lines[1], `,"actor"`, `, "actor"`, 1)},
	} {
		forged := lines[0] + c.line + strings.Join(lines[2:], "")
		code, errOut := verify(c.name+".jsonl", forged)
		if code == ExitOK {
			t.Errorf("%s: verify passed an export whose record 2 reads %s", c.name, c.line)
			continue
		}
		if !strings.Contains(errOut, "record 2 of the export") {
			t.Errorf("%s: %s, want it to name record 2 of the export", c.name, errOut)
		}
	}
}

// Values a stranger controls reach records (a refused call's resource is
// its path): the table escapes control characters, so a path holding a
// newline or an ANSI escape cannot forge a row or recolour the terminal,
// and the export stays one record a line.
func TestAuditAttackInjectedValuesStayInTheirCell(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	conn := []string{"--addr", f.Client().Address(), "--token", f.AdminToken(), "--cacert", f.CAFile()}
	req, err := http.NewRequest(http.MethodPost, f.APIURL()+"/job/x%0a9999%092026-01-01T00:00:00Z%09admin%09token.create%1b%5b2K/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("stranger's call: %d", resp.StatusCode)
	}
	code, out, errOut := runCLI(t, append([]string{"audit", "list", "--action", "auth.failed"}, conn...)...)
	if code != ExitOK {
		t.Fatalf("list: %d %s", code, errOut)
	}
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 || strings.ContainsAny(out, "\x1b\t") ||
		!strings.Contains(rows[1], `x\n9999\t`) {
		t.Errorf("the table shows the injected path raw:\n%s", out)
	}
	code, out, errOut = runCLI(t, append([]string{"audit", "export"}, conn...)...)
	if code != ExitOK || strings.Count(out, "\n") != strings.Count(out, "}\n") {
		t.Fatalf("export: %d %s %q", code, errOut, out)
	}
}
