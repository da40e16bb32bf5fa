package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// --anonymous-role overrides the file's anonymous_role, and the config
// without insecure is refused.
func TestControllerAnonymousRoleFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(file, []byte("anonymous_role: read\ninsecure: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &controllerOptions{}
	cmd := controllerCommand(&globals{}, o)
	if err := cmd.Flags().Parse([]string{"--config", file, "--anonymous-role", "operator"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := controllerConfig(cmd.Flags(), file, &o.flags)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AnonymousRole != api.RoleOperator || !cfg.Insecure {
		t.Fatalf("anonymous_role %q insecure %v, want operator from the flag, insecure from the file", cfg.AnonymousRole, cfg.Insecure)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Insecure = false
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "insecure: true (--insecure)") {
		t.Fatalf("Validate() = %v, want anonymous_role refused without insecure", err)
	}
}
