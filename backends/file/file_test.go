package file

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

func newBackend(t *testing.T) (*backends.Registry, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := New(Options{AllowedPrefixes: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	return backends.NewRegistry().MustRegister(b), dir
}

func run(t *testing.T, r *backends.Registry, action string, check bool, p api.Params) (*backends.Result, error) {
	t.Helper()
	return r.Run(context.Background(), "file", &backends.Request{Action: action, CheckMode: check, Params: p})
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	b, err := New(Options{AllowedPrefixes: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "f")
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{
			"write": {"path": p}, "remove": {"path": p}, "stat": {"path": p}, "mkdir": {"path": filepath.Join(dir, "d")},
			"read": {"path": p}, "line": {"path": p, "line": "x"}, "block": {"path": p},
			"copy": {"path": p, "url": "https://example.invalid/f", "sha256": strings.Repeat("0", 64)},
		},
		Literal: func(t *testing.T, action, param, value string) {
			r := backends.NewRegistry().MustRegister(b)
			switch {
			case action == "line" && (param == "regexp" || param == "insert_after"):
				// A pattern is compiled as RE2 and matched; one that does not
				// compile is a clear error, never anything run.
				_ = os.WriteFile(p, []byte("a\n"), 0o644)
				_, err := run(t, r, "line", false, api.Params{"path": p, "line": "x", param: value})
				if err != nil && !strings.Contains(err.Error(), "error parsing regexp") {
					t.Errorf("line with %s %q: %v", param, value, err)
				}
				return
			case action == "line" && param == "line", action == "block" && param == "block":
				_ = os.WriteFile(p, nil, 0o644)
				if _, err := run(t, r, action, false, api.Params{"path": p, param: value}); err != nil {
					t.Fatalf("%s: %v", action, err)
				}
				if got, _ := os.ReadFile(p); !strings.Contains(string(got), value) {
					t.Errorf("%s %s: file %q does not hold %q", action, param, got, value)
				}
				return
			}
			if action != "write" || param != "content" {
				t.Errorf("%s.%s accepted %q", action, param, value)
				return
			}
			if _, err := run(t, r, "write", false, api.Params{"path": p, "content": value}); err != nil {
				t.Fatalf("write: %v", err)
			}
			if got, _ := os.ReadFile(p); string(got) != value {
				t.Errorf("content = %q, want %q", got, value)
			}
		},
	})
}

func TestWrite(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "app.conf")
	for _, tc := range []struct {
		name    string
		params  api.Params
		check   bool
		changed bool
		content string // on disk afterwards ("" with exists=false: absent)
		mode    os.FileMode
	}{
		{"check on missing file", api.Params{"content": "a=1\n"}, true, true, "", 0},
		{"create", api.Params{"content": "a=1\n"}, false, true, "a=1\n", 0o644},
		{"same again", api.Params{"content": "a=1\n"}, false, false, "a=1\n", 0o644},
		{"same in check mode", api.Params{"content": "a=1\n", "mode": "0644"}, true, false, "a=1\n", 0o644},
		{"mode only, check", api.Params{"content": "a=1\n", "mode": "600"}, true, true, "a=1\n", 0o644},
		{"mode only", api.Params{"content": "a=1\n", "mode": "600"}, false, true, "a=1\n", 0o600},
		{"new content", api.Params{"content": "a=2\n", "mode": "0600"}, false, true, "a=2\n", 0o600},
		{"base64", api.Params{"content": "AAEC/w==", "encoding": "base64", "mode": "0600"}, false, true, "\x00\x01\x02\xff", 0o600},
		{"base64 same", api.Params{"content": "AAEC/w==", "encoding": "base64", "mode": "0600"}, false, false, "\x00\x01\x02\xff", 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.params["path"] = p
			res, err := run(t, r, "write", tc.check, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed != tc.changed {
				t.Errorf("changed = %v, want %v", res.Changed, tc.changed)
			}
			got, err := os.ReadFile(p)
			if tc.mode == 0 {
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("file exists after check mode: %v", err)
				}
				return
			}
			if string(got) != tc.content {
				t.Errorf("content = %q, want %q", got, tc.content)
			}
			fi, _ := os.Stat(p)
			if fi.Mode().Perm() != tc.mode {
				t.Errorf("mode = %o, want %o", fi.Mode().Perm(), tc.mode)
			}
			if res.Facts["sha256"] != sum(tc.content) || res.Facts["size"] != len(tc.content) || res.Facts["path"] != p {
				t.Errorf("facts = %v", res.Facts)
			}
		})
	}
}

// A write replaces the file by rename: a reader holding the old file keeps
// the old content, and no temp file is left behind.
func TestWriteAtomic(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "f")
	if _, err := run(t, r, "write", false, api.Params{"path": p, "content": "old"}); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var before syscall.Stat_t
	if err := syscall.Stat(p, &before); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, r, "write", false, api.Params{"path": p, "content": "new"}); err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(p, &after); err != nil {
		t.Fatal(err)
	}
	if before.Ino == after.Ino {
		t.Errorf("inode unchanged: the file was rewritten in place")
	}
	buf := make([]byte, 8)
	n, _ := old.Read(buf)
	if string(buf[:n]) != "old" {
		t.Errorf("old handle reads %q", buf[:n])
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want just the file", len(ents))
	}
}

func TestConfinement(t *testing.T) {
	r, dir := newBackend(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(dir, "linkdir")))
	must(os.Symlink(secret, filepath.Join(dir, "linkfile")))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Symlink(filepath.Join(dir, "sub"), filepath.Join(dir, "inlink")))

	for _, tc := range []struct {
		action, path string
		ok           bool
	}{
		{"write", filepath.Join(outside, "x"), false},
		{"write", dir + "/../" + filepath.Base(outside) + "/x", false},
		{"write", filepath.Join(dir, "linkdir", "x"), false},
		{"write", filepath.Join(dir, "linkfile"), false},
		{"stat", filepath.Join(dir, "linkfile"), false},
		{"stat", filepath.Join(dir, "linkdir", "secret"), false},
		{"mkdir", filepath.Join(dir, "linkdir", "a", "b"), false},
		{"remove", filepath.Join(dir, "linkdir", "secret"), false},
		{"stat", "/etc/passwd", false},
		{"write", filepath.Join(dir, "inlink", "x"), true}, // a link that stays inside
		{"stat", dir, true},
		{"mkdir", filepath.Join(dir, "new", "deep"), true},
	} {
		_, err := run(t, r, tc.action, false, api.Params{"path": tc.path})
		if tc.ok && err != nil {
			t.Errorf("%s %s: %v", tc.action, tc.path, err)
		}
		if !tc.ok && !errors.Is(err, ErrOutside) {
			t.Errorf("%s %s: err = %v, want ErrOutside", tc.action, tc.path, err)
		}
	}
	// Removing the link removes the link, not what it points at.
	res, err := run(t, r, "remove", false, api.Params{"path": filepath.Join(dir, "linkfile")})
	if err != nil || !res.Changed {
		t.Fatalf("remove link: %v %+v", err, res)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("target of a removed link is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "x")); err != nil {
		t.Errorf("write through an inside link: %v", err)
	}
	if _, err := run(t, r, "remove", false, api.Params{"path": dir, "recursive": "true"}); err == nil {
		t.Errorf("removing the prefix itself succeeded")
	}
}

func TestNoPrefixes(t *testing.T) {
	b, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := backends.NewRegistry().MustRegister(b)
	_, err = run(t, r, "stat", false, api.Params{"path": "/tmp"})
	if err == nil || !strings.Contains(err.Error(), "no allowed path prefixes") {
		t.Errorf("err = %v, want a clear refusal", err)
	}
	if _, err := New(Options{AllowedPrefixes: []string{"relative/dir"}}); err == nil {
		t.Errorf("relative prefix accepted")
	}
}

func TestRemoveAndMkdir(t *testing.T) {
	r, dir := newBackend(t)
	d := filepath.Join(dir, "a", "b")
	steps := []struct {
		action  string
		params  api.Params
		check   bool
		changed bool
		wantErr string
		exists  bool // d exists afterwards
	}{
		{"mkdir", api.Params{"path": d, "parents": "false"}, false, false, "parents=true", false},
		{"mkdir", api.Params{"path": d}, true, true, "", false},
		{"mkdir", api.Params{"path": d, "mode": "0750"}, false, true, "", true},
		{"mkdir", api.Params{"path": d, "mode": "0750"}, false, false, "", true},
		{"mkdir", api.Params{"path": d, "mode": "0700"}, false, true, "", true},
		{"write", api.Params{"path": d + "/f", "content": "x"}, false, true, "", true},
		{"remove", api.Params{"path": d}, false, false, "recursive=true", true},
		{"remove", api.Params{"path": d, "recursive": "true"}, true, true, "", true},
		{"remove", api.Params{"path": d, "recursive": "true"}, false, true, "", false},
		{"remove", api.Params{"path": d}, false, false, "", false},
	}
	for i, s := range steps {
		res, err := run(t, r, s.action, s.check, s.params)
		if s.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), s.wantErr) {
				t.Errorf("step %d %s: err = %v, want %q", i, s.action, err, s.wantErr)
			}
		} else if err != nil {
			t.Errorf("step %d %s: %v", i, s.action, err)
		} else if res.Changed != s.changed {
			t.Errorf("step %d %s: changed = %v, want %v", i, s.action, res.Changed, s.changed)
		}
		_, err = os.Stat(d)
		if (err == nil) != s.exists {
			t.Errorf("step %d %s: exists = %v, want %v", i, s.action, err == nil, s.exists)
		}
	}
	if _, err := run(t, r, "write", false, api.Params{"path": filepath.Join(dir, "a")}); err == nil {
		t.Errorf("writing over a directory succeeded")
	}
}

func TestStat(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "f")
	res, err := run(t, r, "stat", false, api.Params{"path": p})
	if err != nil || res.Facts["exists"] != false {
		t.Fatalf("stat missing: %v %+v", err, res)
	}
	if err := os.WriteFile(p, []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	res, err = run(t, r, "stat", false, api.Params{"path": p})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"exists": true, "type": "file", "size": int64(5), "mode": "0640", "sha256": sum("hello"), "uid": os.Getuid()}
	for k, v := range want {
		if res.Facts[k] != v {
			t.Errorf("facts[%s] = %v (%T), want %v", k, res.Facts[k], res.Facts[k], v)
		}
	}
}

func TestOwner(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "f")
	uid, gid := os.Getuid(), os.Getgid()
	params := api.Params{"path": p, "content": "x", "owner": strconv.Itoa(uid), "group": strconv.Itoa(gid)}
	if res, err := run(t, r, "write", false, params); err != nil || !res.Changed {
		t.Fatalf("write: %v %+v", err, res)
	}
	if res, err := run(t, r, "write", false, params); err != nil || res.Changed {
		t.Fatalf("write again: %v %+v", err, res)
	}
	params["owner"] = "grid-no-such-user"
	if _, err := run(t, r, "write", false, params); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("unknown owner: err = %v", err)
	}
}
