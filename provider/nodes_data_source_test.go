package provider

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/ping"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
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

// grid_nodes filters by site and names each node's site; grid_job takes a
// site target and a group narrowed to a site, and its results name each
// node's site. par-1 was admitted through the paris relay (its record is
// all there is of it: it is listed, and goes offline).
func TestAccNodesDataSourceSites(t *testing.T) {
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: 1}) // node-1: web.prod, default site
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.AdmitSiteNodes(ctx, "paris", map[string][]string{"par-1": {"web"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := fleettest.JetStream(t, f).KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(api.NodeInfo{ID: "par-1", Groups: []string{"web"}, Status: api.NodeOnline, LastSeen: time.Now().UTC()})
	if _, err := kv.Put(ctx, "par-1", rec); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, 50*time.Millisecond, "par-1 listed", func() bool {
		_, err := f.Client().GetNode(ctx, "par-1")
		return err == nil
	})
	config := providerConfig(f) + `
data "grid_nodes" "all" {}

data "grid_nodes" "paris" {
  site = "paris"
}

data "grid_nodes" "hub" {
  site  = "default"
  group = "web"
}

data "grid_nodes" "nowhere" {
  site = "nowhere"
}

resource "grid_job" "hub_web" {
  target = {
    scope = "group"
    value = "web"
    site  = "default"
  }
  tasks = [{ backend = "ping", action = "echo", params = { message = "hi" } }]
}

resource "grid_job" "hub_site" {
  target = {
    scope = "site"
    value = "default"
  }
  tasks = [{ backend = "ping", action = "echo", params = { message = "hi" } }]
}
`
	site := func(id, want string) knownvalue.Check {
		return knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(id), "site": knownvalue.StringExact(want)})
	}
	nodeSite := func(res, node, want string) statecheck.StateCheck {
		return statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes").AtMapKey(node).AtMapKey("site"),
			knownvalue.StringExact(want))
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// A site no online node is in fails the plan as a group
				// with none does.
				Config: providerConfig(f) + `
resource "grid_job" "nowhere" {
  target = {
    scope = "site"
    value = "nowhere"
  }
  tasks = [{ backend = "ping", action = "echo" }]
}
`,
				ExpectError: regexp.MustCompile(`No online node matches target site:nowhere`),
			},
			{
				Config: providerConfig(f) + `
resource "grid_job" "bad" {
  target = {
    scope = "site"
    value = "paris"
    site  = "lyon"
  }
  tasks = [{ backend = "ping", action = "echo" }]
}
`,
				ExpectError: regexp.MustCompile(`(?s)Invalid Target.*target\.site`),
			},
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.grid_nodes.all", tfjsonpath.New("ids"), ids("node-1", "par-1")),
					statecheck.ExpectKnownValue("data.grid_nodes.all", tfjsonpath.New("nodes"),
						knownvalue.ListExact([]knownvalue.Check{site("node-1", "default"), site("par-1", "paris")})),
					statecheck.ExpectKnownValue("data.grid_nodes.paris", tfjsonpath.New("ids"), ids("par-1")),
					statecheck.ExpectKnownValue("data.grid_nodes.hub", tfjsonpath.New("ids"), ids("node-1")),
					statecheck.ExpectKnownValue("data.grid_nodes.nowhere", tfjsonpath.New("ids"), ids()),
					statecheck.ExpectKnownValue("grid_job.hub_web", tfjsonpath.New("nodes"), ids("node-1")),
					statecheck.ExpectKnownValue("grid_job.hub_web", tfjsonpath.New("status"), knownvalue.StringExact("completed")),
					nodeSite("grid_job.hub_web", "node-1", "default"),
					statecheck.ExpectKnownValue("grid_job.hub_site", tfjsonpath.New("nodes"), ids("node-1")),
					nodeSite("grid_job.hub_site", "node-1", "default"),
				},
			},
		},
	})
}
