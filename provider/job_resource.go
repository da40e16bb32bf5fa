package provider

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

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
	ID        types.String `tfsdk:"id"`
	Target    types.Object `tfsdk:"target"`
	Strategy  types.String `tfsdk:"strategy"`
	Timeout   types.String `tfsdk:"timeout"`
	CheckMode types.Bool   `tfsdk:"check_mode"`
	// MaxConcurrency and MaxErrors are the job's rollout limits.
	MaxConcurrency types.String `tfsdk:"max_concurrency"`
	MaxErrors      types.String `tfsdk:"max_errors"`
	Tasks          types.List   `tfsdk:"tasks"`
	// Converge and ConvergedNodes: see provider/job_converge.go.
	Converge       types.Bool `tfsdk:"converge"`
	ConvergedNodes types.List `tfsdk:"converged_nodes"`
	// Preview, PreviewNodes and PreviewSummary: see provider/job_preview.go.
	Preview        types.Bool   `tfsdk:"preview"`
	PreviewNodes   types.Map    `tfsdk:"preview_nodes"`
	PreviewSummary types.String `tfsdk:"preview_summary"`
	Triggers       types.Map    `tfsdk:"triggers"`
	Wait           types.Bool   `tfsdk:"wait"`
	AllowEmpty     types.Bool   `tfsdk:"allow_empty"`
	DestroyTasks   types.List   `tfsdk:"destroy_tasks"`
	Status         types.String `tfsdk:"status"`
	Nodes          types.List   `tfsdk:"nodes"`
	// ResultsDetail, Results, Summary and UnreachableNodes: what state
	// records of the job's outcome (job_model.go).
	ResultsDetail    types.String `tfsdk:"results_detail"`
	Results          types.List   `tfsdk:"results"`
	Summary          types.Object `tfsdk:"summary"`
	UnreachableNodes types.List   `tfsdk:"unreachable_nodes"`
	// Drift, DriftedNodes and DriftUnreachableNodes: see
	// provider/job_drift.go.
	Drift                 types.String   `tfsdk:"drift"`
	DriftedNodes          types.Map      `tfsdk:"drifted_nodes"`
	DriftUnreachableNodes types.List     `tfsdk:"drift_unreachable_nodes"`
	CreatedAt             types.String   `tfsdk:"created_at"`
	Timeouts              timeouts.Value `tfsdk:"timeouts"`
}

func (r *jobResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

func (r *jobResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Resource Configure Type", err.Error())
		return
	}
	r.client = c
}

// specFrom builds the job to submit from a plan or state.
func specFrom(ctx context.Context, m *jobResourceModel, tasks types.List) (*api.JobSpec, diag.Diagnostics) {
	var diags diag.Diagnostics
	target, _, d := readTarget(ctx, m.Target)
	diags.Append(d...)
	tree, d := readTasks(ctx, tasks, path.Root("tasks"), "tasks")
	diags.Append(d...)
	return &api.JobSpec{
		Target:         target,
		Tasks:          tree.Phases,
		Strategy:       api.Strategy(m.Strategy.ValueString()),
		Timeout:        m.Timeout.ValueString(),
		CheckMode:      m.CheckMode.ValueBool(),
		MaxConcurrency: limitFrom(m.MaxConcurrency),
		MaxErrors:      limitFrom(m.MaxErrors),
	}, diags
}

// setJob copies what the controller reports about a job into the model,
// its results in the model's results_detail.
func setJob(m *jobResourceModel, job *api.Job) diag.Diagnostics {
	m.ID = types.StringValue(job.ID)
	m.Status = types.StringValue(string(job.Status))
	m.CreatedAt = types.StringValue(job.CreatedAt.UTC().Format(time.RFC3339))
	if m.ResultsDetail.IsNull() || m.ResultsDetail.IsUnknown() {
		m.ResultsDetail = types.StringValue(resultsFull)
	}
	results, diags := resultsValue(job, m.ResultsDetail.ValueString())
	m.Results = results
	m.Summary = summaryValue(job)
	m.UnreachableNodes = nodesValue(unreachableNodes(job))
	if len(job.Expected) > 0 || job.Status.Terminal() || m.Nodes.IsUnknown() || m.Nodes.IsNull() {
		m.Nodes = nodesValue(job.Expected)
	}
	return diags
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
	if plan.PreviewNodes.IsUnknown() {
		plan.PreviewNodes = types.MapNull(previewNodesType.ElemType)
	}
	if plan.PreviewSummary.IsUnknown() {
		plan.PreviewSummary = types.StringNull()
	}
	plan.DriftedNodes, plan.DriftUnreachableNodes = noDrift()
	wait := plan.Wait.ValueBool()
	job := r.runJob(ctx, spec, wait, plan.AllowEmpty.ValueBool(), waitFor, "Submit Job Error", &resp.Diagnostics)
	if job == nil {
		return
	}
	resp.Diagnostics.Append(setJob(&plan, job)...)
	plan.ConvergedNodes = nodesValue(succeededNodes(job))
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
	fillAdded(&state)
	resp.Diagnostics.Append(setJob(&state, job)...)
	if importing {
		resp.Diagnostics.Append(fillSpec(&state, job)...)
	}
	if !importing && state.Drift.ValueString() == driftDetect {
		r.detectDrift(ctx, &state, job, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// fillAdded gives the attributes added since a state was written (null in
// it) the values an unchanged configuration plans, so that upgrading the
// provider plans no change.
func fillAdded(m *jobResourceModel) {
	if m.ResultsDetail.IsNull() {
		m.ResultsDetail = types.StringValue(resultsFull)
	}
	if m.Drift.IsNull() {
		m.Drift = types.StringValue(driftIgnore)
	}
	if m.DriftedNodes.IsNull() || m.DriftUnreachableNodes.IsNull() {
		m.DriftedNodes, m.DriftUnreachableNodes = noDrift()
	}
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
	m.MaxConcurrency = limitValue(job.MaxConcurrency)
	m.MaxErrors = limitValue(job.MaxErrors)
	m.Converge = types.BoolValue(false)
	m.Preview = types.BoolValue(false)
	m.PreviewNodes = types.MapNull(previewNodesType.ElemType)
	m.PreviewSummary = types.StringNull()
	m.ConvergedNodes = nodesValue(succeededNodes(job))
	tasks, diags := tasksValue(job.Tasks)
	m.Tasks = tasks
	m.Triggers = types.MapNull(types.StringType)
	m.Wait = types.BoolValue(true)
	m.AllowEmpty = types.BoolValue(false)
	m.DestroyTasks = types.ListNull(taskObjectType)
	m.Drift = types.StringValue(driftIgnore)
	m.DriftedNodes, m.DriftUnreachableNodes = noDrift()
	return diags
}

// Update runs no new job of the configuration: it changes what needs none
// (wait, allow_empty, destroy_tasks, timeouts, results_detail, drift),
// runs the tasks on nodes new to a converging target, and on the nodes
// that drifted. Everything else replaces the resource.
func (r *jobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state jobResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.ID, plan.Status, plan.Nodes, plan.Results, plan.CreatedAt = state.ID, state.Status, state.Nodes, state.Results, state.CreatedAt
	plan.Summary, plan.UnreachableNodes = state.Summary, state.UnreachableNodes
	if !plan.ResultsDetail.Equal(state.ResultsDetail) && r.client != nil {
		// Results are kept in the other detail from now on: read them again.
		job, err := r.client.GetJob(ctx, state.ID.ValueString())
		switch {
		case err == nil:
			resp.Diagnostics.Append(setJob(&plan, job)...)
		case !api.IsStatus(err, http.StatusNotFound):
			addClientError(&resp.Diagnostics, "Read Job Error", err)
			return
		}
	}
	r.converge(ctx, &plan, &state, &resp.Diagnostics)
	r.fixDrift(ctx, &plan, &state, &resp.Diagnostics)
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
	job := r.runJob(ctx, spec, true, state.AllowEmpty.ValueBool(), waitFor, "Submit Destroy Tasks Error", &resp.Diagnostics)
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
