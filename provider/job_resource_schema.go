package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// leafSchemaAttributes are the attributes of a task that runs one backend
// action.
func leafSchemaAttributes(top bool) map[string]schema.Attribute {
	backendDesc := "Backend to run (`ping`, `test`, …; see the `grid_backends` data source). Required, with `action`."
	if top {
		backendDesc = "Backend to run (`ping`, `test`, …; see the `grid_backends` data source). Set with `action`, or set `tasks` instead."
	}
	return map[string]schema.Attribute{
		"backend": schema.StringAttribute{
			MarkdownDescription: backendDesc,
			Optional:            true,
		},
		"action": schema.StringAttribute{
			MarkdownDescription: "Action of the backend (`echo`, `sleep`, …).",
			Optional:            true,
		},
		"params": schema.MapAttribute{
			MarkdownDescription: "Parameters of the action, as strings. They are checked against the action's schema at plan time; defaults apply to those left out.",
			ElementType:         types.StringType,
			Optional:            true,
		},
		"sensitive_params": schema.MapAttribute{
			MarkdownDescription: "Parameters whose values are secret (passwords, tokens), merged with `params` (a name may not be in both). " +
				"Terraform marks them sensitive in plans and state. Put here every param the action's schema marks `sensitive` " +
				"(such as exec's `secret`): the controller then stores and shows `(sensitive)` in its place and agents receive it sealed.",
			ElementType: types.StringType,
			Optional:    true,
			Sensitive:   true,
		},
		"timeout": schema.StringAttribute{
			MarkdownDescription: "Bound on one run of the action on one node (`30s`, `5m`). Defaults to the agent's task timeout.",
			Optional:            true,
			Validators:          []validator.String{durationValidator()},
		},
		"max_retries": schema.Int64Attribute{
			MarkdownDescription: fmt.Sprintf("How many times a failed run is retried on a node, with exponential backoff (0-%d). Defaults to 0.", api.MaxRetries),
			Optional:            true,
			Validators:          []validator.Int64{int64validator.Between(0, api.MaxRetries)},
		},
		"condition": schema.StringAttribute{
			MarkdownDescription: "When the step runs: `always` (the default), `on_success` (only if no earlier step failed) or `on_failure` (only if one did). Inside a pipeline it is judged per node.",
			Optional:            true,
			Validators: []validator.String{stringvalidator.OneOf(
				string(api.ConditionAlways), string(api.ConditionOnSuccess), string(api.ConditionOnFailure))},
		},
	}
}

// tasksSchemaAttribute is the shape of tasks and destroy_tasks: leaves are
// barrier steps, an element with nested tasks is a per-node pipeline.
func tasksSchemaAttribute(desc string, required bool, mods []planmodifier.List) schema.ListNestedAttribute {
	top := leafSchemaAttributes(true)
	top["max_concurrency"] = schema.StringAttribute{
		MarkdownDescription: "Most nodes that run this step (or this whole pipeline) at once: a count (`3`) or a percentage of the nodes (`10%`, rounded down, at least 1). Overrides the job's `max_concurrency`.",
		Optional:            true,
		Validators:          []validator.String{limitValidator(false)},
	}
	top["max_errors"] = schema.StringAttribute{
		MarkdownDescription: "Nodes that may fail (or become unreachable) in this step or pipeline before no new node starts: a count or a percentage (rounded down). Overrides the job's `max_errors`.",
		Optional:            true,
		Validators:          []validator.String{limitValidator(true)},
	}
	top["tasks"] = schema.ListNestedAttribute{
		MarkdownDescription: "A per-node pipeline: these tasks run in order on each node, and each node advances on its own " +
			"result. An element sets either `backend`/`action` or `tasks`. A pipeline cannot contain another pipeline.",
		Optional:     true,
		NestedObject: schema.NestedAttributeObject{Attributes: leafSchemaAttributes(false)},
		Validators:   []validator.List{listvalidator.SizeAtLeast(1)},
	}
	return schema.ListNestedAttribute{
		MarkdownDescription: desc,
		Required:            required,
		Optional:            !required,
		NestedObject:        schema.NestedAttributeObject{Attributes: top},
		Validators:          []validator.List{listvalidator.SizeAtLeast(1)},
		PlanModifiers:       mods,
	}
}

func (r *jobResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Runs a job on the GRID fleet: a list of backend actions against a target of nodes. " +
			"Creating the resource submits the job and (by default) waits for it; a job that does not complete " +
			"fails the apply with each failed node, step and error, and the resource is tainted so the next apply " +
			"runs it again.\n\n" +
			"Any change to `target`, `tasks`, `strategy`, `timeout`, `check_mode` or `triggers` replaces the " +
			"resource, which runs the job again (like `terraform_data`). `terraform plan` checks every task " +
			"against the action schemas of the online agents and shows in `nodes` which nodes the job will reach.\n\n" +
			"Controllers remove a finished job after their `job_retention` (7 days by default). When a job is gone, refresh keeps the " +
			"recorded state as it is: the job ran, and nothing is run again until the configuration changes.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Job id assigned by the controller.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"target": schema.SingleNestedAttribute{
				MarkdownDescription: "Which nodes the job runs on.",
				Required:            true,
				Attributes: map[string]schema.Attribute{
					"scope": schema.StringAttribute{
						MarkdownDescription: targetScopeDescription,
						Required:            true,
						Validators:          []validator.String{stringvalidator.OneOf(targetScopes...)},
					},
					"value": schema.StringAttribute{
						MarkdownDescription: targetValueDescription,
						Optional:            true,
					},
					"site": schema.StringAttribute{
						MarkdownDescription: targetSiteDescription,
						Optional:            true,
						Validators:          []validator.String{siteNameValidator()},
					},
				},
				PlanModifiers: []planmodifier.Object{objectplanmodifier.RequiresReplace()},
			},
			"strategy": schema.StringAttribute{
				MarkdownDescription: "What a failure does: `fail-fast` stops the job after the first failed step (only `on_failure` steps still run); `continue` drops failed nodes from later steps and carries on with the others. Defaults to `fail-fast`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(string(api.StrategyFailFast)),
				Validators: []validator.String{stringvalidator.OneOf(
					string(api.StrategyFailFast), string(api.StrategyContinue))},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"timeout": schema.StringAttribute{
				MarkdownDescription: "Bound on the whole job on the controller (`10m`). When it passes the job fails.",
				Optional:            true,
				Validators:          []validator.String{durationValidator()},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"check_mode": schema.BoolAttribute{
				MarkdownDescription: "Dry run: actions report what they would change without changing it. Every action must support check mode. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
				PlanModifiers:       []planmodifier.Bool{boolplanmodifier.RequiresReplace()},
			},
			"max_concurrency": schema.StringAttribute{
				MarkdownDescription: "Rolling execution: most nodes that run a step (or a whole pipeline) at once, as a count (`3`) or a percentage of the step's nodes (`10%`, rounded down, at least 1). Without it every node runs at once.",
				Optional:            true,
				Validators:          []validator.String{limitValidator(false)},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"max_errors": schema.StringAttribute{
				MarkdownDescription: "Rolling execution: how many nodes of a step may fail or become unreachable (a count or a percentage, rounded down) before no new node starts; nodes in flight finish, the rest are recorded `not_started` and the job fails. Failures within it leave the job `partial_failure`. Without it the strategy alone decides.",
				Optional:            true,
				Validators:          []validator.String{limitValidator(true)},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"tasks": tasksSchemaAttribute("The steps of the job, in order. An element with `backend` and `action` is a barrier step: "+
				"every node finishes it before any node starts the next. An element with nested `tasks` is a per-node pipeline.",
				true, []planmodifier.List{listplanmodifier.RequiresReplace()}),
			"triggers": schema.MapAttribute{
				MarkdownDescription: "Arbitrary values; changing any of them runs the job again (replaces the resource).",
				ElementType:         types.StringType,
				Optional:            true,
				PlanModifiers:       []planmodifier.Map{mapplanmodifier.RequiresReplace()},
			},
			"wait": schema.BoolAttribute{
				MarkdownDescription: "Wait for the job to finish and fail the apply if it does not complete. With `false` the apply ends once the controller accepted the job and `status`/`results` are filled in by later refreshes. Defaults to `true`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
			},
			"allow_empty": schema.BoolAttribute{
				MarkdownDescription: "Accept a target that selects no online node. Without it, such a plan is an error. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"destroy_tasks": tasksSchemaAttribute("Tasks run when the resource is destroyed, against the same target (for scope `any`, "+
				"the node the job ran on) with the same strategy and check mode. Destroy waits for them; if they fail, the destroy fails "+
				"and the resource stays in state. Without them, destroying only forgets the job.",
				false, nil),
			"converge": schema.BoolAttribute{
				MarkdownDescription: "Keep the target converged: every plan resolves the target again, and nodes that now match but have not run the current tasks successfully (a new agent in the group) show as a change of `converged_nodes`; apply runs the tasks on those nodes alone (one job per node) and records them. Nodes that left the target drop out of `converged_nodes`. Not for scope `any`. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"preview": schema.BoolAttribute{
				MarkdownDescription: "Plan previews: when a plan creates (or replaces) the job, it first runs the tasks in check mode on the target — actions report what they would change and change nothing — and shows the outcome in `preview_nodes` and `preview_summary`. Every action must support check mode; a plan with one that does not is refused. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"preview_nodes": schema.MapAttribute{
				MarkdownDescription: "With `preview`: for each node of the target, the steps (`backend.action`) that would change it; an empty list when nothing would.",
				ElementType:         types.ListType{ElemType: types.StringType},
				Computed:            true,
				PlanModifiers:       []planmodifier.Map{mapplanmodifier.UseStateForUnknown()},
			},
			"preview_summary": schema.StringAttribute{
				MarkdownDescription: "With `preview`: one line per step, such as `apt.install would change 3 of 5 nodes`.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"converged_nodes": schema.ListAttribute{
				MarkdownDescription: "Ids of the nodes that ran the current tasks successfully, sorted. With `converge`, a plan shows the nodes it will run on as additions here.",
				ElementType:         types.StringType,
				Computed:            true,
				PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "Job status: `pending`, `running`, `completed`, `failed`, `partial_failure` or `cancelled`.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"nodes": schema.ListAttribute{
				MarkdownDescription: "Ids of the nodes the job reaches, sorted. Known at plan time for scopes `all`, `group` and `node` (the online nodes the target selects); for scope `any` known after apply.",
				ElementType:         types.StringType,
				Computed:            true,
				PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
			"results_detail": schema.StringAttribute{
				MarkdownDescription: "What state keeps of the job's results: `full` (each node's status, output, error, changed, duration and attempts of every step) or `summary` " +
					"(the steps, `summary` and `unreachable_nodes`; each step's `nodes` is null). Every value in state costs time in each plan, so a job over hundreds " +
					"of nodes plans in a fraction of the time with `summary`; read one node's output with the `grid_job` data source or `grid job status`. " +
					"Changing it runs nothing. Defaults to `full`.",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(resultsFull),
				Validators: []validator.String{stringvalidator.OneOf(resultsFull, resultsSummary)},
			},
			"results": resourceResultsAttribute(),
			"summary": resourceSummaryAttribute(),
			"unreachable_nodes": schema.ListAttribute{
				MarkdownDescription: unreachableNodesDescription,
				ElementType:         types.StringType,
				Computed:            true,
				PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
			"drift": schema.StringAttribute{
				MarkdownDescription: "`detect`: every refresh runs the tasks in check mode on the nodes the job ran on and records in `drifted_nodes` those that would change " +
					"(a file edited by hand, a package removed); the plan then shows them, and apply runs the tasks on those nodes alone (one job per node). " +
					"Every action must support check mode, and `check_mode` must be `false`. The check waits at most 2 minutes and follows `max_concurrency`; " +
					"nodes it cannot reach are listed in `drift_unreachable_nodes`, not as drift. `ignore` (the default) checks nothing.",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(driftIgnore),
				Validators: []validator.String{stringvalidator.OneOf(driftIgnore, driftDetect)},
			},
			"drifted_nodes": schema.MapAttribute{
				MarkdownDescription: "With `drift = \"detect\"`: the nodes whose last check would change something, each with the steps and what they would change " +
					"(`tasks[0] file.write: would write /etc/app.conf`). A plan that fixes them shows them removed from here.",
				ElementType:   types.ListType{ElemType: types.StringType},
				Computed:      true,
				PlanModifiers: []planmodifier.Map{mapplanmodifier.UseStateForUnknown()},
			},
			"drift_unreachable_nodes": schema.ListAttribute{
				MarkdownDescription: "With `drift = \"detect\"`: the nodes the last check could not reach (offline, or gone during it), sorted. Not drift: nothing runs on them.",
				ElementType:         types.StringType,
				Computed:            true,
				PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the controller accepted the job (RFC 3339).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create:            true,
				Delete:            true,
				CreateDescription: "How long apply waits for the job (default 30m). When it passes, the job is cancelled and the apply fails.",
				DeleteDescription: "How long destroy waits for destroy_tasks (default 30m).",
			}),
		},
	}
}
