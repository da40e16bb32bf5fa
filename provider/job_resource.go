package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
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
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ resource.Resource                   = &jobResource{}
	_ resource.ResourceWithConfigure      = &jobResource{}
	_ resource.ResourceWithImportState    = &jobResource{}
	_ resource.ResourceWithModifyPlan     = &jobResource{}
	_ resource.ResourceWithValidateConfig = &jobResource{}
)

// Default waits of the timeouts block.
const (
	defaultCreateTimeout = 30 * time.Minute
	defaultDeleteTimeout = 30 * time.Minute
)

// NewJobResource returns the grid_job resource.
func NewJobResource() resource.Resource {
	return &jobResource{}
}

// jobResource is grid_job: one job run on the fleet when the resource is
// created (and again whenever it is replaced).
type jobResource struct {
	client *api.Client
}

// jobResourceModel maps grid_job.
type jobResourceModel struct {
	ID           types.String   `tfsdk:"id"`
	Target       types.Object   `tfsdk:"target"`
	Strategy     types.String   `tfsdk:"strategy"`
	Timeout      types.String   `tfsdk:"timeout"`
	CheckMode    types.Bool     `tfsdk:"check_mode"`
	Tasks        types.List     `tfsdk:"tasks"`
	Triggers     types.Map      `tfsdk:"triggers"`
	Wait         types.Bool     `tfsdk:"wait"`
	AllowEmpty   types.Bool     `tfsdk:"allow_empty"`
	DestroyTasks types.List     `tfsdk:"destroy_tasks"`
	Status       types.String   `tfsdk:"status"`
	Nodes        types.List     `tfsdk:"nodes"`
	Results      types.List     `tfsdk:"results"`
	CreatedAt    types.String   `tfsdk:"created_at"`
	Timeouts     timeouts.Value `tfsdk:"timeouts"`
}

func (r *jobResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

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
		"timeout": schema.StringAttribute{
			MarkdownDescription: "Bound on one run of the action on one node (`30s`, `5m`). Defaults to the agent's task timeout.",
			Optional:            true,
			Validators:          []validator.String{durationValidator{}},
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
			"Jobs expire from the controller after its retention time. When a job is gone, refresh keeps the " +
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
						MarkdownDescription: "`all` (every online node), `group` (nodes in the group `value` or any of its sub-groups: `web` also selects `web.dev`), `node` (the node with id `value`) or `any` (one online node, chosen by the controller).",
						Required:            true,
						Validators: []validator.String{stringvalidator.OneOf(
							string(api.ScopeAll), string(api.ScopeGroup), string(api.ScopeNode), string(api.ScopeAny))},
					},
					"value": schema.StringAttribute{
						MarkdownDescription: "Group name for scope `group`, node id for scope `node`; not set for `all` and `any`.",
						Optional:            true,
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
				Validators:          []validator.String{durationValidator{}},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"check_mode": schema.BoolAttribute{
				MarkdownDescription: "Dry run: actions report what they would change without changing it. Every action must support check mode. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
				PlanModifiers:       []planmodifier.Bool{boolplanmodifier.RequiresReplace()},
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
			"results": schema.ListNestedAttribute{
				MarkdownDescription: "One element per step, in the order the steps run (pipeline tasks are numbered in place, depth first).",
				Computed:            true,
				PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"index":   schema.Int64Attribute{Computed: true, MarkdownDescription: "Flat step index."},
					"backend": schema.StringAttribute{Computed: true, MarkdownDescription: "Backend of the step."},
					"action":  schema.StringAttribute{Computed: true, MarkdownDescription: "Action of the step."},
					"nodes": schema.MapNestedAttribute{
						MarkdownDescription: "Result of each node that took part in the step, by node id.",
						Computed:            true,
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"status":   schema.StringAttribute{Computed: true, MarkdownDescription: "`success`, `failed`, `skipped`, `cancelled`, or a state in progress."},
							"output":   schema.StringAttribute{Computed: true, MarkdownDescription: "What the action reported."},
							"error":    schema.StringAttribute{Computed: true, MarkdownDescription: "Why it failed."},
							"changed":  schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the action changed something."},
							"duration": schema.StringAttribute{Computed: true, MarkdownDescription: "How long the last attempt ran."},
							"attempts": schema.Int64Attribute{Computed: true, MarkdownDescription: "How many times it ran."},
						}},
					},
				}},
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

func (r *jobResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Resource Configure Type", err.Error())
		return
	}
	r.client = c
}

// ValidateConfig checks what can be checked without the controller: the
// target's value against its scope, each task element being either a leaf or
// a pipeline, and the job's structure as the controller will check it.
func (r *jobResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg jobResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	target, targetKnown, d := readTarget(ctx, cfg.Target)
	resp.Diagnostics.Append(d...)
	if targetKnown {
		if err := target.Validate(); err != nil {
			addValidationError(&resp.Diagnostics, "Invalid Target", err)
		}
	}

	validateTaskShapes(ctx, cfg.Tasks, path.Root("tasks"), &resp.Diagnostics)
	validateTaskShapes(ctx, cfg.DestroyTasks, path.Root("destroy_tasks"), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}

	for _, list := range []struct {
		name string
		l    types.List
	}{{"tasks", cfg.Tasks}, {"destroy_tasks", cfg.DestroyTasks}} {
		tree, d := readTasks(ctx, list.l, path.Root(list.name), "tasks", false)
		resp.Diagnostics.Append(d...)
		if !tree.Known || len(tree.Phases) == 0 {
			continue
		}
		job := &api.Job{Target: api.Target{Scope: api.ScopeAll}, Tasks: tree.Phases}
		if err := job.Validate(); err != nil {
			addTasksValidationError(&resp.Diagnostics, list.name, err)
		}
	}
}

// validateTaskShapes checks that every element of a task list sets either
// backend and action or nested tasks.
func validateTaskShapes(ctx context.Context, l types.List, root path.Path, diags *diag.Diagnostics) {
	if l.IsNull() || l.IsUnknown() {
		return
	}
	for i, el := range l.Elements() {
		obj, ok := el.(types.Object)
		if !ok || obj.IsNull() || obj.IsUnknown() {
			continue
		}
		var tm taskModel
		diags.Append(obj.As(ctx, &tm, basetypes.ObjectAsOptions{})...)
		if diags.HasError() {
			return
		}
		p := root.AtListIndex(i)
		if tm.Tasks.IsUnknown() {
			continue
		}
		if !tm.Tasks.IsNull() {
			for _, a := range []struct {
				name string
				set  bool
			}{
				{"backend", !tm.Backend.IsNull()}, {"action", !tm.Action.IsNull()}, {"params", !tm.Params.IsNull()},
				{"timeout", !tm.Timeout.IsNull()}, {"max_retries", !tm.MaxRetries.IsNull()},
			} {
				if a.set {
					diags.AddAttributeError(p.AtName(a.name), "Invalid Task",
						fmt.Sprintf("%s: a task sets either backend/action (a step) or tasks (a per-node pipeline), not both. "+
							"Move %q into the tasks of the pipeline, or remove the nested tasks.", p, a.name))
				}
			}
			sub := tm.Tasks.Elements()
			for j, se := range sub {
				so, ok := se.(types.Object)
				if !ok || so.IsNull() || so.IsUnknown() {
					continue
				}
				var lm leafModel
				diags.Append(so.As(ctx, &lm, basetypes.ObjectAsOptions{})...)
				if diags.HasError() {
					return
				}
				requireLeaf(lm.task(), p.AtName("tasks").AtListIndex(j), diags)
			}
			continue
		}
		requireLeaf(tm, p, diags)
	}
}

func requireLeaf(tm taskModel, p path.Path, diags *diag.Diagnostics) {
	if tm.Backend.IsNull() {
		diags.AddAttributeError(p.AtName("backend"), "Missing Task Backend",
			p.String()+": each task needs a backend and an action (or, at the top level, nested tasks for a "+
				"per-node pipeline). The grid_backends data source lists what the fleet offers.")
	}
	if tm.Action.IsNull() {
		diags.AddAttributeError(p.AtName("action"), "Missing Task Action",
			p.String()+": each task needs an action of its backend, e.g. backend = \"ping\", action = \"echo\".")
	}
}

// addValidationError reports an api validation error of the target at the
// attribute it names.
func addValidationError(diags *diag.Diagnostics, summary string, err error) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) || ve.Field == "" {
		diags.AddAttributeError(path.Root("target"), summary, err.Error())
		return
	}
	diags.AddAttributeError(fieldPath(path.Empty(), ve.Field), summary, ve.Error())
}

// addTasksValidationError reports an api validation error of a task list
// ("tasks[1].tasks[0].timeout") under the list attribute it came from.
func addTasksValidationError(diags *diag.Diagnostics, list string, err error) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) || ve.Field == "" {
		diags.AddAttributeError(path.Root(list), "Invalid Task", err.Error())
		return
	}
	rest := strings.TrimPrefix(ve.Field, "tasks")
	diags.AddAttributeError(fieldPathUnder(path.Root(list), rest), "Invalid Task", list+rest+": "+ve.Msg)
}

// fieldPathUnder resolves "[1].tasks[0].action" (a field relative to a list
// attribute) under root.
func fieldPathUnder(root path.Path, field string) path.Path {
	if strings.HasPrefix(field, "[") {
		end := strings.IndexByte(field, ']')
		var idx int
		if end > 0 {
			if _, err := fmt.Sscanf(field[1:end], "%d", &idx); err == nil {
				rest := strings.TrimPrefix(field[end+1:], ".")
				return fieldPath(root.AtListIndex(idx), rest)
			}
		}
	}
	return fieldPath(root, field)
}

// ModifyPlan validates a job that is about to be submitted (a create, or
// the create half of a replacement) against the controller: every task
// against the action schemas of the online agents, and the target against
// the online nodes, whose ids it plans into nodes.
func (r *jobResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.client == nil {
		return
	}
	var plan jobResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A create submits the job. An in-place update submits nothing, but
	// may set new destroy_tasks, which are checked too. (A replacement is
	// planned again as a create, with a null state.)
	creating := req.State.Raw.IsNull()
	lists := []string{"tasks", "destroy_tasks"}
	if !creating {
		var prior types.List
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("destroy_tasks"), &prior)...)
		if resp.Diagnostics.HasError() || plan.DestroyTasks.Equal(prior) {
			return
		}
		lists = []string{"destroy_tasks"}
	}

	checkMode := plan.CheckMode.ValueBool()
	var leaves []specLeaf
	for _, name := range lists {
		var l types.List
		resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root(name), &l)...)
		tree, d := readTasks(ctx, l, path.Root(name), name, false)
		resp.Diagnostics.Append(d...)
		leaves = append(leaves, tree.Leaves...)
	}
	if resp.Diagnostics.HasError() {
		return
	}

	cat, err := r.client.Backends(ctx)
	if err != nil {
		r.addPlanClientError(&resp.Diagnostics, "Read Backends Error", err)
		return
	}
	for _, leaf := range leaves {
		if !leaf.Known || plan.CheckMode.IsUnknown() {
			continue
		}
		if err := cat.ValidateTask(leaf.Field, leaf.Task, checkMode); err != nil {
			p, msg := leafErrorPath(leaf, err)
			resp.Diagnostics.AddAttributeError(p, "Invalid Task", msg+
				"\n\nThe grid_backends data source (or `grid backends`) lists the actions and parameters the online agents offer.")
		}
	}

	if !creating {
		return
	}
	target, known, d := readTarget(ctx, plan.Target)
	resp.Diagnostics.Append(d...)
	if !known || plan.AllowEmpty.IsUnknown() {
		return
	}
	nodes, err := r.client.ListNodes(ctx)
	if err != nil {
		r.addPlanClientError(&resp.Diagnostics, "List Nodes Error", err)
		return
	}
	ids := matchingOnline(nodes, target)
	if len(ids) == 0 && !plan.AllowEmpty.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("target"), "No Matching Nodes",
			fmt.Sprintf("No online node matches target %s (%d nodes registered, %d online). Start agents for it, fix the target, "+
				"or set allow_empty = true to accept a job that reaches no node.", target, len(nodes), countOnline(nodes)))
		return
	}
	if target.Scope == api.ScopeAny {
		// The controller picks the node when the job runs.
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("nodes"), nodesValue(ids))...)
}

// addPlanClientError reports a failure to ask the controller at plan time.
func (r *jobResource) addPlanClientError(diags *diag.Diagnostics, summary string, err error) {
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		diags.AddError("Controller Unreachable", fmt.Sprintf(
			"grid_job validates its tasks and resolves its target at plan time, which needs the GRID controller at %s, "+
				"and it cannot be reached: %v.\n\nStart the controller (for a local fleet: grid dev), or point the provider's "+
				"address (or GRID_ADDR) at it.", ue.Address, ue.Err))
		return
	}
	addClientError(diags, summary, err)
}

// leafErrorPath maps a catalog validation error of a leaf to the attribute
// at fault and a message.
func leafErrorPath(leaf specLeaf, err error) (path.Path, string) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) {
		return leaf.Path, err.Error()
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(ve.Field, leaf.Field), ".")
	switch {
	case rest == "backend" || rest == "action":
		return leaf.Path.AtName(rest), ve.Error()
	case strings.HasPrefix(rest, "params."):
		key := strings.TrimPrefix(rest, "params.")
		if _, ok := leaf.Task.Params[key]; ok {
			return leaf.Path.AtName("params").AtMapKey(key), ve.Error()
		}
		return leaf.Path.AtName("params"), ve.Error()
	}
	return leaf.Path, ve.Error()
}

// matchingOnline returns the sorted ids of the online nodes a target selects.
func matchingOnline(nodes []api.NodeInfo, t api.Target) []string {
	var ids []string
	for _, n := range nodes {
		if n.Status == api.NodeOnline && t.Matches(n.ID, n.Groups) {
			ids = append(ids, n.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

func countOnline(nodes []api.NodeInfo) int {
	n := 0
	for _, x := range nodes {
		if x.Status == api.NodeOnline {
			n++
		}
	}
	return n
}

// specFrom builds the job to submit from a plan or state.
func specFrom(ctx context.Context, m *jobResourceModel, tasks types.List) (*api.JobSpec, diag.Diagnostics) {
	var diags diag.Diagnostics
	target, _, d := readTarget(ctx, m.Target)
	diags.Append(d...)
	tree, d := readTasks(ctx, tasks, path.Root("tasks"), "tasks", false)
	diags.Append(d...)
	return &api.JobSpec{
		Target:    target,
		Tasks:     tree.Phases,
		Strategy:  api.Strategy(m.Strategy.ValueString()),
		Timeout:   m.Timeout.ValueString(),
		CheckMode: m.CheckMode.ValueBool(),
	}, diags
}

// setJob copies what the controller reports about a job into the model.
func setJob(m *jobResourceModel, job *api.Job) diag.Diagnostics {
	m.ID = types.StringValue(job.ID)
	m.Status = types.StringValue(string(job.Status))
	m.CreatedAt = types.StringValue(job.CreatedAt.UTC().Format(time.RFC3339))
	results, diags := resultsValue(job)
	m.Results = results
	if len(job.Expected) > 0 || job.Status.Terminal() || m.Nodes.IsUnknown() || m.Nodes.IsNull() {
		m.Nodes = nodesValue(job.Expected)
	}
	return diags
}

// runJob submits a job and, when wait is set, waits for it. It returns the
// last known job (nil when submission failed).
func (r *jobResource) runJob(ctx context.Context, spec *api.JobSpec, wait bool, waitFor time.Duration, summary string, diags *diag.Diagnostics) *api.Job {
	job, err := r.client.SubmitJob(ctx, spec)
	if err != nil {
		addClientError(diags, summary, err)
		return nil
	}
	if !wait {
		return job
	}
	wctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for {
		done, err := r.client.WaitJob(wctx, job.ID)
		if err == nil {
			return done
		}
		if done != nil {
			job = done
		}
		var ue *api.UnreachableError
		if errors.As(err, &ue) && wctx.Err() == nil {
			// The controller may be restarting: keep waiting.
			select {
			case <-wctx.Done():
			case <-time.After(2 * time.Second):
			}
			continue
		}
		if wctx.Err() == nil {
			diags.AddError("Wait For Job Error", fmt.Sprintf("Job %s was submitted, but waiting for it failed: %v. "+
				"Check it with `grid job get %s`; the resource is tainted and the next apply runs the job again.", job.ID, err, job.ID))
			return job
		}
		// Timed out or interrupted: stop the job rather than leave it running.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		if cj, cerr := r.client.CancelJob(cctx, job.ID); cerr == nil {
			job = cj
		}
		if fj, ferr := r.client.GetJob(cctx, job.ID); ferr == nil {
			job = fj
		}
		ccancel()
		why := fmt.Sprintf("did not finish within %s", waitFor)
		if ctx.Err() != nil {
			why = "was interrupted"
		}
		diags.AddError("Job Timed Out", fmt.Sprintf("Job %s %s, so it was cancelled. Raise the wait with a timeouts block "+
			"(timeouts { create = \"1h\" }) or speed the tasks up; the resource is tainted and the next apply runs the job again.\n\n%s",
			job.ID, why, failureDetail(job)))
		return job
	}
}

func (r *jobResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan jobResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if r.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot submit the job.")
		return
	}
	waitFor, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(d...)
	spec, d := specFrom(ctx, &plan, plan.Tasks)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}

	planned := plan.Nodes
	wait := plan.Wait.ValueBool()
	job := r.runJob(ctx, spec, wait, waitFor, "Submit Job Error", &resp.Diagnostics)
	if job == nil {
		return
	}
	resp.Diagnostics.Append(setJob(&plan, job)...)
	if !wait && !planned.IsUnknown() {
		// The controller resolves the target when it starts the job, after
		// this returns; until a refresh, the planned nodes stand.
		plan.Nodes = planned
	}
	if wait && !resp.Diagnostics.HasError() {
		switch {
		case !jobSucceeded(job, plan.AllowEmpty.ValueBool()):
			resp.Diagnostics.AddError("Job Failed", failureDetail(job)+
				"\n\nThe resource is tainted: fix the cause and apply again to run the job again.")
		case !planned.IsUnknown() && !planned.Equal(plan.Nodes):
			resp.Diagnostics.AddError("Target Changed Since Plan", fmt.Sprintf(
				"The plan expected job %s to reach %s, but when it started the target resolved to %s (nodes came or went). "+
					"The job ran; the resource is tainted so that the next apply runs it again on the current nodes.",
				job.ID, listString(planned), listString(plan.Nodes)))
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func listString(l types.List) string {
	var ids []string
	for _, v := range l.Elements() {
		if s, ok := v.(types.String); ok {
			ids = append(ids, s.ValueString())
		}
	}
	if len(ids) == 0 {
		return "no nodes"
	}
	return "[" + strings.Join(ids, ", ") + "]"
}

func (r *jobResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state jobResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if r.client == nil {
		return
	}
	importing := state.Target.IsNull()
	job, err := r.client.GetJob(ctx, state.ID.ValueString())
	if err != nil {
		if api.IsStatus(err, http.StatusNotFound) {
			if importing {
				resp.Diagnostics.AddError("Import Job Error", fmt.Sprintf(
					"The controller has no job %q. Jobs expire after the controller's retention time; `grid job list` shows the ones it keeps.",
					state.ID.ValueString()))
				return
			}
			// The job expired on the controller. The resource records that
			// the job ran; keep the recorded state so nothing runs again.
			return
		}
		addClientError(&resp.Diagnostics, "Read Job Error", err)
		return
	}
	resp.Diagnostics.Append(setJob(&state, job)...)
	if importing {
		resp.Diagnostics.Append(fillSpec(&state, job)...)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// fillSpec fills the configurable attributes from a job (import).
func fillSpec(m *jobResourceModel, job *api.Job) diag.Diagnostics {
	m.Target = targetValue(job.Target)
	strategy := job.Strategy
	if strategy == "" {
		strategy = api.StrategyFailFast
	}
	m.Strategy = types.StringValue(string(strategy))
	m.Timeout = optString(job.Timeout)
	m.CheckMode = types.BoolValue(job.CheckMode)
	tasks, diags := tasksValue(job.Tasks)
	m.Tasks = tasks
	m.Triggers = types.MapNull(types.StringType)
	m.Wait = types.BoolValue(true)
	m.AllowEmpty = types.BoolValue(false)
	m.DestroyTasks = types.ListNull(taskObjectType)
	return diags
}

// Update changes only what needs no new job: wait, allow_empty,
// destroy_tasks and timeouts. Everything else replaces the resource.
func (r *jobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state jobResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.ID, plan.Status, plan.Nodes, plan.Results, plan.CreatedAt = state.ID, state.Status, state.Nodes, state.Results, state.CreatedAt
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *jobResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state jobResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if state.DestroyTasks.IsNull() || len(state.DestroyTasks.Elements()) == 0 {
		return
	}
	if r.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot run destroy_tasks.")
		return
	}
	waitFor, d := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(d...)
	spec, d := specFrom(ctx, &state, state.DestroyTasks)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	if spec.Target.Scope == api.ScopeAny {
		// Undo on the node the job ran on.
		var ids []string
		resp.Diagnostics.Append(state.Nodes.ElementsAs(ctx, &ids, false)...)
		if len(ids) == 1 {
			spec.Target = api.Target{Scope: api.ScopeNode, Value: ids[0]}
		}
	}
	spec.Timeout = ""
	job := r.runJob(ctx, spec, true, waitFor, "Submit Destroy Tasks Error", &resp.Diagnostics)
	if job == nil || resp.Diagnostics.HasError() {
		return
	}
	if !jobSucceeded(job, state.AllowEmpty.ValueBool()) {
		resp.Diagnostics.AddError("Destroy Tasks Failed", failureDetail(job)+
			"\n\nThe resource stays in state. Fix the cause and destroy again, or remove destroy_tasks to only forget the job.")
	}
}

func (r *jobResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if strings.TrimSpace(req.ID) == "" {
		resp.Diagnostics.AddError("Import Job Error", "Import takes a job id: terraform import grid_job.NAME JOB_ID")
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
