package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Facts lose the task's sensitive values wherever they are: strings at any
// depth, typed lists, numbers and keys; other facts stay as they are.
func TestScrubFactsEverywhere(t *testing.T) {
	tk := &task{secrets: []string{"s3cret", "4242"}}
	type inner struct {
		Token string `json:"token"`
	}
	got := tk.scrubFacts(map[string]any{
		"plain":  "nothing here",
		"count":  7,
		"echo":   "the value is s3cret",
		"nested": map[string]any{"list": []any{"s3cret", 1, true, map[string]any{"deep": "xs3cretx"}}},
		"typed":  []string{"a", "s3cret"},
		"struct": inner{Token: "s3cret"},
		"pin":    4242,
		"s3cret": "a key that is the value",
	})
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "s3cret") || strings.Contains(s, "4242") {
		t.Errorf("a secret is left in %s", s)
	}
	for _, want := range []string{`"plain":"nothing here"`, `"count":7`, `"echo":"the value is (sensitive)"`,
		`"deep":"x(sensitive)x"`, `"typed":["a","(sensitive)"]`, `"token":"(sensitive)"`, `"pin":"(sensitive)"`,
		`"(sensitive)":"a key that is the value"`} {
		if !strings.Contains(s, want) {
			t.Errorf("facts %s lack %s", s, want)
		}
	}
	if api.SensitiveValue != "(sensitive)" {
		t.Fatalf("mask is %q", api.SensitiveValue)
	}

	// Keys that become equal keep both values.
	got = tk.scrubFacts(map[string]any{"s3cret": 1, "(sensitive)": 2})
	if len(got) != 2 {
		t.Errorf("colliding keys: %v", got)
	}
	// Without secrets, facts are handed on untouched.
	orig := map[string]any{"a": []string{"b"}}
	if got := (&task{}).scrubFacts(orig); got["a"].([]string)[0] != "b" {
		t.Errorf("facts changed without secrets: %v", got)
	}
}
