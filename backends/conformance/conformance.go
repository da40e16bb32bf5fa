// Package conformance is the test suite every backend passes: a well-formed
// schema, refusal of unknown actions and params and of missing required
// params, check mode refused where unsupported, prompt return on
// cancellation, and no shell — a param carrying shell metacharacters is
// either refused by the schema or handed over as one literal value.
package conformance

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Suite describes one backend to the conformance tests.
type Suite struct {
	Backend backends.Backend
	// Samples holds, per action, params that pass the schema (they are not
	// run). Every action with a required param needs a sample; actions
	// without one default to no params.
	Samples map[string]api.Params
	// Blocking returns a request that blocks until its context is
	// cancelled, or nil when the backend has no action that can block.
	Blocking func(t *testing.T) *backends.Request
	// Literal runs action with param set to value (a hostile value the
	// schema accepted) and must fail the test unless the value reached its
	// destination (a program's argv or stdin, a file) as one literal
	// value. Required when any hostile value passes the schema.
	Literal func(t *testing.T, action, param, value string)
}

// Hostile returns values a shell would interpret. canary is a path that a
// shell running one of them would create.
func Hostile(canary string) []string {
	return []string{
		"; rm -rf /",
		"$(touch " + canary + ")",
		"`touch " + canary + "`",
		"x\ntouch " + canary,
		"a && touch " + canary,
		"a | touch " + canary,
		"> " + canary,
		"-rf",
		"--help",
		"' \" \\",
	}
}

// Run runs every conformance test against s.
func Run(t *testing.T, s Suite) {
	t.Helper()
	schema := s.Backend.Schema()
	t.Run("schema", func(t *testing.T) { testSchema(t, s, schema) })
	t.Run("unknown", func(t *testing.T) { testUnknown(t, s, schema) })
	t.Run("required", func(t *testing.T) { testRequired(t, s, schema) })
	t.Run("checkmode", func(t *testing.T) { testCheckMode(t, s, schema) })
	t.Run("cancel", func(t *testing.T) { testCancel(t, s, schema) })
	t.Run("noshell", func(t *testing.T) { testNoShell(t, s, schema) })
}

func registry(t *testing.T, b backends.Backend) *backends.Registry {
	t.Helper()
	r := backends.NewRegistry()
	// Enable dangerous actions too: the suite checks params, not policy.
	allow, err := backends.ParseAllowlist([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetAllowlist(allow)
	if err := r.Register(b); err != nil {
		t.Fatalf("register: %v", err)
	}
	return r
}

func sample(s Suite, action string) api.Params {
	return maps.Clone(s.Samples[action])
}

func testSchema(t *testing.T, s Suite, schema api.BackendSchema) {
	if err := schema.Check(); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if schema.Description == "" {
		t.Errorf("backend %s has no description", schema.Name)
	}
	for _, a := range schema.Actions {
		if a.Description == "" {
			t.Errorf("%s.%s has no description", schema.Name, a.Name)
		}
		if a.ReadOnly && a.Dangerous {
			t.Errorf("%s.%s is read-only and dangerous at once", schema.Name, a.Name)
		}
		for _, p := range a.Params {
			if p.Description == "" {
				t.Errorf("%s.%s param %s has no description", schema.Name, a.Name, p.Name)
			}
			if p.Required && p.Default != "" {
				t.Errorf("%s.%s param %s is required and has a default", schema.Name, a.Name, p.Name)
			}
		}
		// The sample must pass, or the tests built on it prove nothing.
		req := &backends.Request{Action: a.Name, Params: sample(s, a.Name)}
		if _, err := registry(t, s.Backend).Prepare(schema.Name, req); err != nil {
			t.Errorf("sample params for %s.%s do not pass the schema: %v", schema.Name, a.Name, err)
		}
	}
	for name := range s.Samples {
		if _, ok := schema.Action(name); !ok {
			t.Errorf("sample for unknown action %s", name)
		}
	}
}

func testUnknown(t *testing.T, s Suite, schema api.BackendSchema) {
	r := registry(t, s.Backend)
	_, err := r.Run(context.Background(), schema.Name, &backends.Request{Action: "no-such-action"})
	if !errors.Is(err, backends.ErrUnknownAction) {
		t.Errorf("unknown action: got %v, want ErrUnknownAction", err)
	}
	for _, a := range schema.Actions {
		p := sample(s, a.Name)
		if p == nil {
			p = api.Params{}
		}
		p["no_such_param"] = "x"
		_, err := r.Run(context.Background(), schema.Name, &backends.Request{Action: a.Name, Params: p})
		var pe *api.ParamError
		if !errors.Is(err, backends.ErrInvalidParams) || !errors.As(err, &pe) || pe.Param != "no_such_param" {
			t.Errorf("%s.%s with unknown param: got %v, want ErrInvalidParams naming no_such_param", schema.Name, a.Name, err)
		}
	}
	// Called directly, past the Registry, a backend still refuses what it
	// does not know rather than doing something.
	if _, err := s.Backend.Run(context.Background(), &backends.Request{Action: "no-such-action", Progress: func(int, string) {}}); err == nil {
		t.Errorf("Run with an unknown action succeeded")
	}
}

func testRequired(t *testing.T, s Suite, schema api.BackendSchema) {
	r := registry(t, s.Backend)
	for _, a := range schema.Actions {
		for _, p := range a.Params {
			if !p.Required {
				continue
			}
			params := sample(s, a.Name)
			delete(params, p.Name)
			_, err := r.Run(context.Background(), schema.Name, &backends.Request{Action: a.Name, Params: params})
			var pe *api.ParamError
			if !errors.Is(err, backends.ErrInvalidParams) || !errors.As(err, &pe) || pe.Param != p.Name {
				t.Errorf("%s.%s without %s: got %v, want ErrInvalidParams naming it", schema.Name, a.Name, p.Name, err)
			}
		}
	}
}

func testCheckMode(t *testing.T, s Suite, schema api.BackendSchema) {
	r := registry(t, s.Backend)
	for _, a := range schema.Actions {
		if a.CheckMode || a.ReadOnly {
			continue
		}
		_, err := r.Run(context.Background(), schema.Name, &backends.Request{Action: a.Name, Params: sample(s, a.Name), CheckMode: true})
		if !errors.Is(err, backends.ErrCheckMode) {
			t.Errorf("%s.%s in check mode: got %v, want ErrCheckMode", schema.Name, a.Name, err)
		}
	}
}

func testCancel(t *testing.T, s Suite, schema api.BackendSchema) {
	if s.Blocking == nil {
		t.Skipf("backend %s has no action that blocks", schema.Name)
	}
	req := s.Blocking(t)
	r := registry(t, s.Backend)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := r.Run(ctx, schema.Name, req)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("blocking request returned before cancellation: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("cancelled request returned no error")
		} else if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled request: error %v does not wrap context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("request still running 10s after cancellation (started %s ago)", time.Since(start))
	}
}

func testNoShell(t *testing.T, s Suite, schema api.BackendSchema) {
	canary := filepath.Join(t.TempDir(), "pwned")
	r := registry(t, s.Backend)
	for _, a := range schema.Actions {
		for _, p := range a.Params {
			if p.Type != api.TypeString && p.Type != api.TypeList {
				continue
			}
			for _, v := range Hostile(canary) {
				params := sample(s, a.Name)
				if params == nil {
					params = api.Params{}
				}
				params[p.Name] = v
				req := &backends.Request{Action: a.Name, Params: params}
				if _, err := r.Prepare(schema.Name, req); err != nil {
					continue // refused by the schema
				}
				if len(p.Enum) > 0 {
					t.Fatalf("%s.%s param %s: enum accepted %q", schema.Name, a.Name, p.Name, v)
				}
				if s.Literal == nil {
					t.Errorf("%s.%s param %s accepts %q, and the suite has no Literal hook to prove it is passed literally",
						schema.Name, a.Name, p.Name, v)
					continue
				}
				s.Literal(t, a.Name, p.Name, v)
			}
		}
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatalf("a shell ran: %s exists", canary)
	}
}
