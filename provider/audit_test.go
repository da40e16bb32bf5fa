package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// Terraform with a token of its own: the job and the schedule it creates,
// and the schedule it destroys, are in the audit trail with that token as
// the actor, apart from what the admin did.
func TestAccAuditNamesTerraformsToken(t *testing.T) {
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	tok, err := f.Client().CreateToken(ctx, "terraform", api.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	config := providerConfigToken(f, tok.Token) + `
resource "grid_job" "echo" {
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo", params = { message = "from terraform" } }]
}

resource "grid_schedule" "nightly" {
  name = "tf-nightly"
  cron = "0 3 * * *"
  job  = jsonencode({ target = { scope = "all" }, tasks = [{ backend = "ping", action = "echo" }] })
}
`
	var jobID string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: config,
			Check: func(s *terraform.State) error {
				jobID = s.RootModule().Resources["grid_job.echo"].Primary.ID
				return nil
			},
		}},
		CheckDestroy: func(*terraform.State) error {
			var got []string
			err := f.Client().EachAudit(ctx, api.AuditQuery{Actor: "terraform"}, func(r api.AuditRecord) error {
				if r.Action != api.AuditJobSubmit || r.Resource == jobID {
					got = append(got, fmt.Sprintf("%s %s %d", r.Action, r.Resource, r.Outcome))
				}
				return nil
			})
			if err != nil {
				return err
			}
			want := map[string]bool{"job.submit " + jobID + " 202": true, "schedule.create tf-nightly 201": true, "schedule.delete tf-nightly 204": true}
			for _, g := range got {
				delete(want, g)
			}
			if len(want) > 0 {
				return fmt.Errorf("terraform's audit records %q lack %v", got, want)
			}
			return nil
		},
	})
}
