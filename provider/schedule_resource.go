package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ resource.Resource                = &scheduleResource{}
	_ resource.ResourceWithConfigure   = &scheduleResource{}
	_ resource.ResourceWithImportState = &scheduleResource{}
)

// NewScheduleResource returns the grid_schedule resource.
func NewScheduleResource() resource.Resource {
	return &scheduleResource{}
}

// scheduleResource is grid_schedule: a cron schedule on the controllers
// that submits a job at every tick.
type scheduleResource struct {
	client *api.Client
}

// scheduleResourceModel maps grid_schedule.
type scheduleResourceModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Cron      types.String `tfsdk:"cron"`
	TimeZone  types.String `tfsdk:"time_zone"`
	Job       types.String `tfsdk:"job"`
	Paused    types.Bool   `tfsdk:"paused"`
	CatchUp   types.String `tfsdk:"catch_up"`
	Overlap   types.String `tfsdk:"overlap"`
	NextRun   types.String `tfsdk:"next_run"`
	LastRun   types.String `tfsdk:"last_run"`
	LastJobID types.String `tfsdk:"last_job_id"`
	CreatedBy types.String `tfsdk:"created_by"`
}

func (r *scheduleResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_schedule"
}

func (r *scheduleResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "A cron schedule on the GRID controllers: at every tick it submits the job, an ordinary " +
			"job that names the schedule in schedule_id, once per tick across all controllers of a cluster. " +
			"Changing the cron expression, time zone, paused, catch_up, overlap or the job updates the " +
			"schedule in place; changing the name replaces it. Destroying it stops the schedule; its jobs stay.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The schedule's id: its name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The schedule's name: 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit. Changing it replaces the schedule.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`),
					"must be 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit")},
			},
			"cron": schema.StringAttribute{
				Required: true,
				Description: "When to fire: five fields (minute hour day-of-month month day-of-week, e.g. `0 3 * * *`), " +
					"six with a leading seconds field, or a descriptor (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, `@every 90s`).",
				Validators: []validator.String{cronValidator()},
			},
			"time_zone": schema.StringAttribute{
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString("UTC"),
				Description: "The IANA time zone the cron fields are read in, such as `Europe/Berlin`. Default `UTC`.",
				Validators:  []validator.String{timeZoneValidator()},
			},
			"job": schema.StringAttribute{
				Required: true,
				Description: "The job each tick submits, as `grid job run -f` and POST /job take it: JSON (write it with " +
					"`jsonencode`) or YAML (`file(\"job.yaml\")`). Sensitive params cannot be part of a schedule.",
				Validators: []validator.String{jobSpecValidator()},
			},
			"paused": schema.BoolAttribute{
				Optional:    true,
				Computed:    true,
				Default:     booldefault.StaticBool(false),
				Description: "A paused schedule fires nothing; unpaused, it fires from its next tick (the ticks in between are not caught up).",
			},
			"catch_up": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(string(api.CatchUpSkip)),
				Description: "Ticks no controller fired within its `schedule_grace` (every controller was down): " +
					"`skip` (default) fires none of them, `run_once` fires one job for them all.",
				Validators: []validator.String{stringvalidator.OneOf(string(api.CatchUpSkip), string(api.CatchUpRunOnce))},
			},
			"overlap": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(string(api.OverlapSkip)),
				Description: "A tick while the previous tick's job has not finished: `skip` (default) fires nothing " +
					"and records why, `allow` fires anyway.",
				Validators: []validator.String{stringvalidator.OneOf(string(api.OverlapSkip), string(api.OverlapAllow))},
			},
			"next_run":    computed("The next tick (RFC 3339, UTC) as of the last refresh; empty while paused."),
			"last_run":    computed("The last tick that fired (RFC 3339, UTC) as of the last refresh."),
			"last_job_id": computed("The job the last tick submitted, as of the last refresh."),
			"created_by": schema.StringAttribute{
				Computed: true,
				Description: "The API token that created the schedule; its jobs are submitted with that token's name " +
					"and role, and stop being submitted if it is revoked.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *scheduleResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Resource Configure Type", err.Error())
		return
	}
	r.client = c
}

// scheduleSpec builds the schedule to send from a plan.
func scheduleSpec(m *scheduleResourceModel) (*api.ScheduleSpec, error) {
	job, err := api.ParseJobSpec([]byte(m.Job.ValueString()))
	if err != nil {
		return nil, err
	}
	return &api.ScheduleSpec{Name: m.Name.ValueString(), Cron: m.Cron.ValueString(), TimeZone: m.TimeZone.ValueString(),
		Job: *job, Paused: m.Paused.ValueBool(), CatchUp: api.CatchUp(m.CatchUp.ValueString()),
		Overlap: api.Overlap(m.Overlap.ValueString())}, nil
}

// canonicalJob is a job spec as compact JSON with sorted keys, the form
// Terraform's jsonencode writes: two specs that mean the same compare
// equal in it.
func canonicalJob(spec *api.JobSpec) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

func optTimeString(t *time.Time) types.String {
	if t == nil {
		return types.StringValue("")
	}
	return types.StringValue(t.UTC().Format(time.RFC3339))
}

// setSchedule copies the controller's schedule into the model. The job
// keeps the configured text while it means what the controller holds.
func setSchedule(m *scheduleResourceModel, s *api.Schedule) error {
	m.ID, m.Name, m.Cron = types.StringValue(s.ID), types.StringValue(s.Name), types.StringValue(s.Cron)
	m.TimeZone, m.Paused = types.StringValue(s.TimeZone), types.BoolValue(s.Paused)
	m.CatchUp, m.Overlap = types.StringValue(string(s.CatchUp)), types.StringValue(string(s.Overlap))
	m.NextRun, m.LastRun = optTimeString(s.NextRun), optTimeString(s.LastRun)
	m.LastJobID, m.CreatedBy = types.StringValue(s.LastJobID), types.StringValue(s.CreatedBy)
	remote, err := canonicalJob(&s.Job)
	if err != nil {
		return err
	}
	if !m.Job.IsNull() && !m.Job.IsUnknown() {
		if mine, err := api.ParseJobSpec([]byte(m.Job.ValueString())); err == nil {
			if local, err := canonicalJob(mine); err == nil && local == remote {
				return nil
			}
		}
	}
	m.Job = types.StringValue(remote)
	return nil
}

func (r *scheduleResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan scheduleResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, err := scheduleSpec(&plan)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("job"), "Invalid Job", err.Error())
		return
	}
	s, err := r.client.CreateSchedule(ctx, spec)
	if err != nil {
		addClientError(&resp.Diagnostics, "Create Schedule Error", err)
		return
	}
	if err := setSchedule(&plan, s); err != nil {
		resp.Diagnostics.AddError("Read Schedule Error", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *scheduleResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state scheduleResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || r.client == nil {
		return
	}
	s, err := r.client.GetSchedule(ctx, state.ID.ValueString())
	if api.IsStatus(err, http.StatusNotFound) {
		// Deleted outside Terraform: plan creates it again.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addClientError(&resp.Diagnostics, "Read Schedule Error", err)
		return
	}
	if err := setSchedule(&state, s); err != nil {
		resp.Diagnostics.AddError("Read Schedule Error", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Update changes the schedule in place (PUT): its cron, time zone, paused,
// catch_up, overlap and job.
func (r *scheduleResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state scheduleResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, err := scheduleSpec(&plan)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("job"), "Invalid Job", err.Error())
		return
	}
	s, err := r.client.UpdateSchedule(ctx, state.ID.ValueString(), spec)
	if err != nil {
		addClientError(&resp.Diagnostics, "Update Schedule Error", err)
		return
	}
	if err := setSchedule(&plan, s); err != nil {
		resp.Diagnostics.AddError("Read Schedule Error", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *scheduleResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state scheduleResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := r.client.DeleteSchedule(ctx, state.ID.ValueString())
	if err != nil && !api.IsStatus(err, http.StatusNotFound) {
		addClientError(&resp.Diagnostics, "Delete Schedule Error", err)
	}
}

func (r *scheduleResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if strings.TrimSpace(req.ID) == "" {
		resp.Diagnostics.AddError("Import Schedule Error", "Import takes a schedule's name: terraform import grid_schedule.NAME SCHEDULE_NAME")
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
