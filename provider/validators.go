package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// stringValidator checks a configured string (null and unknown values
// pass) with check. A value it refuses is an error diagnostic at the
// attribute, titled summary, whose detail is detail(path, err), or the
// error's text when detail is nil.
type stringValidator struct {
	description string
	summary     string
	check       func(value string) error
	detail      func(p path.Path, err error) string
}

var _ validator.String = stringValidator{}

func (v stringValidator) Description(context.Context) string { return v.description }

func (v stringValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v stringValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		msg := err.Error()
		if v.detail != nil {
			msg = v.detail(req.Path, err)
		}
		resp.Diagnostics.AddAttributeError(req.Path, v.summary, msg)
	}
}

// durationValidator checks that a string is a positive Go duration.
func durationValidator() stringValidator {
	return stringValidator{
		description: "value must be a positive duration such as 30s, 5m or 1h",
		summary:     "Invalid Duration",
		check: func(s string) error {
			_, err := api.ParsePositiveDuration(s)
			return err
		},
		detail: func(_ path.Path, err error) string {
			return fmt.Sprintf("%v. Write a Go duration such as 30s, 5m or 1h.", err)
		},
	}
}

// limitValidator checks a max_concurrency or max_errors value: a count or a
// percentage. zeroOK allows 0 (max_errors: stop at the first failure).
func limitValidator(zeroOK bool) stringValidator {
	return stringValidator{
		description: "a count (3) or a percentage (10%)",
		summary:     "Invalid Rollout Limit",
		check: func(s string) error {
			l, err := api.ParseLimit(s)
			if err == nil && l.Value == 0 && !zeroOK {
				err = fmt.Errorf("%s: must be at least 1 (or 1%%); leave it out for no limit", l)
			}
			return err
		},
		detail: func(p path.Path, err error) string {
			return fmt.Sprintf("%s: %v. Write a count of nodes (3) or a percentage of the step's nodes (10%%).", p, err)
		},
	}
}

// cronValidator checks a cron expression as the controller reads it.
func cronValidator() stringValidator {
	return stringValidator{
		description: "a cron expression: five fields, six with seconds first, or a descriptor such as @hourly or @every 10m",
		summary:     "Invalid Cron Expression",
		check: func(s string) error {
			_, err := api.ParseCron(s, "")
			return err
		},
	}
}

// timeZoneValidator checks an IANA time zone name.
func timeZoneValidator() stringValidator {
	return stringValidator{
		description: "an IANA time zone such as UTC or Europe/Berlin",
		summary:     "Invalid Time Zone",
		check: func(s string) error {
			_, err := api.LoadTimeZone(s)
			return err
		},
	}
}

// jobSpecValidator checks a job as POST /job reads it (its structure; the
// controller checks the actions against its nodes at apply).
func jobSpecValidator() stringValidator {
	return stringValidator{
		description: "a job as POST /job takes it, in JSON or YAML",
		summary:     "Invalid Job",
		check: func(s string) error {
			_, err := api.ParseJobSpec([]byte(s))
			return err
		},
		detail: func(_ path.Path, err error) string { return fmt.Sprintf("job: %v", err) },
	}
}

// siteNameValidator checks a site name: a subject token (DefaultSite
// included: it names the controllers' own agents).
func siteNameValidator() stringValidator {
	return stringValidator{
		description: "a site name: letters, digits, '_' and '-'",
		summary:     "Invalid Site",
		check: func(s string) error {
			if !api.ValidToken(s) {
				return fmt.Errorf("site %q is not valid: letters, digits, '_' and '-'", s)
			}
			return nil
		},
	}
}
