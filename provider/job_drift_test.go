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
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// driftFleet starts agents that allow every action (net.dns_set is
// dangerous) and offer exec with one program (exec.run has no check mode).
func driftFleet(t *testing.T, agents int) *fleet.Fleet {
	t.Helper()
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: agents, Agent: func(_ int, c *agent.Config) {
		c.Allow = []string{"*"}
		c.Backends.Programs = map[string]agent.ProgramConfig{"true": {Path: "/bin/true"}}
	}})
	t.Setenv("GRID_TOKEN", f.AdminToken())
	t.Setenv("GRID_CACERT", f.CAFile())
	return f
}

// priorDrift is a plan check on the refreshed state the plan starts from:
// drifted_nodes holds exactly these nodes.
type priorDrift struct {
	res   string
	nodes []string
}

func (p priorDrift) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != p.res {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		drifted, _ := before["drifted_nodes"].(map[string]any)
		var got []string
		for id := range drifted {
			got = append(got, id)
		}
		slices.Sort(got)
		if !slices.Equal(got, p.nodes) {
			resp.Error = fmt.Errorf("refreshed drifted_nodes %v, want %v", drifted, p.nodes)
		}
		return
	}
	resp.Error = fmt.Errorf("no change of %s in the plan", p.res)
}

// drift = "detect": a resolver file changed by hand on one node of two
// shows in the next plan as drift of that node alone; apply runs the task
// on that node only and leaves the other untouched; the plan after is
// empty.
func TestAccJobResource_drift(t *testing.T) {
	f := driftFleet(t, 4)
	const res = "grid_job.test"
	resolv := func(node string) string { return filepath.Join(f.DataDir(), "agents", node, "sandbox", "resolv.conf") }
	cfg := jobConfig(f.APIURL(), `
  target = { scope = "group", value = "web" }
  drift  = "detect"
  tasks  = [{ backend = "net", action = "dns_set", params = { servers = "10.0.0.53" } }]
`)
	var untouched time.Time
	var jobsBefore int
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("drifted_nodes"), knownvalue.MapSizeExact(0)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("converged_nodes"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("node-1"), knownvalue.StringExact("node-3")})),
				},
			},
			{
				PreConfig: func() {
					if err := os.WriteFile(resolv("node-1"), []byte("nameserver 10.9.9.9\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					st, err := os.Stat(resolv("node-3"))
					if err != nil {
						t.Fatal(err)
					}
					untouched = st.ModTime()
					jobs, err := f.Client().ListJobs(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					jobsBefore = len(jobs)
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate),
						priorDrift{res: res, nodes: []string{"node-1"}},
						plancheck.ExpectKnownValue(res, tfjsonpath.New("drifted_nodes"), knownvalue.MapSizeExact(0)),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("drifted_nodes"), knownvalue.MapSizeExact(0)),
				},
				Check: func(*terraform.State) error {
					b, err := os.ReadFile(resolv("node-1"))
					if err != nil {
						return err
					}
					if !strings.Contains(string(b), "10.0.0.53") {
						return fmt.Errorf("node-1's resolver after apply holds %q, want 10.0.0.53 again", b)
					}
					st, err := os.Stat(resolv("node-3"))
					if err != nil {
						return err
					}
					if !st.ModTime().Equal(untouched) {
						return fmt.Errorf("node-3's resolver was written again (%s, before %s); only node-1 drifted", st.ModTime(), untouched)
					}
					jobs, err := f.Client().ListJobs(context.Background())
					if err != nil {
						return err
					}
					// The refresh's check job and the fix, on node-1 alone.
					var fixes []string
					for _, j := range jobs {
						if !j.CheckMode {
							fixes = append(fixes, j.Target.String())
						}
					}
					if len(jobs) < jobsBefore+2 || !slices.Contains(fixes, "node:node-1") || slices.Contains(fixes, "node:node-3") {
						return fmt.Errorf("jobs after the fix: %d (before %d), changing ones on %v; want a check and one job on node:node-1", len(jobs), jobsBefore, fixes)
					}
					return nil
				},
			},
			{
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

// A task without check mode cannot be checked for drift: the plan says so.
func TestAccJobResource_driftRefusedWithoutCheckMode(t *testing.T) {
	f := driftFleet(t, 1)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target = { scope = "all" }
  drift  = "detect"
  tasks  = [{ backend = "exec", action = "run", params = { program = "true" } }]
`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Drift Detection Not Possible.*exec.run has no check mode`),
			},
			{
				Config: jobConfig(f.APIURL(), `
  target     = { scope = "all" }
  drift      = "detect"
  check_mode = true
  tasks      = [{ backend = "ping", action = "echo" }]
`),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`Drift Detection Of A Check-Mode Job`),
			},
		},
	})
}

// A node gone during refresh is recorded in drift_unreachable_nodes, not as
// drift, and the plan completes.
func TestAccJobResource_driftUnreachable(t *testing.T) {
	f := driftFleet(t, 2)
	const res = "grid_job.test"
	cfg := jobConfig(f.APIURL(), `
  target = { scope = "all" }
  drift  = "detect"
  tasks  = [{ backend = "ping", action = "echo" }]
`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					if err := f.StopAgent("node-2"); err != nil {
						t.Fatal(err)
					}
				},
				RefreshState: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(res, "drift_unreachable_nodes.#", "1"),
					resource.TestCheckResourceAttr(res, "drift_unreachable_nodes.0", "node-2"),
					resource.TestCheckResourceAttr(res, "drifted_nodes.%", "0"),
				),
			},
			{
				Config:   cfg,
				PlanOnly: true,
			},
		},
	})
}

// driftOf reads a check job: a changed step is drift, an unreachable node
// or one the check never resolved is not, a failed step cannot tell.
func TestDriftOf(t *testing.T) {
	check := &api.Job{
		Tasks:       []api.Phase{{Backend: "file", Action: "write"}},
		Expected:    []string{"a", "b", "c", "d"},
		Unreachable: []string{"e"},
		Results: api.JobResults{0: {
			"a": {Status: api.StepSuccess, Changed: true, Output: "check mode: would write /etc/app.conf\nmore"},
			"b": {Status: api.StepSuccess},
			"c": {Status: api.StepUnreachable},
			"d": {Status: api.StepFailed, Error: "boom"},
		}},
	}
	o := driftOf(check, []string{"a", "b", "c", "d", "e", "f"})
	if got := o.drifted["a"]; len(o.drifted) != 1 || len(got) != 1 || got[0] != "tasks step 0 file.write: would write /etc/app.conf" {
		t.Errorf("drifted %v, want a alone with its first line", o.drifted)
	}
	if !slices.Equal(o.unreachable, []string{"c", "e", "f"}) {
		t.Errorf("unreachable %v, want c e f", o.unreachable)
	}
	if !slices.Equal(o.unsure, []string{"d"}) {
		t.Errorf("unsure %v, want d", o.unsure)
	}
	if s := driftSummary(o.drifted, 6); s != "1 of 6 nodes drifted: a tasks step 0 file.write: would write /etc/app.conf" {
		t.Errorf("summary %q", s)
	}
}

// results_detail = "summary" keeps no value per node; switching to full
// runs nothing and reads the same job's results again.
func TestAccJobResource_resultsDetail(t *testing.T) {
	f := testAccFleet(t, 2)
	const res = "grid_job.test"
	cfg := func(detail string) string {
		return jobConfig(f.APIURL(), fmt.Sprintf(`
  target         = { scope = "all" }
  results_detail = %q
  tasks          = [{ backend = "ping", action = "echo", params = { message = "hi" } }]
`, detail))
	}
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg("summary"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes"), knownvalue.Null()),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("action"), knownvalue.StringExact("echo")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("summary").AtMapKey("succeeded"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("unreachable_nodes"), knownvalue.ListSizeExact(0)),
				},
				Check: func(s *terraform.State) error {
					id = s.RootModule().Resources[res].Primary.ID
					return nil
				},
			},
			{
				Config: cfg("full"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes").AtMapKey("node-2").AtMapKey("output"),
						knownvalue.StringExact("hi")),
				},
				Check: func(s *terraform.State) error {
					if got := s.RootModule().Resources[res].Primary.ID; got != id {
						return fmt.Errorf("job %s after changing results_detail, want %s (no new job)", got, id)
					}
					return nil
				},
			},
		},
	})
}

func TestUnreachableNodes(t *testing.T) {
	j := &api.Job{Unreachable: []string{"b"}, Results: api.JobResults{
		0: {"a": {Status: api.StepSuccess}, "c": {Status: api.StepUnreachable}},
		1: {"c": {Status: api.StepUnreachable}, "b": {Status: api.StepUnreachable}},
	}}
	got := unreachableNodes(j)
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("unreachable %v, want b c once each", got)
	}
}
