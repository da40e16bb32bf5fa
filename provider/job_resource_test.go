package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestFieldPath(t *testing.T) {
	cases := map[string]path.Path{
		"target.value":                 path.Root("target").AtName("value"),
		"strategy":                     path.Root("strategy"),
		"tasks[1].action":              path.Root("tasks").AtListIndex(1).AtName("action"),
		"tasks[0].tasks[2].params.msg": path.Root("tasks").AtListIndex(0).AtName("tasks").AtListIndex(2).AtName("params").AtMapKey("msg"),
	}
	for field, want := range cases {
		if got := fieldPath(path.Empty(), field); !got.Equal(want) {
			t.Errorf("fieldPath(%q) = %s, want %s", field, got, want)
		}
	}
	got := fieldPath(path.Root("destroy_tasks"), "[3].tasks[0].timeout")
	want := path.Root("destroy_tasks").AtListIndex(3).AtName("tasks").AtListIndex(0).AtName("timeout")
	if !got.Equal(want) {
		t.Errorf("fieldPath under destroy_tasks = %s, want %s", got, want)
	}
}

func TestTasksRoundTrip(t *testing.T) {
	ctx := context.Background()
	phases := []api.Phase{
		{Tasks: []api.Phase{
			{Backend: "ping", Action: "echo", Params: api.Params{"message": "a"}},
			{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1s"}, Timeout: "5s", MaxRetries: 2},
		}, Condition: api.ConditionAlways},
		{Backend: "test", Action: "fail", Condition: api.ConditionOnFailure},
	}
	l, diags := tasksValue(phases)
	if diags.HasError() {
		t.Fatal(diags)
	}
	tree, diags := readTasks(ctx, l, path.Root("tasks"), "tasks")
	if diags.HasError() {
		t.Fatal(diags)
	}
	if !tree.Known || len(tree.Leaves) != 3 {
		t.Fatalf("known %v, %d leaves", tree.Known, len(tree.Leaves))
	}
	if got, want := fmt.Sprint(tree.Phases), fmt.Sprint(phases); got != want {
		t.Errorf("round trip:\n got %s\nwant %s", got, want)
	}
	if f := tree.Leaves[1].Field; f != "tasks[0].tasks[1]" {
		t.Errorf("leaf field %q", f)
	}
	if p := tree.Leaves[2].Path; !p.Equal(path.Root("tasks").AtListIndex(1)) {
		t.Errorf("leaf path %s", p)
	}
	// Unknown values make the tree unknown without failing.
	unknown := types.ListUnknown(taskObjectType)
	tree, diags = readTasks(ctx, unknown, path.Root("tasks"), "tasks")
	if diags.HasError() || tree.Known {
		t.Errorf("unknown list: known %v diags %v", tree.Known, diags)
	}
}

func TestFailureDetail(t *testing.T) {
	job := &api.Job{
		ID:     "job-1",
		Target: api.Target{Scope: api.ScopeGroup, Value: "web"},
		Status: api.JobFailed,
		Tasks:  []api.Phase{{Backend: "ping", Action: "echo"}, {Backend: "test", Action: "fail"}},
		Results: api.JobResults{
			0: {"node-1": {Status: api.StepSuccess}, "node-2": {Status: api.StepSuccess}},
			1: {"node-2": {Status: api.StepFailed, Error: "boom", Attempts: 3}, "node-1": {Status: api.StepFailed, Error: "bang"}},
		},
	}
	got := failureDetail(job)
	for _, want := range []string{"group:web ended failed", "node node-1, step 1 (test.fail): bang", "node node-2, step 1 (test.fail): boom after 3 attempts"} {
		if !strings.Contains(got, want) {
			t.Errorf("detail lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "node-1") > strings.Index(got, "node-2") {
		t.Errorf("nodes not sorted:\n%s", got)
	}

	// Unreachable nodes are listed apart from failed ones, with the nodes
	// a rollout never started.
	job.Unreachable = []string{"node-9"}
	job.Results[1]["node-3"] = &api.NodeResult{Status: api.StepUnreachable, Error: "unreachable: node node-3 went offline"}
	job.Results[1]["node-4"] = &api.NodeResult{Status: api.StepNotStarted}
	got = failureDetail(job)
	unreach := strings.Index(got, "Unreachable nodes")
	if unreach < strings.Index(got, "node-2, step 1") || !strings.Contains(got[unreach:], "node node-9: offline when the target was resolved") ||
		!strings.Contains(got[unreach:], "node node-3, step 1 (test.fail): unreachable") || strings.Contains(got[:unreach], "node-3") {
		t.Errorf("unreachable nodes not apart:\n%s", got)
	}
	if !strings.Contains(got, "Not started (max_errors exceeded): node-4") {
		t.Errorf("not started nodes missing:\n%s", got)
	}
}

func TestMatchingOnline(t *testing.T) {
	nodes := []api.NodeInfo{
		{ID: "n3", Groups: []string{"web.prod"}, Status: api.NodeOnline},
		{ID: "n1", Groups: []string{"web"}, Status: api.NodeOnline},
		{ID: "n2", Groups: []string{"web.dev"}, Status: api.NodeOffline},
		{ID: "n4", Groups: []string{"webx"}, Status: api.NodeOnline},
	}
	if got := matchingOnline(nodes, api.Target{Scope: api.ScopeGroup, Value: "web"}); strings.Join(got, ",") != "n1,n3" {
		t.Errorf("group web: %v", got)
	}
	if got := matchingOnline(nodes, api.Target{Scope: api.ScopeNode, Value: "n2"}); len(got) != 0 {
		t.Errorf("offline node matched: %v", got)
	}
}

// jobConfig is a provider block plus one grid_job "test".
func jobConfig(addr, body string) string {
	return fmt.Sprintf("provider \"grid\" {\n  address = %q\n}\n\nresource \"grid_job\" \"test\" {\n%s\n}\n", addr, body)
}

func TestAccJobResource(t *testing.T) {
	f := testAccFleet(t, 3)
	addr := f.APIURL()
	const res = "grid_job.test"
	pipeline := `
  target   = { scope = "group", value = "web" }
  triggers = { release = %q }
  tasks = [
    { tasks = [
        { backend = "ping", action = "echo", params = { message = "hello" } },
        { backend = "ping", action = "echo", params = { message = "world" }, max_retries = 1 },
    ] },
    { backend = "ping", action = "echo", condition = "on_success" },
  ]
`
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	nodeResult := func(step int, node, output string) statecheck.StateCheck {
		return statecheck.ExpectKnownValue(res,
			tfjsonpath.New("results").AtSliceIndex(step).AtMapKey("nodes").AtMapKey(node),
			knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"status":   knownvalue.StringExact("success"),
				"output":   knownvalue.StringExact(output),
				"error":    knownvalue.StringExact(""),
				"attempts": knownvalue.Int64Exact(1),
			}))
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(addr, fmt.Sprintf(pipeline, "v1")),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(res, plancheck.ResourceActionCreate),
						// The plan already shows which nodes the job reaches.
						plancheck.ExpectKnownValue(res, tfjsonpath.New("nodes"),
							knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("node-1"), knownvalue.StringExact("node-3")})),
						plancheck.ExpectUnknownValue(res, tfjsonpath.New("results")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(res, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^job-`))),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("strategy"), knownvalue.StringExact("fail-fast")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results"), knownvalue.ListSizeExact(3)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(1),
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"index": knownvalue.Int64Exact(1), "backend": knownvalue.StringExact("ping"), "action": knownvalue.StringExact("echo"),
							"nodes": knownvalue.MapSizeExact(2),
						})),
					nodeResult(0, "node-1", "hello"),
					nodeResult(1, "node-3", "world"),
					nodeResult(2, "node-3", "pong"),
				},
			},
			{
				ResourceName:            res,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait", "allow_empty", "triggers", "destroy_tasks", "timeouts"},
			},
			{
				// Changing a trigger runs the job again.
				Config: jobConfig(addr, fmt.Sprintf(pipeline, "v2")),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(res, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
				},
			},
			{
				// So does changing the tasks, here to a barrier on every node.
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo", params = { message = "all" } }]
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(res, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("nodes"), knownvalue.ListSizeExact(3)),
					nodeResult(0, "node-2", "all"),
				},
			},
			{
				// wait is not part of the job: changing it updates in place.
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo", params = { message = "all" } }]
  wait   = false
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)},
				},
			},
			{
				// destroy_tasks added in place are checked at plan time too.
				Config: jobConfig(addr, `
  target        = { scope = "all" }
  tasks         = [{ backend = "ping", action = "echo", params = { message = "all" } }]
  wait          = false
  destroy_tasks = [{ backend = "ping", action = "explode" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Task.*destroy_tasks\[0\]\.action: unknown action "explode"`),
			},
		},
	})
}

func TestAccJobResource_failure(t *testing.T) {
	f := testAccFleet(t, 2)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target   = { scope = "node", value = "node-2" }
  strategy = "continue"
  tasks = [
    { backend = "ping", action = "echo" },
    { backend = "test", action = "fail", params = { message = "disk on fire" } },
  ]
`),
				ExpectError: regexp.MustCompile(`(?s)Job Failed.*node node-2, step 1 \(test\.fail\):\s+disk\s+on\s+fire`),
			},
		},
	})
}

func TestAccJobResource_planValidation(t *testing.T) {
	f := testAccFleet(t, 2)
	addr := f.APIURL()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [
    { backend = "ping", action = "echo" },
    { backend = "ping", action = "explode" },
  ]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Task.*tasks\[1\]\.action.*unknown action "explode"`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ tasks = [{ backend = "ping", action = "sleep", params = { duration = "soon" } }] }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Task.*"soon" is not a duration`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "sleep" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Task.*missing required param`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "group", value = "nowhere" }
  tasks  = [{ backend = "ping", action = "echo" }]
`),
				ExpectError: regexp.MustCompile(`No Matching Nodes`),
			},
			{
				// Caught without the controller: a task is a step or a pipeline.
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo", tasks = [{ backend = "ping", action = "echo" }] }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Task.*tasks\[0\]: a task sets either.*not\s+both`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "all" }
  tasks  = [{ tasks = [{ backend = "ping" }] }]
`),
				ExpectError: regexp.MustCompile(`(?s)Missing Task Action.*tasks\[0\]\.tasks\[0\]: each task needs an action`),
			},
			{
				Config: jobConfig(addr, `
  target = { scope = "all", value = "web" }
  tasks  = [{ backend = "ping", action = "echo" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Invalid Target.*must be empty`),
			},
			{
				Config: jobConfig("http://127.0.0.1:1", `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "echo" }]
`),
				ExpectError: regexp.MustCompile(`(?s)Controller Unreachable.*needs the GRID controller at\s+http://127.0.0.1:1`),
			},
		},
	})
	jobs, err := f.Client().ListJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 {
		t.Errorf("the controller received %d job(s), want none: plan-time validation must stop them", len(jobs))
	}
}

func TestAccJobResource_destroyTasksAndAny(t *testing.T) {
	f := testAccFleet(t, 2)
	const res = "grid_job.test"
	const marker = "bye-from-destroy"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: func(*terraform.State) error {
			jobs, err := f.Client().ListJobs(context.Background())
			if err != nil {
				return err
			}
			for _, j := range jobs {
				for _, s := range api.Flatten(j.Tasks) {
					if s.Task.Params["message"] == marker {
						if j.Status != api.JobCompleted {
							return fmt.Errorf("destroy job %s ended %s", j.ID, j.Status)
						}
						if j.Target.Scope != api.ScopeNode {
							return fmt.Errorf("destroy job %s targets %s, want the node the job ran on", j.ID, j.Target)
						}
						return nil
					}
				}
			}
			return fmt.Errorf("no destroy job with message %q among %d jobs", marker, len(jobs))
		},
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target        = { scope = "any" }
  tasks         = [{ backend = "ping", action = "echo", params = { message = "hi" } }]
  destroy_tasks = [{ backend = "ping", action = "echo", params = { message = "`+marker+`" } }]
  timeouts {
    create = "2m"
  }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectUnknownValue(res, tfjsonpath.New("nodes"))},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("nodes"), knownvalue.ListSizeExact(1)),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
				},
			},
		},
	})
}

func TestAccJobResource_allowEmpty(t *testing.T) {
	f := testAccFleet(t, 1)
	const res = "grid_job.test"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target      = { scope = "group", value = "nowhere" }
  allow_empty = true
  tasks       = [{ backend = "ping", action = "echo" }]
`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("nodes"), knownvalue.ListSizeExact(0)),
				},
			},
		},
	})
}

func TestAccJobResource_timeoutCancels(t *testing.T) {
	f := testAccFleet(t, 1)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(f.APIURL(), `
  target = { scope = "all" }
  tasks  = [{ backend = "ping", action = "sleep", params = { duration = "1m" } }]
  timeouts {
    create = "2s"
  }
`),
				ExpectError: regexp.MustCompile(`(?s)Job Timed Out.*did not finish within 2s, so it was\s+cancelled`),
			},
		},
	})
	jobs, err := f.Client().ListJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Status != api.JobCancelled {
		t.Fatalf("want one cancelled job, got %d: %+v", len(jobs), jobs)
	}
}

func TestAccJobResource_noWait(t *testing.T) {
	f := testAccFleet(t, 2)
	const res = "grid_job.test"
	config := jobConfig(f.APIURL(), `
  target = { scope = "group", value = "db" }
  wait   = false
  tasks  = [{ backend = "ping", action = "sleep", params = { duration = "1s" } }]
`)
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: config,
				Check: func(s *terraform.State) error {
					id = s.RootModule().Resources[res].Primary.ID
					return nil
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringRegexp(regexp.MustCompile(`^(pending|running)$`))),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("nodes"), ids("node-2")),
				},
			},
			{
				// A refresh after the job finished fills in status and results.
				PreConfig: func() {
					if _, err := f.Client().WaitJob(context.Background(), id); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
					statecheck.ExpectKnownValue(res, tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes").AtMapKey("node-2").AtMapKey("status"),
						knownvalue.StringExact("success")),
				},
			},
		},
	})
}

// validateOnTargeted tells a targeted node that does not offer a task's
// action (advice: enable it) from one that offers it but refuses the task
// by another schema of the action (no such advice).
func TestValidateOnTargetedNotOfferedAndRefused(t *testing.T) {
	echo := func(param string) api.BackendSchema {
		return api.BackendSchema{Name: "ping", Actions: []api.ActionSchema{{Name: "echo",
			Params: []api.ParamSchema{{Name: param, Type: api.TypeString}}}}}
	}
	schemas := map[string][]api.BackendSchema{
		"node-a": {echo("message")},
		"node-b": {echo("msg")},
		"node-c": {{Name: "test", Actions: []api.ActionSchema{{Name: "fail"}}}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/node/")
		_ = json.NewEncoder(w).Encode(api.NodeInfo{ID: id, Schemas: schemas[id]})
	}))
	defer srv.Close()
	c, err := api.NewClient(api.ClientConfig{Address: srv.URL, Token: "t", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &jobResource{client: c}
	var nodes []api.NodeInfo
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, api.NodeInfo{ID: id, SchemaDigest: id})
	}
	leaf := specLeaf{Path: path.Root("tasks").AtListIndex(0), Field: "tasks[0]", Known: true,
		Task: api.Task{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}}}
	var diags diag.Diagnostics
	r.validateOnTargeted(context.Background(), nodes, []string{"node-a", "node-b", "node-c"}, []specLeaf{leaf}, false, &diags)
	if diags.ErrorsCount() != 2 {
		t.Fatalf("want 2 errors, got %v", diags)
	}
	got := map[string]string{}
	for _, d := range diags.Errors() {
		got[d.Summary()] = d.Detail()
	}
	if d := got["Task Not Offered By Targeted Nodes"]; !strings.Contains(d, "1 targeted node(s) cannot run ping.echo: node-c") || !strings.Contains(d, "enable it") {
		t.Errorf("not offered: %q", d)
	}
	if d := got["Task Refused By Targeted Nodes"]; !strings.Contains(d, "1 targeted node(s) offer ping.echo but refuse this task: node-b") ||
		!strings.Contains(d, "unknown param") || strings.Contains(d, "enable it") {
		t.Errorf("refused: %q", d)
	}
}
