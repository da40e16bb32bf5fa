package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

// An agent whose file_allowed_prefixes cover its own data_dir (/var/lib
// and /var/lib/grid, say) or its config (/etc) must still not hand its
// key or join token to a job (with them, anyone could act as the node),
// nor let a job rewrite its config (allow: ["*"] after the next restart)
// or the CA it trusts the controllers by.
func TestFileNeverReachesTheAgentsSecrets(t *testing.T) {
	prefix := t.TempDir()
	conf := filepath.Join(prefix, "agent.yaml")
	if err := os.WriteFile(conf, []byte("name: n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := LoadConfig(conf, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = filepath.Join(prefix, "grid")
	cfg.JoinTokenFile = filepath.Join(prefix, "join-token")
	cfg.CAFile = filepath.Join(prefix, "ca.pem")
	cfg.Backends.FileAllowedPrefixes = []string{prefix}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secrets := []string{filepath.Join(cfg.DataDir, "agent.nk"), cfg.JoinTokenFile, cfg.CAFile}
	for _, p := range secrets {
		if err := os.WriteFile(p, []byte("SECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := builtin.New(cfg.builtinOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(secrets, conf) {
		_, err := reg.Run(context.Background(), "file", &backends.Request{Action: "read", Params: api.Params{"path": p}})
		if !errors.Is(err, file.ErrOutside) {
			t.Errorf("file.read %s: got %v, want %v", p, err, file.ErrOutside)
		}
		_, err = reg.Run(context.Background(), "config", &backends.Request{Action: "get", Params: api.Params{"path": p, "key": "a", "format": "ini"}})
		if !errors.Is(err, file.ErrOutside) {
			t.Errorf("config.get %s: got %v, want %v", p, err, file.ErrOutside)
		}
		_, err = reg.Run(context.Background(), "file", &backends.Request{Action: "write", Params: api.Params{"path": p, "content": "allow: [\"*\"]\n"}})
		if !errors.Is(err, file.ErrOutside) {
			t.Errorf("file.write %s: got %v, want %v", p, err, file.ErrOutside)
		}
	}
}
