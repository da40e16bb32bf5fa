package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

func TestAccNodeDataSource(t *testing.T) {
	f := testAccFleet(t, 2)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: providerConfig(f) + `
data "grid_node" "n2" {
  id = "node-2"
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.grid_node.n2", tfjsonpath.New("groups"), ids("db.prod")),
					statecheck.ExpectKnownValue("data.grid_node.n2", tfjsonpath.New("status"), knownvalue.StringExact("online")),
					statecheck.ExpectKnownValue("data.grid_node.n2", tfjsonpath.New("backends"), knownvalue.ListPartial(map[int]knownvalue.Check{})),
					statecheck.ExpectKnownValue("data.grid_node.n2", tfjsonpath.New("online_since"), knownvalue.StringRegexp(rfc3339)),
				},
			},
			{
				Config: providerConfig(f) + `
data "grid_node" "missing" {
  id = "node-99"
}
`,
				ExpectError: regexp.MustCompile(`Node Not Found`),
			},
		},
	})
}
