package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

// The agent's own secrets (its key in data_dir, its join token) may lie
// under an allowed prefix (/var/lib, /etc): no action may read, replace
// or remove them, since whoever holds them can act as the node. Reached
// directly, through a symlink, or by removing a directory above them.
func TestDeniedPrefixesAreRefused(t *testing.T) {
	prefix := t.TempDir()
	data := filepath.Join(prefix, "lib", "grid")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(data, "agent.key")
	if err := os.WriteFile(key, []byte("SECRET KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(key, filepath.Join(prefix, "innocent")); err != nil {
		t.Fatal(err)
	}
	b, err := file.New(file.Options{AllowedPrefixes: []string{prefix}, DeniedPrefixes: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	reg := backends.NewRegistry().MustRegister(b)
	for _, tc := range []struct {
		name   string
		action string
		params api.Params
	}{
		{"read the key", "read", api.Params{"path": key}},
		{"read through a symlink", "read", api.Params{"path": filepath.Join(prefix, "innocent")}},
		{"read via ..", "read", api.Params{"path": filepath.Join(prefix, "lib", "x", "..", "grid", "agent.key")}},
		{"stat the key", "stat", api.Params{"path": key}},
		{"replace the key", "write", api.Params{"path": key, "content": "mine"}},
		{"remove data_dir", "remove", api.Params{"path": data, "recursive": "true"}},
		{"remove a parent of data_dir", "remove", api.Params{"path": filepath.Join(prefix, "lib"), "recursive": "true"}},
		{"edit the key", "line", api.Params{"path": key, "line": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := reg.Run(context.Background(), "file", &backends.Request{Action: tc.action, Params: tc.params})
			if !errors.Is(err, file.ErrOutside) {
				out := ""
				if res != nil {
					out = res.Output
				}
				t.Fatalf("got %v (output %q), want %v", err, out, file.ErrOutside)
			}
		})
	}
	if got, err := os.ReadFile(key); err != nil || string(got) != "SECRET KEY" {
		t.Fatalf("the key is now %q, %v", got, err)
	}
	// The rest of the prefix still works.
	other := filepath.Join(prefix, "app.conf")
	if _, err := reg.Run(context.Background(), "file", &backends.Request{Action: "write", Params: api.Params{"path": other, "content": "ok"}}); err != nil {
		t.Fatalf("write beside the denied directory: %v", err)
	}
}

// A link under the prefix into /proc/self/root (the agent's root seen
// through procfs), or a path that climbs out with "..", leads outside the
// prefix and is refused like any other.
func TestProcSelfRootAndDotDotAreOutside(t *testing.T) {
	prefix := t.TempDir()
	if err := os.Symlink("/proc/self/root/etc", filepath.Join(prefix, "etc")); err != nil {
		t.Fatal(err)
	}
	b, err := file.New(file.Options{AllowedPrefixes: []string{prefix}})
	if err != nil {
		t.Fatal(err)
	}
	reg := backends.NewRegistry().MustRegister(b)
	for _, tc := range []struct{ action, path string }{
		{"read", filepath.Join(prefix, "etc", "passwd")},
		{"write", filepath.Join(prefix, "etc", "grid-test-should-not-exist")},
		{"read", prefix + "/../../../../etc/passwd"},
		{"read", "/proc/self/root" + prefix + "/../../../etc/passwd"},
	} {
		params := api.Params{"path": tc.path}
		if tc.action == "write" {
			params["content"] = "x"
		}
		res, err := reg.Run(context.Background(), "file", &backends.Request{Action: tc.action, Params: params})
		if !errors.Is(err, file.ErrOutside) {
			out := ""
			if res != nil {
				out = res.Output
			}
			t.Errorf("%s %s: got %v (output %.40q), want %v", tc.action, tc.path, err, out, file.ErrOutside)
		}
	}
	if _, err := os.Stat("/etc/grid-test-should-not-exist"); err == nil {
		t.Fatal("a file was written in /etc")
	}
}

// A sandbox inside the agent's data directory (grid dev and test fleets
// keep it there) is the jobs' own: allowed on purpose, so writing in it
// works, while the key beside it and a symlink out of the sandbox to it
// stay refused.
func TestSandboxInsideDeniedDataDir(t *testing.T) {
	data := t.TempDir()
	sandbox := filepath.Join(data, "sandbox")
	if err := os.MkdirAll(sandbox, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(data, "agent.key")
	if err := os.WriteFile(key, []byte("SECRET KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(key, filepath.Join(sandbox, "innocent")); err != nil {
		t.Fatal(err)
	}
	b, err := file.New(file.Options{AllowedPrefixes: []string{sandbox}, DeniedPrefixes: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	reg := backends.NewRegistry().MustRegister(b)
	ctx := context.Background()
	if _, err := reg.Run(ctx, "file", &backends.Request{Action: "write", Params: api.Params{"path": filepath.Join(sandbox, "motd"), "content": "hi"}}); err != nil {
		t.Fatalf("write in the sandbox: %v", err)
	}
	for _, p := range []string{key, filepath.Join(sandbox, "innocent")} {
		if _, err := reg.Run(ctx, "file", &backends.Request{Action: "read", Params: api.Params{"path": p}}); !errors.Is(err, file.ErrOutside) {
			t.Errorf("read %s: %v, want %v", p, err, file.ErrOutside)
		}
	}
	if _, err := reg.Run(ctx, "file", &backends.Request{Action: "remove", Params: api.Params{"path": filepath.Join(sandbox, "motd")}}); err != nil {
		t.Errorf("remove a file in the sandbox: %v", err)
	}
}
