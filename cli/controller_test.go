package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/controller"
)

// TestControllerConfigLayers checks the order: defaults, then the file,
// then only the flags that were given.
func TestControllerConfigLayers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(file, []byte("api_addr: 127.0.0.1:9000\nmax_pending: 5\nreplicas: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &controllerOptions{}
	cmd := controllerCommand(&globals{}, o)
	if err := cmd.Flags().Parse([]string{"--config", file, "--max-pending", "7", "--routes", "nats://a:6222,nats://b:6222"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := controllerConfig(cmd.Flags(), file, &o.flags)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.APIAddr != "127.0.0.1:9000" { // from the file; the flag's default must not win
		t.Errorf("api addr %q", cfg.APIAddr)
	}
	if cfg.MaxPending != 7 { // the flag beats the file
		t.Errorf("max pending %d", cfg.MaxPending)
	}
	if cfg.Replicas != 3 {
		t.Errorf("replicas %d", cfg.Replicas)
	}
	if len(cfg.Routes) != 2 {
		t.Errorf("routes %q", cfg.Routes)
	}
	if cfg.MaxConcurrent < 1 { // a default survives
		t.Errorf("max concurrent %d", cfg.MaxConcurrent)
	}

	if _, err := controllerConfig(cmd.Flags(), filepath.Join(t.TempDir(), "missing.yaml"), &o.flags); exitCode(err) != ExitUsage {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("api_adr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := controllerConfig(cmd.Flags(), bad, &o.flags); exitCode(err) != ExitUsage {
		t.Errorf("misspelt key: %v", err)
	}
}

// TestControllerMemoryAndDebugFlags checks that --memory-limit and
// --debug-addr override the file, and that the default limit survives when
// neither sets it.
func TestControllerMemoryAndDebugFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(file, []byte("memory_limit: 1GiB\ndebug_addr: 127.0.0.1:6060\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &controllerOptions{}
	cmd := controllerCommand(&globals{}, o)
	if err := cmd.Flags().Parse([]string{"--memory-limit", "256MiB"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := controllerConfig(cmd.Flags(), file, &o.flags)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MemoryLimit != 256<<20 { // the flag beats the file
		t.Errorf("memory limit %s", cfg.MemoryLimit)
	}
	if cfg.DebugAddr != "127.0.0.1:6060" { // from the file
		t.Errorf("debug addr %q", cfg.DebugAddr)
	}

	o = &controllerOptions{}
	cmd = controllerCommand(&globals{}, o)
	if err := cmd.Flags().Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg, err = controllerConfig(cmd.Flags(), "", &o.flags); err != nil {
		t.Fatal(err)
	}
	if cfg.MemoryLimit != controller.DefaultMemoryLimit || cfg.DebugAddr != "" {
		t.Errorf("defaults: memory limit %s, debug addr %q", cfg.MemoryLimit, cfg.DebugAddr)
	}
	if err := cmd.Flags().Parse([]string{"--memory-limit", "300MB"}); err == nil {
		t.Error("--memory-limit 300MB accepted (the units are GOMEMLIMIT's: MiB, GiB)")
	}
}

// --replicas not given leaves replicas unset (chosen from the cluster's
// size) or as the file has it; given, even as 1, it wins.
func TestControllerReplicasFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(file, []byte("cluster_name: grid\nreplicas: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		file string
		args []string
		want int
	}{
		{"unset", "", nil, 0},
		{"from the file", file, nil, 3},
		{"flag 1 beats the file", file, []string{"--replicas", "1"}, 1},
		{"flag 1 alone", "", []string{"--replicas", "1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &controllerOptions{}
			cmd := controllerCommand(&globals{}, o)
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := controllerConfig(cmd.Flags(), tc.file, &o.flags)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Replicas != tc.want {
				t.Errorf("replicas %d, want %d", cfg.Replicas, tc.want)
			}
		})
	}
}
