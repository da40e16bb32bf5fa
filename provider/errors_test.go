package provider

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Only an answer that refuses the credentials points at the token.
func TestAddClientErrorTokenHint(t *testing.T) {
	cases := []struct {
		err       error
		tokenHint bool
	}{
		{&api.Error{StatusCode: 401, Message: "missing bearer token"}, true},
		{&api.Error{StatusCode: 403, Message: "role read may not submit"}, true},
		{&api.Error{StatusCode: 400, Message: "tasks[0]: bad"}, false},
		{&api.Error{StatusCode: 500, Message: "boom"}, false},
		{errors.New("plain"), false},
	}
	for _, c := range cases {
		var diags diag.Diagnostics
		addClientError(&diags, "Submit Job Error", c.err)
		if len(diags) != 1 {
			t.Fatalf("%v: %d diagnostics", c.err, len(diags))
		}
		detail := diags[0].Detail()
		if got := strings.Contains(detail, "GRID_TOKEN") || strings.Contains(detail, "token's role"); got != c.tokenHint {
			t.Errorf("%v: token hint %v, want %v:\n%s", c.err, got, c.tokenHint, detail)
		}
	}
}
