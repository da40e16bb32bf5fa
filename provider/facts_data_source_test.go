package provider

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// grid_facts runs a read-only action on real agents at plan time and its
// per-node facts feed expressions; an action that can change a node is
// refused before any job is submitted; a node whose check fails is
// reported, not fatal; a read that outlives its timeout cancels its job.
func TestAccFactsDataSource(t *testing.T) {
	f := testAccFleet(t, 3)
	ctx := context.Background()
	jobsBefore := func() int {
		js, err := f.Client().ListJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	var before int
	const ds = "data.grid_facts.cpu"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: providerConfig(f) + `
data "grid_facts" "cpu" {
  target  = { scope = "all" }
  backend = "sysinfo"
  action  = "cpu"
}

output "with_cpus" {
  value = sort([for id, n in data.grid_facts.cpu.nodes : id if jsondecode(n.facts_json).logical >= 1])
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("nodes").AtMapKey("node-1").AtMapKey("status"), knownvalue.StringExact("success")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("nodes").AtMapKey("node-3").AtMapKey("error"), knownvalue.StringExact("")),
					statecheck.ExpectKnownValue(ds, tfjsonpath.New("job_id"), knownvalue.StringRegexp(regexp.MustCompile(`^job-`))),
					statecheck.ExpectKnownOutputValue("with_cpus", ids("node-1", "node-2", "node-3")),
				},
			},
			{
				// A closed port: every node's check fails, the read does not.
				PreConfig: func() { before = jobsBefore() },
				Config: providerConfig(f) + `
data "grid_facts" "tcp" {
  target  = { scope = "node", value = "node-2" }
  backend = "health"
  action  = "tcp"
  params  = { address = "127.0.0.1:1", timeout = "2s" }
}

output "attempts" {
  value = jsondecode(data.grid_facts.tcp.nodes["node-2"].facts_json).attempts
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.grid_facts.tcp", tfjsonpath.New("nodes").AtMapKey("node-2").AtMapKey("status"), knownvalue.StringExact("failed")),
					statecheck.ExpectKnownValue("data.grid_facts.tcp", tfjsonpath.New("nodes").AtMapKey("node-2").AtMapKey("error"), knownvalue.StringRegexp(regexp.MustCompile(`unhealthy`))),
					statecheck.ExpectKnownOutputValue("attempts", knownvalue.Int64Exact(1)),
				},
			},
			{
				PreConfig: func() { before = jobsBefore() },
				Config: providerConfig(f) + `
data "grid_facts" "write" {
  target  = { scope = "all" }
  backend = "file"
  action  = "write"
  params  = { path = "/tmp/x", content = "x" }
}
`,
				ExpectError: regexp.MustCompile(`file.write can change a node; grid_facts runs only read-only actions`),
			},
			{
				PreConfig: func() {
					if n := jobsBefore(); n != before {
						t.Errorf("a refused grid_facts submitted %d jobs", n-before)
					}
				},
				Config: providerConfig(f) + `
data "grid_facts" "nothing" {
  target  = { scope = "all" }
  backend = "nosuch"
  action  = "x"
}
`,
				ExpectError: regexp.MustCompile(`no online node offers the nosuch backend`),
			},
			{
				Config: providerConfig(f) + `
data "grid_facts" "slow" {
  target  = { scope = "any" }
  backend = "ping"
  action  = "sleep"
  params  = { duration = "1m" }
  timeout = "2s"
}
`,
				ExpectError: regexp.MustCompile(`did not finish within 2s; it was cancelled`),
			},
		},
	})
	// The timed-out read's job was cancelled, not left running.
	deadline := time.Now().Add(30 * time.Second)
	for {
		js, err := f.Client().ListJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, j := range js {
			if j.Status == api.JobRunning || j.Status == api.JobPending {
				running++
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still running after the timed-out read", running)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
