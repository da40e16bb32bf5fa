package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// durationValidator checks that a string is a positive Go duration.
type durationValidator struct{}

var _ validator.String = durationValidator{}

func (durationValidator) Description(context.Context) string {
	return "value must be a positive duration such as 30s, 5m or 1h"
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (durationValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := api.ParsePositiveDuration(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Duration",
			fmt.Sprintf("%v. Write a Go duration such as 30s, 5m or 1h.", err))
	}
}

// limitValidator checks a max_concurrency or max_errors value: a count or a
// percentage. zeroOK allows 0 (max_errors: stop at the first failure).
type limitValidator struct{ zeroOK bool }

func (v limitValidator) Description(context.Context) string {
	return "a count (3) or a percentage (10%)"
}

func (v limitValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v limitValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	l, err := api.ParseLimit(req.ConfigValue.ValueString())
	if err == nil && l.Value == 0 && !v.zeroOK {
		err = fmt.Errorf("%s: must be at least 1 (or 1%%); leave it out for no limit", l)
	}
	if err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Rollout Limit",
			fmt.Sprintf("%s: %v. Write a count of nodes (3) or a percentage of the step's nodes (10%%).", req.Path, err))
	}
}
