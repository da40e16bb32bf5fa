package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/ping"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// testGroups puts node-1 in web.prod, node-2 in web.dev.us-east, node-3 in
// db and node-4 in webx (which is not in web).
func testGroups(i int) []string {
	return [][]string{{"web.prod"}, {"web.dev.us-east"}, {"db"}, {"webx"}}[i%4]
}

func ids(vals ...string) knownvalue.Check {
	checks := make([]knownvalue.Check, 0, len(vals))
	for _, v := range vals {
		checks = append(checks, knownvalue.StringExact(v))
	}
	return knownvalue.ListExact(checks)
}

func TestAccNodesDataSource(t *testing.T) {
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{
		Agents: 4,
		Groups: testGroups,
		Agent: func(i int, c *agent.Config) {
			if i == 2 {
				// node-3 offers only ping.
				c.Registry = backends.NewRegistry().MustRegister(ping.New())
			}
		},
	})
	config := providerConfig(f) + `
data "grid_nodes" "all" {}

data "grid_nodes" "web" {
  group = "web"
}

data "grid_nodes" "web_dev" {
  group = "web.dev"
}

data "grid_nodes" "test_backend" {
  backend = "test"
}

data "grid_nodes" "offline" {
  status = "offline"
}

data "grid_nodes" "online_web" {
  group  = "web"
  status = "online"
}
`
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.grid_nodes.all", tfjsonpath.New("ids"), ids("node-1", "node-2", "node-3", "node-4")),
					statecheck.ExpectKnownValue("data.grid_nodes.web", tfjsonpath.New("ids"), ids("node-1", "node-2")),
					statecheck.ExpectKnownValue("data.grid_nodes.web_dev", tfjsonpath.New("ids"), ids("node-2")),
					statecheck.ExpectKnownValue("data.grid_nodes.test_backend", tfjsonpath.New("ids"), ids("node-1", "node-2", "node-4")),
					statecheck.ExpectKnownValue("data.grid_nodes.offline", tfjsonpath.New("ids"), ids()),
					statecheck.ExpectKnownValue("data.grid_nodes.web", tfjsonpath.New("nodes").AtSliceIndex(1),
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"id":        knownvalue.StringExact("node-2"),
							"groups":    ids("web.dev.us-east"),
							"status":    knownvalue.StringExact("online"),
							"hostname":  knownvalue.NotNull(),
							"last_seen": knownvalue.NotNull(),
							"backends":  knownvalue.ListPartial(map[int]knownvalue.Check{}),
						})),
				},
			},
			{
				// A stopped agent deregisters: it is listed as offline.
				PreConfig: func() {
					if err := f.StopAgent("node-2"); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.grid_nodes.offline", tfjsonpath.New("ids"), ids("node-2")),
					statecheck.ExpectKnownValue("data.grid_nodes.online_web", tfjsonpath.New("ids"), ids("node-1")),
				},
			},
		},
	})
}
