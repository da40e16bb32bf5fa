package user

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// fake returns a backend whose programs are all fakeaccounts, and the
// directory its argv log is in.
func fake(t *testing.T) (*Backend, string) {
	t.Helper()
	bin := testbin.Build(t, "testdata/fakeaccounts")
	dir := t.TempDir()
	t.Setenv("FAKE_ACCOUNTS_DIR", dir)
	paths := map[string]string{}
	for _, n := range []string{"useradd", "usermod", "userdel", "groupadd", "groupmod", "groupdel", "getent", "id"} {
		p := filepath.Join(dir, n)
		if err := os.Symlink(bin, p); err != nil {
			t.Fatal(err)
		}
		paths[n] = p
	}
	return New(Options{UseraddPath: paths["useradd"], UsermodPath: paths["usermod"], UserdelPath: paths["userdel"],
		GroupaddPath: paths["groupadd"], GroupmodPath: paths["groupmod"], GroupdelPath: paths["groupdel"],
		GetentPath: paths["getent"], IDPath: paths["id"]}), dir
}

func argvLog(t *testing.T, dir string) [][]string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "argv.log"))
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var a []string
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func newKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	k := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	if comment != "" {
		k += " " + comment
	}
	return k
}

func TestConformance(t *testing.T) {
	b, dir := fake(t)
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{
			"present": {"name": "alice"}, "absent": {"name": "alice"},
			"group_present": {"name": "ops"}, "group_absent": {"name": "ops"},
			"authorized_key": {"user": "alice", "key": newKey(t, "alice@laptop")},
		},
		Blocking: func(t *testing.T) *backends.Request {
			return &backends.Request{Action: "present", Params: api.Params{"name": "blocked"}}
		},
		// comment is the one free-text param: it must reach useradd as one
		// argv element.
		Literal: func(t *testing.T, action, param, value string) {
			if param != "comment" {
				t.Errorf("%s.%s accepted %q", action, param, value)
				return
			}
			r := backends.NewRegistry().MustRegister(b)
			if _, err := r.Run(context.Background(), "user", &backends.Request{Action: action, Params: api.Params{"name": "alice", "comment": value}}); err != nil {
				t.Fatal(err)
			}
			var last []string
			for _, a := range argvLog(t, dir) {
				if a[0] == "useradd" || a[0] == "usermod" {
					last = a
				}
			}
			i := slices.Index(last, "--comment")
			if last == nil || i < 0 || last[i+1] != value || last[len(last)-1] != "alice" || last[len(last)-2] != "--" {
				t.Errorf("useradd/usermod argv %q, want --comment %q as one element and -- alice last", last, value)
			}
		},
	})
}

func TestParamPatterns(t *testing.T) {
	b, _ := fake(t)
	r := backends.NewRegistry().MustRegister(b)
	key := newKey(t, "a b c")
	for _, tc := range []struct {
		action string
		params api.Params
		ok     bool
	}{
		{"present", api.Params{"name": "deploy"}, true},
		{"present", api.Params{"name": "-rf"}, false},
		{"present", api.Params{"name": "Root"}, false},
		{"present", api.Params{"name": "a", "uid": "-1"}, false},
		{"present", api.Params{"name": "a", "groups": "sudo,docker"}, true},
		{"present", api.Params{"name": "a", "groups": "sudo,-G"}, false},
		{"present", api.Params{"name": "a", "shell": "/bin/bash"}, true},
		{"present", api.Params{"name": "a", "shell": "bash"}, false},
		{"present", api.Params{"name": "a", "home": "/home/a b"}, false},
		{"present", api.Params{"name": "a", "comment": "A: B"}, false},
		{"authorized_key", api.Params{"user": "a", "key": key}, true},
		{"authorized_key", api.Params{"user": "a", "key": key + "\n" + newKey(t, "")}, true},
		{"authorized_key", api.Params{"user": "a", "key": "command=\"/bin/sh\" " + key}, false},
		{"authorized_key", api.Params{"user": "a", "key": "ssh-dss AAAAB3 x"}, false},
		{"authorized_key", api.Params{"user": "a", "key": key, "state": "exclusive"}, true},
	} {
		_, err := r.Prepare("user", &backends.Request{Action: tc.action, Params: tc.params})
		if (err == nil) != tc.ok {
			t.Errorf("%s %v: err = %v, want ok=%v", tc.action, tc.params, err, tc.ok)
		}
	}
	// A key that matches the pattern but is not a key is refused before
	// anything runs.
	_, err := r.Run(context.Background(), "user", &backends.Request{Action: "authorized_key", Params: api.Params{"user": "a", "key": "ssh-ed25519 AAAAnotakey"}})
	if err == nil || !strings.Contains(err.Error(), "key") {
		t.Errorf("bogus key: %v", err)
	}
}

func TestUserArgs(t *testing.T) {
	cur := &account{name: "alice", uid: 1001, gid: 1001, comment: "Alice", home: "/home/alice", shell: "/bin/sh"}
	for _, tc := range []struct {
		name      string
		params    api.Params
		cur       *account
		groups    []string
		groupGID  int
		args      []string
		changeStr string
	}{
		{"create minimal", api.Params{"name": "bob", "create_home": "true"}, nil, nil, -1,
			[]string{"--create-home", "--", "bob"}, "created"},
		{"create full", api.Params{"name": "bob", "uid": "1500", "group": "staff", "groups": "b,a", "shell": "/bin/bash", "home": "/srv/bob", "comment": "Bob", "system": "true", "create_home": "false"}, nil, nil, 50,
			[]string{"--system", "--no-create-home", "--uid", "1500", "--gid", "staff", "--shell", "/bin/bash", "--home-dir", "/srv/bob", "--comment", "Bob", "--groups", "b,a", "--", "bob"},
			"created,uid,group,shell,home,comment,groups"},
		{"nothing differs", api.Params{"name": "alice", "uid": "1001", "shell": "/bin/sh", "comment": "Alice", "groups": "a,b"}, cur, []string{"a", "b"}, -1, nil, ""},
		{"shell and comment", api.Params{"name": "alice", "shell": "/bin/bash", "comment": ""}, cur, nil, -1,
			[]string{"--shell", "/bin/bash", "--comment", "", "--", "alice"}, "shell,comment"},
		{"primary group by gid", api.Params{"name": "alice", "group": "staff"}, cur, nil, 50, []string{"--gid", "staff", "--", "alice"}, "group"},
		{"primary group already", api.Params{"name": "alice", "group": "alice"}, cur, nil, 1001, nil, ""},
		{"groups exact", api.Params{"name": "alice", "groups": "c,a"}, cur, []string{"a", "b"}, -1, []string{"--groups", "a,c", "--", "alice"}, "groups"},
		{"groups empty removes all", api.Params{"name": "alice", "groups": ""}, cur, []string{"a"}, -1, []string{"--groups", "", "--", "alice"}, "groups"},
		{"groups append", api.Params{"name": "alice", "groups": "c,a", "append": "true"}, cur, []string{"a", "b"}, -1, []string{"--append", "--groups", "c", "--", "alice"}, "groups"},
		{"groups append, all there", api.Params{"name": "alice", "groups": "a", "append": "true"}, cur, []string{"a", "b"}, -1, nil, ""},
		{"uid", api.Params{"name": "alice", "uid": "2000"}, cur, nil, -1, []string{"--uid", "2000", "--", "alice"}, "uid"},
		// The primary group in groups is not a difference.
		{"primary group in groups", api.Params{"name": "alice", "groups": "alice,a"}, cur, []string{"a"}, -1, nil, ""},
		{"new primary group in groups", api.Params{"name": "alice", "group": "staff", "groups": "staff,a"}, cur, []string{"a"}, 50, []string{"--gid", "staff", "--", "alice"}, "group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, changes := userArgs(tc.params, tc.cur, tc.groups, "alice", tc.groupGID)
			if !slices.Equal(args, tc.args) || strings.Join(changes, ",") != tc.changeStr {
				t.Errorf("args %q changes %v, want %q %s", args, changes, tc.args, tc.changeStr)
			}
		})
	}
}

func TestWriteKeys(t *testing.T) {
	home := t.TempDir()
	acct := &account{name: "me", home: home, uid: os.Getuid(), gid: os.Getgid()}
	k1, k2, k3 := newKey(t, "one"), newKey(t, "two"), newKey(t, "three")
	path := filepath.Join(home, ".ssh", "authorized_keys")
	step := func(keys, state string, check, changed bool, want string) {
		t.Helper()
		ks, err := parseKeys(keys)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(path)
		res, err := writeKeys(&backends.Request{CheckMode: check}, acct, ks, state)
		if err != nil {
			t.Fatalf("%s %v: %v", state, check, err)
		}
		if res.Changed != changed {
			t.Errorf("%s check=%v: changed %v, want %v (%s)", state, check, res.Changed, changed, res.Output)
		}
		got, _ := os.ReadFile(path)
		if check {
			if string(got) != string(before) {
				t.Errorf("check mode changed the file")
			}
			if changed && !strings.Contains(res.Output, "@@") {
				t.Errorf("check mode shows no diff: %s", res.Output)
			}
			return
		}
		if string(got) != want {
			t.Errorf("%s: file =\n%s\nwant\n%s", state, got, want)
		}
		for p, mode := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
				t.Errorf("%s: mode %v, want %o", p, fi, mode)
			}
		}
	}
	step(k1, "present", true, true, "")
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("check mode made .ssh: %v", err)
	}
	step(k1, "present", false, true, k1+"\n")
	step(k1, "present", false, false, k1+"\n")
	// The same key with another comment is the same key.
	step(strings.TrimSuffix(k1, " one")+" other", "present", false, false, k1+"\n")
	step(k2+"\n"+k1, "present", false, true, k1+"\n"+k2+"\n")
	// Lines the backend does not manage are kept by present and absent.
	must(t, os.WriteFile(path, []byte("# team keys\n"+k1+"\n"+k2+"\n"), 0o600))
	step(k1, "absent", true, true, "")
	step(k1, "absent", false, true, "# team keys\n"+k2+"\n")
	step(k1, "absent", false, false, "# team keys\n"+k2+"\n")
	step(k3+"\n"+k2, "exclusive", false, true, k3+"\n"+k2+"\n")
	step(k3+"\n"+k2, "exclusive", false, false, k3+"\n"+k2+"\n")
	// Wrong modes are fixed, and that is a change.
	must(t, os.Chmod(path, 0o644))
	step(k3, "present", false, true, k3+"\n"+k2+"\n")
	step(k3, "present", false, false, k3+"\n"+k2+"\n")
}

// A user who points ~/.ssh or ~/.ssh/authorized_keys at a file of root's
// does not get it written.
func TestWriteKeysSymlinks(t *testing.T) {
	k := newKey(t, "")
	ks, _ := parseKeys(k)
	for _, tc := range []struct {
		name  string
		setup func(home, target string)
	}{
		{".ssh is a symlink", func(home, target string) { must(t, os.Symlink(target, filepath.Join(home, ".ssh"))) }},
		{"authorized_keys is a symlink", func(home, target string) {
			must(t, os.Mkdir(filepath.Join(home, ".ssh"), 0o700))
			must(t, os.Symlink(filepath.Join(target, "authorized_keys"), filepath.Join(home, ".ssh", "authorized_keys")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, target := t.TempDir(), t.TempDir()
			must(t, os.WriteFile(filepath.Join(target, "authorized_keys"), []byte("root's\n"), 0o600))
			tc.setup(home, target)
			_, err := writeKeys(&backends.Request{}, &account{name: "me", home: home, uid: os.Getuid(), gid: os.Getgid()}, ks, "present")
			if err == nil {
				t.Errorf("write through a symlink succeeded")
			}
			if got, _ := os.ReadFile(filepath.Join(target, "authorized_keys")); string(got) != "root's\n" {
				t.Errorf("the target was changed: %q", got)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
