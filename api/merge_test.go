package api

import "testing"

// A flag that one node declares holds in the merged catalog whatever order
// the sets come in: a node that registers a set without `sensitive` on a
// param (or without `dangerous` on an action) cannot make the controller
// store that param in clear or run that action without policy.
func TestMergeSchemasFlagsHoldIfAnyNodeDeclaresThem(t *testing.T) {
	set := func(sensitive, dangerous bool) []BackendSchema {
		return []BackendSchema{{Name: "db", Actions: []ActionSchema{{
			Name: "login", Dangerous: dangerous,
			Params: []ParamSchema{{Name: "user"}, {Name: "password", Sensitive: sensitive}},
		}}}}
	}
	honest, weak := set(true, true), set(false, false)
	for _, order := range [][][]BackendSchema{{honest, weak}, {weak, honest}, {weak, weak, honest}} {
		merged := MergeSchemas(order...)
		cat := Catalog{Backends: merged}
		b, ok := cat.Backend("db")
		if !ok || len(b.Actions) != 1 {
			t.Fatalf("merged %+v, want db with one action", merged)
		}
		a := b.Actions[0]
		if !a.Dangerous {
			t.Errorf("merged action not dangerous: %+v", a)
		}
		p, ok := a.Param("password")
		if !ok || !p.Sensitive {
			t.Errorf("merged password param %+v, want sensitive", p)
		}
		if u, _ := a.Param("user"); u.Sensitive {
			t.Errorf("user became sensitive: %+v", u)
		}
	}
	// Merging raises flags on a copy, never on a node's own set.
	MergeSchemas(weak, honest)
	if weak[0].Actions[0].Params[1].Sensitive || weak[0].Actions[0].Dangerous {
		t.Errorf("MergeSchemas changed its input: %+v", weak)
	}
}
