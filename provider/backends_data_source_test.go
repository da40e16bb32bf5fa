package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func TestAccBackendsDataSource(t *testing.T) {
	f := testAccFleet(t, 2)
	const ds = "data.grid_backends.all"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: providerConfig(f) + `
data "grid_backends" "all" {}

locals {
  ping = one([for b in data.grid_backends.all.backends : b if b.name == "ping"])
  test = one([for b in data.grid_backends.all.backends : b if b.name == "test"])
}

output "ping_actions" {
  value = sort([for a in local.ping.actions : a.name])
}

output "ping_nodes" {
  value = local.ping.nodes
}

output "sleep_duration" {
  value = one([for p in one([for a in local.ping.actions : a if a.name == "sleep"]).params : p if p.name == "duration"])
}

output "flaky_rate_pattern" {
  value = one([for p in one([for a in local.test.actions : a if a.name == "flaky"]).params : p.pattern if p.name == "rate"])
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("names"), knownvalue.ListPartial(map[int]knownvalue.Check{})),
					statecheck.ExpectKnownOutputValue("ping_actions", knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("echo"), knownvalue.StringExact("hostname"), knownvalue.StringExact("sleep"),
					})),
					statecheck.ExpectKnownOutputValue("ping_nodes", knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownOutputValue("sleep_duration", knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"type":     knownvalue.StringExact("duration"),
						"required": knownvalue.Bool(true),
					})),
					statecheck.ExpectKnownOutputValue("flaky_rate_pattern", knownvalue.NotNull()),
				},
			},
		},
	})
}
