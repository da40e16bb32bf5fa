package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigDebugAddr(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.DebugAddr != "" {
		t.Fatalf("debug_addr on by default: %q", cfg.DebugAddr)
	}
	path := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(path, []byte("debug_addr: 127.0.0.1:6060\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadConfig(path, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.DebugAddr != "127.0.0.1:6060" {
		t.Errorf("debug_addr from the file: %q", cfg.DebugAddr)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	cfg.DebugAddr = "localhost"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "debug_addr") {
		t.Errorf("debug_addr without a port: %v", err)
	}
}
