package api

import "testing"

func TestGroupAllowed(t *testing.T) {
	for _, c := range []struct {
		scope []string
		group string
		want  bool
	}{
		{nil, "anything", true},
		{[]string{"web"}, "web", true},
		{[]string{"web"}, "web.prod", true},
		{[]string{"web"}, "web.prod.eu", true},
		{[]string{"web"}, "webby", false},
		{[]string{"web"}, "db", false},
		{[]string{"web.prod"}, "web", false},
		{[]string{"db", "web.prod"}, "web.prod.eu", true},
	} {
		if got := GroupAllowed(c.scope, c.group); got != c.want {
			t.Errorf("GroupAllowed(%v, %q) = %v, want %v", c.scope, c.group, got, c.want)
		}
	}
}

func TestJoinTokenName(t *testing.T) {
	for tok, want := range map[string]string{
		"gridjoin_web-batch.c2VjcmV0": "web-batch",
		"gridjoin_a_b.x.y":            "a_b",
		"gridjoin_web-batch.":         "",
		"gridjoin_.secret":            "",
		"gridjoin_bad name.secret":    "",
		"grid_abc":                    "",
		"some-file-token":             "",
	} {
		got, ok := JoinTokenName(tok)
		if got != want || ok != (want != "") {
			t.Errorf("JoinTokenName(%q) = %q %v, want %q", tok, got, ok, want)
		}
	}
}
