package api

import (
	"strings"
	"testing"
)

// Every form of the CLI's target grammar reads into the target it names and
// renders back the same way (all@SITE is the one alias: it reads as
// site:SITE); malformed ones are refused with the part at fault.
func TestParseTargetRoundTrip(t *testing.T) {
	tests := []struct {
		in   string
		want Target
		// out is the rendering when it differs from in.
		out string
	}{
		{in: "all", want: Target{Scope: ScopeAll}},
		{in: "any", want: Target{Scope: ScopeAny}},
		{in: "group:web", want: Target{Scope: ScopeGroup, Value: "web"}},
		{in: "group:web.dev.us-east", want: Target{Scope: ScopeGroup, Value: "web.dev.us-east"}},
		{in: "node:web-1", want: Target{Scope: ScopeNode, Value: "web-1"}},
		{in: "site:paris", want: Target{Scope: ScopeSite, Value: "paris"}},
		{in: "site:default", want: Target{Scope: ScopeSite, Value: DefaultSite}},
		{in: "group:web@paris", want: Target{Scope: ScopeGroup, Value: "web", Site: "paris"}},
		{in: "group:web.dev@paris", want: Target{Scope: ScopeGroup, Value: "web.dev", Site: "paris"}},
		{in: "node:web-1@paris", want: Target{Scope: ScopeNode, Value: "web-1", Site: "paris"}},
		{in: "any@paris", want: Target{Scope: ScopeAny, Site: "paris"}},
		{in: "all@paris", want: Target{Scope: ScopeSite, Value: "paris"}, out: "site:paris"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTarget(tc.in)
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseTarget(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			out := tc.out
			if out == "" {
				out = tc.in
			}
			if s := got.String(); s != out {
				t.Errorf("%+v renders as %q, want %q", got, s, out)
			}
			again, err := ParseTarget(got.String())
			if err != nil || again != got {
				t.Errorf("ParseTarget(%q) = %+v, %v; want %+v back", got.String(), again, err, got)
			}
		})
	}
}

func TestParseTargetRefusals(t *testing.T) {
	tests := []struct {
		in, field string
	}{
		{"", "target.scope"},
		{"everything", "target.scope"},
		{"site:", "target.value"},
		{"site:pa ris", "target.value"},
		{"site:paris@lyon", "target.site"},
		{"group:web@pa.ris", "target.site"},
		{"node:x@a@b", "target.site"},
		{"all:x", "target.value"},
		{"any:x@paris", "target.value"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseTarget(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("ParseTarget(%q) = %v, want an error naming %s", tc.in, err, tc.field)
			}
		})
	}
}

// A site narrows every scope to that site's nodes; a node with no site is
// in DefaultSite.
func TestTargetMatchesSites(t *testing.T) {
	type node struct {
		id, site string
		groups   []string
	}
	hub := node{"hub-1", "", []string{"web"}}
	paris := node{"par-1", "paris", []string{"web.dev"}}
	lyon := node{"lyo-1", "lyon", []string{"db"}}
	tests := []struct {
		target string
		want   []string
	}{
		{"all", []string{"hub-1", "par-1", "lyo-1"}},
		{"site:paris", []string{"par-1"}},
		{"site:default", []string{"hub-1"}},
		{"site:nowhere", nil},
		{"group:web", []string{"hub-1", "par-1"}},
		{"group:web@paris", []string{"par-1"}},
		{"group:web@default", []string{"hub-1"}},
		{"group:web@lyon", nil},
		{"node:par-1@paris", []string{"par-1"}},
		{"node:par-1@lyon", nil},
		{"any@lyon", []string{"lyo-1"}},
	}
	for _, tc := range tests {
		tgt, err := ParseTarget(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range []node{hub, paris, lyon} {
			if tgt.Matches(n.id, n.site, n.groups) {
				got = append(got, n.id)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s matches %v, want %v", tc.target, got, tc.want)
		}
	}
}
