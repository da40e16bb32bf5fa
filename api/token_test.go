package api

import (
	"testing"
)

func TestRoles(t *testing.T) {
	for _, tc := range []struct {
		have, need Role
		ok         bool
	}{
		{RoleAdmin, RoleOperator, true},
		{RoleOperator, RoleOperator, true},
		{RoleRead, RoleOperator, false},
		{RoleMetrics, RoleRead, false},
		{RoleRead, RoleMetrics, true},
		{Role("root"), RoleMetrics, false},
		{Role(""), RoleMetrics, false},
	} {
		if got := tc.have.Includes(tc.need); got != tc.ok {
			t.Errorf("%q includes %q = %v, want %v", tc.have, tc.need, got, tc.ok)
		}
	}
	if r, err := ParseRole(" Operator "); err != nil || r != RoleOperator {
		t.Errorf("ParseRole(Operator) = %q %v", r, err)
	}
	if _, err := ParseRole("root"); err == nil {
		t.Errorf("ParseRole(root) accepted")
	}
}

// An action one node marks dangerous stays dangerous in the merged catalog,
// whichever node's schema comes first.
func TestMergeKeepsDangerous(t *testing.T) {
	safe := []BackendSchema{{Name: "apt", Actions: []ActionSchema{{Name: "remove"}, {Name: "install"}}}}
	marked := []BackendSchema{{Name: "apt", Actions: []ActionSchema{{Name: "remove", Dangerous: true}}}}
	for _, sets := range [][][]BackendSchema{{safe, marked}, {marked, safe}} {
		c := Catalog{Backends: MergeSchemas(sets...)}
		b, _ := c.Backend("apt")
		if a, _ := b.Action("remove"); !a.Dangerous {
			t.Errorf("merged apt.remove not dangerous: %+v", b)
		}
		if a, _ := b.Action("install"); a.Dangerous {
			t.Errorf("merged apt.install dangerous")
		}
	}
	if safe[0].Actions[0].Dangerous {
		t.Errorf("merge changed its input")
	}
}
