package provider

import (
	"context"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestAccJobDataSource(t *testing.T) {
	f := testAccFleet(t, 3)
	// A job started outside Terraform, as `grid job run` would.
	ctx := context.Background()
	job, err := f.Client().SubmitJob(ctx, &api.JobSpec{
		Target:   api.Target{Scope: api.ScopeGroup, Value: "db"},
		Strategy: api.StrategyContinue,
		Tasks:    []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "from the cli"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().WaitJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	const ds = "data.grid_job.cli"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: providerConfig(f) + `
data "grid_job" "cli" {
  id = "` + job.ID + `"
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("strategy"), knownvalue.StringExact("continue")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("target"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"scope": knownvalue.StringExact("group"), "value": knownvalue.StringExact("db"), "site": knownvalue.Null(),
					})),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("nodes"), ids("node-2")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes").AtMapKey("node-2").AtMapKey("output"),
						knownvalue.StringExact("from the cli")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("finished_at"), knownvalue.StringRegexp(rfc3339)),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("summary"), knownvalue.ObjectExact(map[string]knownvalue.Check{
						"targeted": knownvalue.Int64Exact(1), "reached": knownvalue.Int64Exact(1), "succeeded": knownvalue.Int64Exact(1),
						"failed": knownvalue.Int64Exact(0), "unreachable": knownvalue.Int64Exact(0), "not_started": knownvalue.Int64Exact(0),
						"changed": knownvalue.Int64Exact(0),
					})),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("unreachable_nodes"), knownvalue.ListSizeExact(0)),
				},
			},
			{
				Config: providerConfig(f) + `
data "grid_job" "gone" {
  id = "job-doesnotexist"
}
`,
				ExpectError: regexp.MustCompile(`Job Not Found`),
			},
		},
	})
}
