package builtin_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
)

// snapshot is every entry under dir with its mode and content's hash.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", p, fi.Mode())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// On a node that runs everything in check mode only (check_only: ["*"]),
// no file action and no config edit changes a byte, whatever the job
// asks: each reports what it would do.
func TestCheckOnlyChangesNoFile(t *testing.T) {
	sb := t.TempDir()
	for name, content := range map[string]string{"app.yaml": "server:\n  port: 80\n", "app.conf": "a=1\n", "old.txt": "x\n"} {
		if err := os.WriteFile(filepath.Join(sb, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(sb, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.New(builtin.Options{Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	all, err := backends.ParseAllowlist([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	reg.SetAllowlist(all)
	reg.SetCheckOnly(all)
	before := snapshot(t, sb)
	p := func(name string) string { return filepath.Join(sb, name) }
	for _, tc := range []struct {
		backend, action string
		params          api.Params
	}{
		{"file", "write", api.Params{"path": p("new.txt"), "content": "y"}},
		{"file", "write", api.Params{"path": p("old.txt"), "content": "y", "mode": "0600"}},
		{"file", "remove", api.Params{"path": p("dir"), "recursive": "true"}},
		{"file", "remove", api.Params{"path": p("old.txt")}},
		{"file", "mkdir", api.Params{"path": p("a/b/c")}},
		{"file", "line", api.Params{"path": p("old.txt"), "line": "z"}},
		{"file", "line", api.Params{"path": p("created.txt"), "line": "z", "create": "true"}},
		{"file", "block", api.Params{"path": p("old.txt"), "block": "z"}},
		{"file", "copy", api.Params{"path": p("old.txt"), "url": "https://127.0.0.1:1/x", "sha256": strings.Repeat("ab", 32)}},
		{"config", "set", api.Params{"path": p("app.yaml"), "key": "server.port", "value": "8080", "type": "int"}},
		{"config", "set", api.Params{"path": p("app.conf"), "key": "b", "value": "2"}},
		{"config", "delete", api.Params{"path": p("app.conf"), "key": "a"}},
	} {
		req := &backends.Request{Action: tc.action, Params: tc.params}
		res, err := reg.Run(context.Background(), tc.backend, req)
		if err != nil {
			t.Errorf("%s.%s %v: %v", tc.backend, tc.action, tc.params, err)
			continue
		}
		if !req.ForcedCheck || !strings.Contains(res.Output, "check mode") {
			t.Errorf("%s.%s %v ran for real: %q", tc.backend, tc.action, tc.params, res.Output)
		}
	}
	if after := snapshot(t, sb); after != before {
		t.Fatalf("check-only node changed files:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
