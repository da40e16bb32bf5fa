package api_test

import (
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// grid_facts runs at plan time only what the merged schemas say is
// read-only. A fleet mid-upgrade can hold a node whose version of an
// action changes the host next to one whose version did not: the merged
// action is read-only only when every node says so, whichever registered
// first.
func TestMergedReadOnlyNeedsEveryNode(t *testing.T) {
	ro := api.BackendSchema{Name: "b", Actions: []api.ActionSchema{{Name: "a", ReadOnly: true, Idempotent: true}}}
	rw := api.BackendSchema{Name: "b", Actions: []api.ActionSchema{{Name: "a", Idempotent: true}}}
	for _, order := range [][][]api.BackendSchema{{{ro}, {rw}}, {{rw}, {ro}}} {
		m := api.MergeSchemas(order...)
		a, ok := m[0].Action("a")
		if !ok || a.ReadOnly {
			t.Fatalf("merged %+v: read-only although one node's action is not", m)
		}
	}
	m := api.MergeSchemas([]api.BackendSchema{ro}, []api.BackendSchema{ro})
	if a, _ := m[0].Action("a"); !a.ReadOnly {
		t.Fatal("an action every node says is read-only is not read-only merged")
	}
}
