package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// scheduleConfig is a provider block plus one grid_schedule "test".
func scheduleConfig(f *fleet.Fleet, body string) string {
	return providerConfig(f) + "\nresource \"grid_schedule\" \"test\" {\n" + body + "\n}\n"
}

// TestAccScheduleResource: create a schedule, import it, then change its
// cron, time zone, overlap and job in place; the changed schedule fires
// jobs that name it.
func TestAccScheduleResource(t *testing.T) {
	f := testAccFleet(t, 1)
	const res = "grid_schedule.test"
	job := func(msg string) string {
		return fmt.Sprintf(`jsonencode({ target = { scope = "all" }, tasks = [{ backend = "ping", action = "echo", params = { message = %q } }] })`, msg)
	}
	created := fmt.Sprintf(`
  name      = "nightly"
  cron      = "0 3 * * *"
  time_zone = "Europe/Berlin"
  catch_up  = "run_once"
  job       = %s
`, job("night"))
	updated := fmt.Sprintf(`
  name    = "nightly"
  cron    = "* * * * * *"
  overlap = "allow"
  job     = %s
`, job("every second"))
	berlin3am := regexp.MustCompile(`^\d{4}-\d\d-\d\dT0[12]:00:00Z$`) // 03:00 in Berlin, summer or winter
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: scheduleConfig(f, created),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("id"), knownvalue.StringExact("nightly")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("time_zone"), knownvalue.StringExact("Europe/Berlin")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("paused"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("catch_up"), knownvalue.StringExact("run_once")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("overlap"), knownvalue.StringExact("skip")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("next_run"), knownvalue.StringRegexp(berlin3am)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("created_by"), knownvalue.StringExact("admin")),
				},
			},
			{
				ResourceName:      res,
				ImportState:       true,
				ImportStateId:     "nightly",
				ImportStateVerify: true,
				// Both move on as the schedule runs; nothing runs here.
				ImportStateVerifyIgnore: []string{"next_run", "last_run", "last_job_id"},
			},
			{
				Config: scheduleConfig(f, updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("cron"), knownvalue.StringExact("* * * * * *")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("time_zone"), knownvalue.StringExact("UTC")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("overlap"), knownvalue.StringExact("allow")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("catch_up"), knownvalue.StringExact("skip")),
				},
				Check: func(*terraform.State) error {
					// The schedule, changed in place, fires the new job.
					var last string
					testwait.Until(t, 30*time.Second, 100*time.Millisecond, "the updated schedule to fire", func() bool {
						s, err := f.Client().GetSchedule(context.Background(), "nightly")
						last = ""
						if err == nil {
							last = s.LastJobID
						}
						return last != ""
					})
					j, err := f.Client().GetJob(context.Background(), last)
					if err != nil {
						return err
					}
					if j.ScheduleID != "nightly" || j.Tasks[0].Params["message"] != "every second" {
						return fmt.Errorf("job %s: schedule %q, params %v", j.ID, j.ScheduleID, j.Tasks[0].Params)
					}
					return nil
				},
			},
			{
				// The same job in YAML, and paused: only paused changes.
				Config: scheduleConfig(f, `
  name    = "nightly"
  cron    = "* * * * * *"
  overlap = "allow"
  paused  = true
  job     = <<-EOT
    target: {scope: all}
    tasks:
      - backend: ping
        action: echo
        params: {message: every second}
  EOT
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("paused"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("next_run"), knownvalue.StringExact("")),
				},
			},
			{
				Config:      scheduleConfig(f, `name = "bad"`+"\n"+`cron = "61 * * * *"`+"\n"+`job = `+job("x")),
				ExpectError: regexp.MustCompile(`(?s)Invalid Cron Expression.*cron:`),
			},
			{
				Config:      scheduleConfig(f, `name = "bad"`+"\n"+`cron = "@daily"`+"\n"+`time_zone = "Mars/Base"`+"\n"+`job = `+job("x")),
				ExpectError: regexp.MustCompile(`(?s)Invalid Time Zone.*time_zone:`),
			},
			{
				Config:      scheduleConfig(f, `name = "bad"`+"\n"+`cron = "@daily"`+"\n"+`job = jsonencode({ target = { scope = "all" }, tasks = [] })`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Job.*job: tasks`),
			},
			{
				Config:      scheduleConfig(f, `name = "bad"`+"\n"+`cron = "@daily"`+"\n"+`job = jsonencode({ target = { scope = "all" }, tasks = [{ backend = "ping", action = "explode" }] })`),
				ExpectError: regexp.MustCompile(`(?s)Create Schedule Error.*400.*job.tasks\[0\]`),
			},
		},
	})
	if _, err := f.Client().GetSchedule(context.Background(), "nightly"); !api.IsStatus(err, 404) {
		t.Fatalf("schedule after destroy: %v, want 404", err)
	}
}
