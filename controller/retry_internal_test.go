package controller

import (
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// A job whose sensitive values were held back cannot be retried: the
// placeholder would be sent in their place.
func TestSensitiveParamBlocksRetry(t *testing.T) {
	j := &api.Job{Tasks: []api.Phase{
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}},
		{Backend: "exec", Action: "run", Params: api.Params{"program": "p", "secret": api.SensitiveValue}},
	}}
	if got := sensitiveParam(j); got != "secret (step 1)" {
		t.Fatalf("sensitiveParam = %q, want secret (step 1)", got)
	}
	j.Tasks = j.Tasks[:1]
	if got := sensitiveParam(j); got != "" {
		t.Fatalf("sensitiveParam of a plain job = %q", got)
	}
}
