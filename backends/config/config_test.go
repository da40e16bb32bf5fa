package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

func newBackend(t *testing.T) (*Backend, *backends.Registry, string) {
	t.Helper()
	dir := t.TempDir()
	f, err := file.New(file.Options{AllowedPrefixes: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	b := New(f)
	return b, backends.NewRegistry().MustRegister(b), dir
}

func run(t *testing.T, r *backends.Registry, action string, check bool, p api.Params) (*backends.Result, error) {
	t.Helper()
	return r.Run(context.Background(), "config", &backends.Request{Action: action, CheckMode: check, Params: p})
}

func TestConformance(t *testing.T) {
	b, _, dir := newBackend(t)
	p := filepath.Join(dir, "app.yaml")
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{
			"get":    {"path": p, "key": "a.b"},
			"set":    {"path": p, "key": "a.b", "value": "1"},
			"delete": {"path": p, "key": "a.b"},
		},
		// value is the only free-text param: it must land in the file as
		// one value and read back the same, in every format.
		Literal: func(t *testing.T, action, param, value string) {
			if param != "value" {
				t.Errorf("%s.%s accepted %q", action, param, value)
				return
			}
			_, r, dir := newBackend(t)
			for _, ext := range []string{"ini", "yaml", "json", "toml"} {
				p := filepath.Join(dir, "c."+ext)
				if _, err := run(t, r, "set", false, api.Params{"path": p, "key": "s.k", "value": value, "create": "true"}); err != nil {
					t.Fatalf("%s: set: %v", ext, err)
				}
				res, err := run(t, r, "get", false, api.Params{"path": p, "key": "s.k"})
				if err != nil || res.Facts["value"] != value {
					t.Errorf("%s: get after set %q: %v %v", ext, value, res, err)
				}
			}
		},
	})
}

// step is one action on a file in a sequence; each changing step is run
// in check mode first, which must report the change with a diff and leave
// the file alone, then for real, then again to show it is idempotent.
type step struct {
	action string
	params api.Params
	// after is the whole file afterwards; for get, want is the value.
	after   string
	want    string
	changed bool
	err     string
}

func runSteps(t *testing.T, name, initial string, steps []step) {
	_, r, dir := newBackend(t)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(initial), 0o640); err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		params := api.Params{"path": p}
		for k, v := range s.params {
			params[k] = v
		}
		before, _ := os.ReadFile(p)
		if s.action == "get" {
			res, err := run(t, r, "get", false, params)
			if err != nil {
				t.Fatalf("step %d get: %v", i, err)
			}
			if got, _ := res.Facts["value"].(string); got != s.want || res.Facts["exists"] != (s.want != "") {
				t.Errorf("step %d get %s = %q (%v), want %q", i, s.params["key"], got, res.Facts["exists"], s.want)
			}
			continue
		}
		res, err := run(t, r, s.action, true, params)
		if s.err != "" {
			if err == nil || !strings.Contains(err.Error(), s.err) {
				t.Fatalf("step %d: err = %v, want %q", i, err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d check mode: %v", i, err)
		}
		if res.Changed != s.changed || (s.changed && !strings.Contains(res.Output, "\n@@ ")) {
			t.Errorf("step %d check mode: changed %v output %q", i, res.Changed, res.Output)
		}
		if now, _ := os.ReadFile(p); string(now) != string(before) {
			t.Fatalf("step %d: check mode changed the file", i)
		}
		res, err = run(t, r, s.action, false, params)
		if err != nil || res.Changed != s.changed {
			t.Fatalf("step %d %s: changed %v err %v, want changed %v", i, s.action, res != nil && res.Changed, err, s.changed)
		}
		if now, _ := os.ReadFile(p); string(now) != s.after {
			t.Errorf("step %d %s %v: file =\n%s\nwant\n%s", i, s.action, s.params, now, s.after)
		}
		if res, err := run(t, r, s.action, false, params); err != nil || res.Changed {
			t.Errorf("step %d: second run changed %v err %v", i, res != nil && res.Changed, err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
			t.Errorf("step %d: mode %o, want the file's 0640 kept", i, fi.Mode().Perm())
		}
	}
}

func TestINI(t *testing.T) {
	initial := "; global\nname = app\n\n[server]\n# the port it listens on\nport = 80\nhost = 0.0.0.0 # all\n"
	runSteps(t, "app.ini", initial, []step{
		{action: "get", params: api.Params{"key": "server.port"}, want: "80"},
		{action: "get", params: api.Params{"key": "server.host"}, want: "0.0.0.0 # all"},
		{action: "get", params: api.Params{"key": "name"}, want: "app"},
		{action: "get", params: api.Params{"key": "server.nope"}},
		{action: "set", params: api.Params{"key": "server.port", "value": "8080"}, changed: true,
			after: "; global\nname = app\n\n[server]\n# the port it listens on\nport = 8080\nhost = 0.0.0.0 # all\n"},
		{action: "set", params: api.Params{"key": "log.level", "value": "debug"}, changed: true,
			after: "; global\nname = app\n\n[server]\n# the port it listens on\nport = 8080\nhost = 0.0.0.0 # all\n\n[log]\nlevel = debug\n"},
		{action: "delete", params: api.Params{"key": "server.host"}, changed: true,
			after: "; global\nname = app\n\n[server]\n# the port it listens on\nport = 8080\n\n[log]\nlevel = debug\n"},
		{action: "delete", params: api.Params{"key": "server.host"},
			after: "; global\nname = app\n\n[server]\n# the port it listens on\nport = 8080\n\n[log]\nlevel = debug\n"},
	})
}

func TestYAML(t *testing.T) {
	initial := "# app config\nserver:\n  port: 80 # default\n  name: \"web\"\nfeatures: [a, b]\n"
	runSteps(t, "app.yaml", initial, []step{
		{action: "get", params: api.Params{"key": "server.port"}, want: "80"},
		{action: "get", params: api.Params{"key": "features"}, want: "[a, b]"},
		{action: "set", params: api.Params{"key": "server.port", "value": "8080", "type": "int"}, changed: true,
			after: "# app config\nserver:\n  port: 8080 # default\n  name: \"web\"\nfeatures: [a, b]\n"},
		{action: "set", params: api.Params{"key": "server.name", "value": "api"}, changed: true,
			after: "# app config\nserver:\n  port: 8080 # default\n  name: \"api\"\nfeatures: [a, b]\n"},
		{action: "set", params: api.Params{"key": "log.level", "value": "debug"}, changed: true,
			after: "# app config\nserver:\n  port: 8080 # default\n  name: \"api\"\nfeatures: [a, b]\nlog:\n  level: debug\n"},
		// A string that looks like a number stays a string.
		{action: "set", params: api.Params{"key": "log.id", "value": "007"}, changed: true,
			after: "# app config\nserver:\n  port: 8080 # default\n  name: \"api\"\nfeatures: [a, b]\nlog:\n  level: debug\n  id: \"007\"\n"},
		{action: "delete", params: api.Params{"key": "log.level"}, changed: true,
			after: "# app config\nserver:\n  port: 8080 # default\n  name: \"api\"\nfeatures: [a, b]\nlog:\n  id: \"007\"\n"},
		{action: "set", params: api.Params{"key": "features", "value": "x"}, err: "not a single value"},
		{action: "set", params: api.Params{"key": "server.port.x", "value": "x"}, err: "server.port is not a mapping"},
		{action: "set", params: api.Params{"key": "a", "value": "x", "type": "int"}, err: "not an int"},
	})
}

func TestJSON(t *testing.T) {
	initial := "{\n    \"zeta\": 1,\n    \"server\": {\"port\": 80, \"tls\": false},\n    \"list\": [1, 2]\n}\n"
	runSteps(t, "app.json", initial, []step{
		{action: "get", params: api.Params{"key": "server.port"}, want: "80"},
		{action: "get", params: api.Params{"key": "list"}, want: "[1,2]"},
		{action: "set", params: api.Params{"key": "server.port", "value": "8080", "type": "int"}, changed: true,
			after: "{\n    \"zeta\": 1,\n    \"server\": {\n        \"port\": 8080,\n        \"tls\": false\n    },\n    \"list\": [\n        1,\n        2\n    ]\n}\n"},
		{action: "set", params: api.Params{"key": "server.tls", "value": "true", "type": "bool"}, changed: true,
			after: "{\n    \"zeta\": 1,\n    \"server\": {\n        \"port\": 8080,\n        \"tls\": true\n    },\n    \"list\": [\n        1,\n        2\n    ]\n}\n"},
		{action: "set", params: api.Params{"key": "a.b", "value": "x"}, changed: true,
			after: "{\n    \"zeta\": 1,\n    \"server\": {\n        \"port\": 8080,\n        \"tls\": true\n    },\n    \"list\": [\n        1,\n        2\n    ],\n    \"a\": {\n        \"b\": \"x\"\n    }\n}\n"},
		{action: "delete", params: api.Params{"key": "zeta"}, changed: true,
			after: "{\n    \"server\": {\n        \"port\": 8080,\n        \"tls\": true\n    },\n    \"list\": [\n        1,\n        2\n    ],\n    \"a\": {\n        \"b\": \"x\"\n    }\n}\n"},
		{action: "set", params: api.Params{"key": "list", "value": "x"}, err: "not a single value"},
	})
}

func TestTOML(t *testing.T) {
	initial := "title = \"app\"\n\n[server]\nport = 80\n"
	runSteps(t, "app.toml", initial, []step{
		{action: "get", params: api.Params{"key": "server.port"}, want: "80"},
		{action: "set", params: api.Params{"key": "server.port", "value": "80", "type": "int"}, after: initial},
		{action: "set", params: api.Params{"key": "server.port", "value": "8080", "type": "int"}, changed: true,
			after: "title = 'app'\n\n[server]\nport = 8080\n"},
		{action: "set", params: api.Params{"key": "server.tls", "value": "true", "type": "bool"}, changed: true,
			after: "title = 'app'\n\n[server]\nport = 8080\ntls = true\n"},
		{action: "delete", params: api.Params{"key": "title"}, changed: true,
			after: "[server]\nport = 8080\ntls = true\n"},
	})
}

func TestRefusals(t *testing.T) {
	_, r, dir := newBackend(t)
	outside := filepath.Join(t.TempDir(), "x.yaml")
	if err := os.WriteFile(outside, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		action string
		params api.Params
		want   error
		msg    string
	}{
		{"get", api.Params{"path": outside, "key": "a"}, file.ErrOutside, ""},
		{"set", api.Params{"path": filepath.Join(dir, "link.yaml"), "key": "a", "value": "2"}, file.ErrOutside, ""},
		{"set", api.Params{"path": filepath.Join(dir, "x.txt"), "key": "a", "value": "2"}, nil, "set format"},
		{"set", api.Params{"path": filepath.Join(dir, "new.yaml"), "key": "a", "value": "2"}, nil, "set create=true"},
		{"get", api.Params{"path": filepath.Join(dir, "new.yaml"), "key": "a"}, nil, "does not exist"},
		{"set", api.Params{"path": filepath.Join(dir, "a.yaml"), "key": "a..b", "value": "2"}, backends.ErrInvalidParams, ""},
		{"set", api.Params{"path": filepath.Join(dir, "a.yaml"), "key": "a", "value": "2\n3"}, backends.ErrInvalidParams, ""},
	} {
		_, err := run(t, r, tc.action, false, tc.params)
		if tc.want != nil && !errors.Is(err, tc.want) || tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
			t.Errorf("%s %v: err = %v", tc.action, tc.params, err)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "a: 1\n" {
		t.Errorf("the file outside was changed: %q", got)
	}
	// A broken file is an error, not a rewrite.
	p := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(p, []byte("{\"a\": "), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, r, "set", false, api.Params{"path": p, "key": "a", "value": "1"}); err == nil || !strings.Contains(err.Error(), "parse json") {
		t.Errorf("broken json: %v", err)
	}
}

func TestCreate(t *testing.T) {
	_, r, dir := newBackend(t)
	for _, tc := range []struct{ name, want string }{
		{"new.yaml", "a:\n  b: 1\n"},
		{"new.json", "{\n  \"a\": {\n    \"b\": 1\n  }\n}\n"},
		{"new.toml", "[a]\nb = 1\n"},
		{"new.ini", "[a]\nb = 1\n"},
	} {
		p := filepath.Join(dir, tc.name)
		res, err := run(t, r, "set", false, api.Params{"path": p, "key": "a.b", "value": "1", "type": "int", "create": "true", "mode": "0600"})
		if err != nil || !res.Changed {
			t.Fatalf("%s: %v %v", tc.name, res, err)
		}
		got, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(got) != tc.want || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s = %q mode %o, want %q", tc.name, got, fi.Mode().Perm(), tc.want)
		}
	}
}
