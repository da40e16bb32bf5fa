package builtin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/rke2"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"defaults", Options{}, []string{"apt", "cert", "config", "dns", "file", "firewall", "health", "journald", "net", "package", "ping", "proc", "rke2", "sysinfo", "systemd", "test", "user"}},
		{"with programs", Options{Programs: map[string]ProgramSpec{"tool": {Path: "/bin/true"}}},
			[]string{"apt", "cert", "config", "dns", "exec", "file", "firewall", "health", "journald", "net", "package", "ping", "proc", "rke2", "sysinfo", "systemd", "test", "user"}},
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
	// net.dns_set is dangerous: off unless the allow list names it.
	allow, _ := backends.ParseAllowlist([]string{"*"})
	r.SetAllowlist(allow)
	ctx := context.Background()
	p := filepath.Join(sb, "hello.txt")
	if _, err := r.Run(ctx, "file", &backends.Request{Action: "write", Params: api.Params{"path": p, "content": "hi"}}); err != nil {
		t.Fatalf("write inside sandbox: %v", err)
	}
	_, err = r.Run(ctx, "file", &backends.Request{Action: "stat", Params: api.Params{"path": "/etc/hostname"}})
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("stat outside sandbox: err = %v", err)
	}
	// config reaches files through file, so the sandbox holds it too.
	_, err = r.Run(ctx, "config", &backends.Request{Action: "get", Params: api.Params{"path": "/etc/os-release", "key": "ID", "format": "ini"}})
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("config get outside sandbox: err = %v", err)
	}
	if _, err := r.Run(ctx, "net", &backends.Request{Action: "dns_set", Params: api.Params{"servers": "192.0.2.1"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sb, "resolv.conf")); err != nil || !strings.Contains(string(b), "nameserver 192.0.2.1") {
		t.Errorf("resolv.conf in sandbox: %q, %v", b, err)
	}
}

// The actions that can take a node out of service are marked dangerous, and
// a node without an allow list neither offers nor runs them.
func TestDangerousActionsOffByDefault(t *testing.T) {
	r, err := New(Options{Sandbox: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"apt.remove", "apt.upgrade", "firewall.deny", "firewall.remove", "net.dns_set", "package.remove", "package.upgrade", "proc.signal", "rke2.stop", "rke2.uninstall", "systemd.disable", "systemd.stop", "user.absent", "user.group_absent"}
	var got []string
	for _, name := range []string{"apt", "config", "file", "firewall", "net", "package", "ping", "proc", "rke2", "sysinfo", "systemd", "test", "user"} {
		b, _ := r.Get(name)
		for _, a := range b.Schema().Actions {
			if a.Dangerous {
				got = append(got, name+"."+a.Name)
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("dangerous actions = %v, want %v", got, want)
	}
	ctx := context.Background()
	for _, tc := range []struct{ backend, action string }{
		{"apt", "remove"}, {"apt", "upgrade"}, {"systemd", "stop"}, {"systemd", "disable"}, {"net", "dns_set"}, {"proc", "signal"},
		{"package", "remove"}, {"package", "upgrade"}, {"rke2", "stop"}, {"rke2", "uninstall"},
		{"user", "absent"}, {"user", "group_absent"}, {"firewall", "remove"},
	} {
		params := api.Params{"package": "cowsay", "name": "cowsay", "unit": "sshd", "servers": "192.0.2.1", "port": "22"}
		b, _ := r.Get(tc.backend)
		a, _ := b.Schema().Action(tc.action)
		for k := range params {
			if _, ok := a.Param(k); !ok {
				delete(params, k)
			}
		}
		_, err := r.Run(ctx, tc.backend, &backends.Request{Action: tc.action, Params: params})
		if !errors.Is(err, backends.ErrNotAllowed) {
			t.Errorf("%s.%s without an allow list: err = %v, want not allowed", tc.backend, tc.action, err)
		}
	}
	for _, s := range r.Schemas() {
		for _, a := range s.Actions {
			if slices.Contains(want, s.Name+"."+a.Name) {
				t.Errorf("%s.%s advertised without an allow list", s.Name, a.Name)
			}
		}
	}
	allow, _ := backends.ParseAllowlist([]string{"apt"})
	r.SetAllowlist(allow)
	if _, ok := slices.BinarySearch(r.List(), "apt"); !ok {
		t.Fatalf("apt not offered with allow [apt]")
	}
	for _, s := range r.Schemas() {
		if s.Name == "apt" {
			if _, ok := s.Action("remove"); !ok {
				t.Errorf("allow [apt] does not enable apt.remove")
			}
		}
	}
}

// A node that runs an action only in check mode runs it in check mode even
// when the job does not ask, says so in the output, and refuses an action
// that has no check mode.
func TestCheckOnly(t *testing.T) {
	sb := t.TempDir()
	r, err := New(Options{Sandbox: sb, Programs: map[string]ProgramSpec{"tool": {Path: "/bin/true"}}})
	if err != nil {
		t.Fatal(err)
	}
	co, _ := backends.ParseAllowlist([]string{"file", "exec"})
	r.SetCheckOnly(co)
	p := filepath.Join(sb, "motd")
	res, err := r.Run(context.Background(), "file", &backends.Request{Action: "write", Params: api.Params{"path": p, "content": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !strings.Contains(res.Output, "check mode only") {
		t.Errorf("forced check mode result: %+v", res)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("check-only write created the file: %v", err)
	}
	// Read-only actions run as usual.
	if _, err := r.Run(context.Background(), "file", &backends.Request{Action: "stat", Params: api.Params{"path": p}}); err != nil {
		t.Errorf("stat under check_only: %v", err)
	}
	_, err = r.Run(context.Background(), "exec", &backends.Request{Action: "run", Params: api.Params{"program": "tool"}})
	if !errors.Is(err, backends.ErrNotAllowed) {
		t.Errorf("check-only action without check mode: err = %v, want not allowed", err)
	}
}

// In a sandbox, rke2 unpacks releases under it whatever the install root
// configured.
func TestSandboxRKE2Root(t *testing.T) {
	sb := t.TempDir()
	r, err := New(Options{Sandbox: sb, RKE2InstallRoot: "/usr/local"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Get("rke2")
	if _, err := os.Stat(filepath.Join(sb, "rke2")); !os.IsNotExist(err) {
		t.Fatalf("sandbox rke2 root exists before any install: %v", err)
	}
	res, err := b.Run(context.Background(), &backends.Request{Action: "status", Params: api.Params{"mode": "server"}, Progress: func(int, string) {}})
	if err != nil || res.Facts["installed"] != false {
		t.Fatalf("status: %v %v", res, err)
	}
	if got := b.(*rke2.Backend).Root(); got != filepath.Join(sb, "rke2") {
		t.Errorf("rke2 install root %s in sandbox %s", got, sb)
	}
}
