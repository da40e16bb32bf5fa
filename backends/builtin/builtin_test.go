package builtin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"defaults", Options{}, []string{"apt", "file", "net", "ping", "sysinfo", "systemd", "test"}},
		{"with programs", Options{Programs: map[string]ProgramSpec{"tool": {Path: "/bin/true"}}},
			[]string{"apt", "exec", "file", "net", "ping", "sysinfo", "systemd", "test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.List(); !slices.Equal(got, tc.want) {
				t.Errorf("backends = %v, want %v", got, tc.want)
			}
			for _, s := range r.Schemas() {
				if err := s.Check(); err != nil {
					t.Errorf("%s: %v", s.Name, err)
				}
				for _, a := range s.Actions {
					if a.Dangerous {
						t.Errorf("%s.%s is dangerous yet enabled by default", s.Name, a.Name)
					}
				}
			}
		})
	}
	if _, err := New(Options{Programs: map[string]ProgramSpec{"tool": {Path: "relative"}}}); err == nil {
		t.Errorf("relative program path accepted")
	}
}

func TestSandbox(t *testing.T) {
	sb := t.TempDir()
	r, err := New(Options{Sandbox: sb, FileAllowedPrefixes: []string{"/"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := filepath.Join(sb, "hello.txt")
	if _, err := r.Run(ctx, "file", &backends.Request{Action: "write", Params: api.Params{"path": p, "content": "hi"}}); err != nil {
		t.Fatalf("write inside sandbox: %v", err)
	}
	_, err = r.Run(ctx, "file", &backends.Request{Action: "stat", Params: api.Params{"path": "/etc/hostname"}})
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("stat outside sandbox: err = %v", err)
	}
	if _, err := r.Run(ctx, "net", &backends.Request{Action: "dns_set", Params: api.Params{"servers": "192.0.2.1"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sb, "resolv.conf")); err != nil || !strings.Contains(string(b), "nameserver 192.0.2.1") {
		t.Errorf("resolv.conf in sandbox: %q, %v", b, err)
	}
}
