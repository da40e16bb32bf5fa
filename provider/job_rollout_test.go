package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// grid_job with rolling limits: bad limits are refused at validate time,
// a rollout that passes max_errors fails the apply naming the nodes it
// never started, and one within it records them.
func TestAccJobResource_rollout(t *testing.T) {
	f := testAccFleet(t, 3)
	addr := f.APIURL()
	const res = "grid_job.test"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(addr, `
  target          = { scope = "all" }
  max_concurrency = "0"
  tasks           = [{ backend = "ping", action = "echo" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Rollout Limit.*max_concurrency: 0: must be at least 1`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo", max_errors = "lots" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Rollout Limit.*"lots" is not a count or a percentage`),
			},
			{
				Config: jobConfig(addr, `
  target          = { scope = "all" }
  max_concurrency = "1"
  max_errors      = "0"
  tasks           = [{ backend = "test", action = "fail", params = { message = "bad package" } }]
`),
				ExpectError: regexp.MustCompile(`(?s)max_errors 0 exceeded at\s+tasks\[0\].*node node-1, step 0 \(test\.fail\): bad package.*Not started \(max_errors exceeded\): node-2, node-3`),
			},
			{
				Config: jobConfig(addr, `
  target          = { scope = "all" }
  max_concurrency = "34%"
  tasks = [
    { backend = "ping", action = "echo", max_errors = "1" },
  ]
`),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(res, "status", "completed"),
					resource.TestCheckResourceAttr(res, "max_concurrency", "34%"),
					resource.TestCheckResourceAttr(res, "tasks.0.max_errors", "1"),
				),
			},
		},
	})
}

// Plan checks the tasks against the nodes the target selects: node-1's
// allow list has ping.echo only, so ping.sleep on group web (node-1) is
// refused at plan time naming node-1, though node-2 offers it.
func TestAccJobResource_targetedValidation(t *testing.T) {
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: 2, Agent: func(i int, c *agent.Config) {
		if i == 0 {
			c.Allow = []string{"ping.echo"}
		}
	}})
	t.Setenv("GRID_TOKEN", f.AdminToken())
	// jobConfig names no CA: the provider falls back to GRID_CACERT.
	t.Setenv("GRID_CACERT", f.CAFile())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target = { scope = "group", value = "web" }
  tasks  = [{ backend = "ping", action = "sleep", params = { duration = "1ms" } }]
`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Task Not Offered By Targeted Nodes.*1 targeted node\(s\) cannot run\s+ping\.sleep:\s+node-1`),
			},
			{
				Config: jobConfig(f.APIURL(), `
  target = { scope = "group", value = "db" }
  tasks  = [{ backend = "ping", action = "sleep", params = { duration = "1ms" } }]
`),
				Check: resource.TestCheckResourceAttr("grid_job.test", "status", "completed"),
			},
		},
	})
}

// A misspelled param is one error, "Invalid Task" naming the param and the
// ones the action knows, not also "Task Not Offered By Targeted Nodes"
// telling to enable the action on the agents (which offer it).
// ExpectError matches a regexp on the whole output and cannot say what must
// be absent, so the step's error is judged by the test case's ErrorCheck.
func TestAccJobResource_misspelledParamOneError(t *testing.T) {
	f := testAccFleet(t, 2)
	right := regexp.MustCompile(`(?s)Invalid Task.*tasks\[0\]\.params\.mesage: unknown param \(known:\s+message\)`)
	var judged bool
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		ErrorCheck: func(err error) error {
			judged = true
			if !right.MatchString(err.Error()) {
				return fmt.Errorf("want an error matching %s, got: %w", right, err)
			}
			for _, wrong := range []string{"Task Not Offered By Targeted Nodes", "enable it on those agents"} {
				if strings.Contains(err.Error(), wrong) {
					return fmt.Errorf("a misspelled param also gives %q: %w", wrong, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target = { scope = "group", value = "web" }
  tasks  = [{ backend = "ping", action = "echo", params = { mesage = "hi" } }]
`),
				PlanOnly: true,
			},
		},
	})
	if !judged {
		t.Fatal("the plan of a task with a misspelled param did not fail")
	}
}

// converge = true: a node that joins the target after apply shows in the
// plan as an update of converged_nodes; apply runs the job on it alone;
// the next plan is empty.
func TestAccJobResource_converge(t *testing.T) {
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: 2, Groups: func(int) []string { return []string{"web.dev"} }})
	t.Setenv("GRID_TOKEN", f.AdminToken())
	// jobConfig names no CA: the provider falls back to GRID_CACERT.
	t.Setenv("GRID_CACERT", f.CAFile())
	const res = "grid_job.test"
	cfg := jobConfig(f.APIURL(), `
  target   = { scope = "group", value = "web" }
  converge = true
  tasks    = [{ backend = "ping", action = "echo", params = { message = "configured" } }]
`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(res, "converged_nodes.#", "2"),
					resource.TestCheckResourceAttr(res, "converged_nodes.0", "node-1"),
					resource.TestCheckResourceAttr(res, "converged_nodes.1", "node-2"),
				),
			},
			{
				PreConfig: func() {
					ctx := context.Background()
					if _, err := f.AddAgent(ctx, []string{"web.dev"}); err != nil {
						t.Fatal(err)
					}
					if err := f.WaitOnline(ctx, "node-3"); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(res, "converged_nodes.#", "3"),
					resource.TestCheckResourceAttr(res, "converged_nodes.2", "node-3"),
					func(*terraform.State) error {
						// The newest job ran on node-3 alone.
						jobs, err := f.Client().ListJobs(context.Background())
						if err != nil {
							return err
						}
						if len(jobs) != 2 || jobs[0].Target.String() != "node:node-3" || !slices.Equal(jobs[0].Expected, []string{"node-3"}) {
							return fmt.Errorf("jobs %d, newest on %s %v; want 2 with the newest on node-3 alone", len(jobs), jobs[0].Target, jobs[0].Expected)
						}
						return nil
					},
				),
			},
			{
				// A host scaled down: its agent stops and its record is
				// removed. The plan drops it from converged_nodes and the
				// apply runs nothing.
				PreConfig: func() {
					ctx := context.Background()
					if err := f.KillAgent("node-2"); err != nil {
						t.Fatal(err)
					}
					testwait.Until(t, 30*time.Second, 100*time.Millisecond, "node-2 offline", func() bool {
						n, err := f.Client().GetNode(ctx, "node-2")
						return err == nil && n.Status == api.NodeOffline
					})
					if err := f.Client().RemoveNode(ctx, "node-2"); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(res, "converged_nodes.#", "2"),
					resource.TestCheckResourceAttr(res, "converged_nodes.0", "node-1"),
					resource.TestCheckResourceAttr(res, "converged_nodes.1", "node-3"),
					func(*terraform.State) error {
						jobs, err := f.Client().ListJobs(context.Background())
						if err != nil {
							return err
						}
						if len(jobs) != 2 {
							return fmt.Errorf("%d jobs after a node left, want the 2 from before (nothing runs)", len(jobs))
						}
						return nil
					},
				),
			},
			{
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

// fileAbsent is a plan check that a file does not exist yet: the plan
// (with its check-mode preview run) changed nothing on the host.
type fileAbsent string

func (p fileAbsent) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	if _, err := os.Stat(string(p)); err == nil {
		resp.Error = fmt.Errorf("plan changed the host: %s exists", p)
	}
}

// preview = true: the plan runs the tasks in check mode and shows what
// would change per node; nothing changes until apply.
func TestAccJobResource_preview(t *testing.T) {
	f := testAccFleet(t, 2)
	const res = "grid_job.test"
	file := filepath.Join(f.DataDir(), "agents", "node-1", "sandbox", "motd")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), fmt.Sprintf(`
  target  = { scope = "node", value = "node-1" }
  preview = true
  tasks = [
    { backend = "ping", action = "echo" },
    { backend = "file", action = "write", params = { path = %q, content = "hello" } },
  ]
`, file)),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						fileAbsent(file),
						plancheck.ExpectKnownValue(res, tfjsonpath.New("preview_summary"),
							knownvalue.StringExact("ping.echo would change 0 of 1 nodes; file.write would change 1 of 1 nodes")),
						plancheck.ExpectKnownValue(res, tfjsonpath.New("preview_nodes"), knownvalue.MapExact(map[string]knownvalue.Check{
							"node-1": knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("file.write")}),
						})),
					},
				},
				Check: func(*terraform.State) error {
					b, err := os.ReadFile(file)
					if err != nil {
						return fmt.Errorf("after apply: %w", err)
					}
					if string(b) != "hello" {
						return fmt.Errorf("after apply the file holds %q, want hello", b)
					}
					return nil
				},
			},
		},
	})
}

func TestWithoutCheckModeNamesActionsWithoutIt(t *testing.T) {
	cat := &api.Catalog{Backends: []api.BackendSchema{{Name: "exec", Actions: []api.ActionSchema{{Name: "run"}}},
		{Name: "ping", Actions: []api.ActionSchema{{Name: "echo", CheckMode: true}}}}}
	leaves := []specLeaf{
		{Field: "tasks[0]", Task: api.Task{Backend: "ping", Action: "echo"}},
		{Field: "tasks[1]", Task: api.Task{Backend: "exec", Action: "run"}},
	}
	got := withoutCheckMode(cat, leaves)
	if len(got) != 1 || !strings.Contains(got[1], "tasks[1]: exec.run has no check mode") {
		t.Fatalf("refusals %v, want one for tasks[1] exec.run", got)
	}
}
