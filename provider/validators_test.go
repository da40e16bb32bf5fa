package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Each string validator passes null, unknown and good values, and refuses a
// bad one with its own summary and a detail that says what to write.
func TestStringValidators(t *testing.T) {
	ctx := context.Background()
	p := path.Root("tasks").AtListIndex(0).AtName("x")
	for _, tc := range []struct {
		name        string
		v           stringValidator
		good, bad   string
		summary     string
		detailParts []string
	}{
		{"duration", durationValidator(), "30s", "soon", "Invalid Duration", []string{`"soon"`, ". Write a Go duration such as 30s, 5m or 1h."}},
		{"limit", limitValidator(false), "10%", "0", "Invalid Rollout Limit", []string{"tasks[0].x: 0: must be at least 1", "percentage of the step's nodes (10%)."}},
		{"limit zero", limitValidator(true), "0", "lots", "Invalid Rollout Limit", []string{`tasks[0].x: `, `"lots" is not a count or a percentage`}},
		{"cron", cronValidator(), "@every 10m", "61 * * * *", "Invalid Cron Expression", []string{"61"}},
		{"time zone", timeZoneValidator(), "Europe/Berlin", "Mars/Olympus", "Invalid Time Zone", []string{"Mars/Olympus"}},
		{"job", jobSpecValidator(), `{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}]}`, `{"target":{"scope":"all"}}`, "Invalid Job", []string{"job: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ok := range []types.String{types.StringNull(), types.StringUnknown(), types.StringValue(tc.good)} {
				resp := &validator.StringResponse{}
				tc.v.ValidateString(ctx, validator.StringRequest{Path: p, ConfigValue: ok}, resp)
				if resp.Diagnostics.HasError() {
					t.Errorf("%v refused: %v", ok, resp.Diagnostics)
				}
			}
			resp := &validator.StringResponse{}
			tc.v.ValidateString(ctx, validator.StringRequest{Path: p, ConfigValue: types.StringValue(tc.bad)}, resp)
			if resp.Diagnostics.ErrorsCount() != 1 {
				t.Fatalf("%q: want one error, got %v", tc.bad, resp.Diagnostics)
			}
			d := resp.Diagnostics.Errors()[0]
			if d.Summary() != tc.summary {
				t.Errorf("summary %q, want %q", d.Summary(), tc.summary)
			}
			for _, part := range tc.detailParts {
				if !strings.Contains(d.Detail(), part) {
					t.Errorf("detail %q lacks %q", d.Detail(), part)
				}
			}
			if tc.v.Description(ctx) == "" || tc.v.MarkdownDescription(ctx) != tc.v.Description(ctx) {
				t.Errorf("description %q, markdown %q", tc.v.Description(ctx), tc.v.MarkdownDescription(ctx))
			}
		})
	}
}
