package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fuzzSeeds are the job file examples of the design (flat, hierarchical,
// conditions) in YAML and JSON, plus near misses that exercise the error
// paths.
var fuzzSeeds = []string{
	// Flat (barrier-synchronized).
	`target:
  scope: group
  value: web
tasks:
  - backend: apt
    action: update
  - backend: apt
    action: install
    params: { package: nginx }
  - backend: systemd
    action: start
    params: { unit: nginx }
`,
	// Hierarchical (pipeline phases).
	`target:
  scope: group
  value: web
tasks:
  - tasks:
      - backend: apt
        action: update
      - backend: apt
        action: install
        params: { package: nginx }
      - backend: systemd
        action: enable
        params: { unit: nginx }
  - backend: systemd
    action: start
    params: { unit: nginx }
`,
	// Conditions and failure handling.
	`target:
  scope: all
strategy: fail-fast
tasks:
  - backend: apt
    action: install
    params: { package: myapp }
  - backend: systemd
    action: start
    params: { unit: myapp }
  - condition: on_failure
    tasks:
      - backend: apt
        action: remove
        params: { package: myapp }
`,
	// Every leaf field, typed params.
	`target: {scope: node, value: web-01}
strategy: continue
timeout: 10m
check_mode: true
tasks:
  - backend: ping
    action: sleep
    params: {duration: 5s, count: 3, force: true, list: [a, b, 1]}
    timeout: 30s
    max_retries: 2
    condition: always
`,
	`{"target": {"scope": "group", "value": "web"}, "tasks": [
  {"backend": "apt", "action": "install", "params": {"package": "curl"}},
  {"backend": "systemd", "action": "restart", "params": {"unit": "nginx"}}]}`,
	`{"target": {"scope": "any"}, "strategy": "continue", "timeout": "1h", "check_mode": true, "tasks": [
  {"tasks": [{"backend": "ping", "action": "echo", "params": {"message": "hi", "n": 1.5, "ok": false, "l": [1, "x", null]}}]},
  {"condition": "on_success", "backend": "ping", "action": "echo", "timeout": "1s", "max_retries": 3}]}`,
	// Near misses.
	`{"target": {"scope": "all"}, "tasks": []}`,
	`{"target": {"scope": "all"}, "tasks": [{"backend": "a", "action": "b"}]} {}`,
	`{"target": {"scope": "all"}, "tasks": [{"backend": "a", "action": "b", "bogus": 1}]}`,
	"target: {scope: all}\ntasks:\n  - tasks:\n      - tasks:\n          - {backend: a, action: b}\n",
	"target: {scope: all}\ntasks:\n  - {backend: a, action: b, params: {x: {y: z}}}\n",
	"target: {scope: all}\ntasks:\n  - {backend: a, action: b}\n---\ntarget: {scope: all}\n",
	"target: {scope: group, value: web..x}\ntasks: [{backend: a, action: b}]\n",
	"target: {scope: all}\ntasks: [{backend: a, action: b, timeout: -1s, max_retries: 11}]\n",
	"target: &t {scope: all}\nx: *t\n",
	"",
	"{",
}

func FuzzParseJobSpec(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	// The runnable examples are seeds too, so the corpus follows them.
	files, _ := filepath.Glob(filepath.Join("..", "examples", "jobs", "*"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil { //nolint:gosec // test seeds from the repository
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := ParseJobSpec(data)
		if err != nil {
			if spec != nil {
				t.Fatalf("ParseJobSpec returned a spec with error %v", err)
			}
			return
		}
		if err := spec.Job().Validate(); err != nil {
			t.Fatalf("parsed spec does not validate: %v", err)
		}
		// What a client sends must read back as the same job.
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseJobSpec(b)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
		if !reflect.DeepEqual(normalizeSpec(spec), normalizeSpec(again)) {
			t.Fatalf("round trip changed the spec:\nfirst  %#v\nsecond %#v\njson %s", spec, again, b)
		}
		if n, flat := LeafCount(spec.Tasks), Flatten(spec.Tasks); n != len(flat) {
			t.Fatalf("LeafCount %d != len(Flatten) %d", n, len(flat))
		} else {
			for i, s := range flat {
				if s.Index != i {
					t.Fatalf("flat step %d has index %d", i, s.Index)
				}
			}
		}
	})
}

// normalizeSpec maps empty params to nil: "params: {}" and no params are
// the same job, and omitempty drops the empty map on the way out.
func normalizeSpec(s *JobSpec) *JobSpec {
	cp := *s
	cp.Tasks = normalizePhases(s.Tasks)
	return &cp
}

func normalizePhases(ps []Phase) []Phase {
	if ps == nil {
		return nil
	}
	out := make([]Phase, len(ps))
	for i, p := range ps {
		if len(p.Params) == 0 {
			p.Params = nil
		}
		p.Tasks = normalizePhases(p.Tasks)
		out[i] = p
	}
	return out
}
