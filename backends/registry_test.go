package backends

import (
	"context"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// countingBackend counts how often its schema is asked for.
type countingBackend struct{ schemas int }

func (c *countingBackend) Schema() api.BackendSchema {
	c.schemas++
	return api.BackendSchema{Name: "count", Actions: []api.ActionSchema{{
		Name: "go", ReadOnly: true,
		Params: []api.ParamSchema{{Name: "n", Type: api.TypeString, Default: "1"}},
	}}}
}

func (c *countingBackend) Run(_ context.Context, req *Request) (*Result, error) {
	return &Result{Output: req.Params["n"]}, nil
}

// Requests are checked against the schema taken at registration, not one
// the backend builds for each of them.
func TestPrepareUsesRegisteredSchema(t *testing.T) {
	b := &countingBackend{}
	r := NewRegistry()
	if err := r.Register(b); err != nil {
		t.Fatal(err)
	}
	registered := b.schemas
	for range 3 {
		res, err := r.Run(context.Background(), "count", &Request{Action: "go", Params: api.Params{}})
		if err != nil || res.Output != "1" {
			t.Fatalf("Run = %+v, %v; want the default param", res, err)
		}
	}
	if _, err := r.Run(context.Background(), "count", &Request{Action: "nope"}); err == nil {
		t.Error("an unknown action ran")
	}
	if _, err := r.Run(context.Background(), "nope", &Request{Action: "go"}); err == nil {
		t.Error("an unknown backend ran")
	}
	if b.schemas != registered {
		t.Errorf("Schema called %d more times after Register", b.schemas-registered)
	}
}
