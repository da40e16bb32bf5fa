package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ datasource.DataSource              = &factsDataSource{}
	_ datasource.DataSourceWithConfigure = &factsDataSource{}
)

// defaultFactsTimeout bounds a grid_facts read when its config names none.
const defaultFactsTimeout = time.Minute

// NewFactsDataSource returns the grid_facts data source.
func NewFactsDataSource() datasource.DataSource {
	return &factsDataSource{}
}

// factsDataSource runs one read-only action on a target at plan and refresh
// time and exposes each node's facts, so that a configuration can be
// written from what the nodes report (their OS release, a certificate's
// expiry).
type factsDataSource struct {
	client *api.Client
}

type factsDataSourceModel struct {
	Target  types.Object `tfsdk:"target"`
	Backend types.String `tfsdk:"backend"`
	Action  types.String `tfsdk:"action"`
	Params  types.Map    `tfsdk:"params"`
	Timeout types.String `tfsdk:"timeout"`
	JobID   types.String `tfsdk:"job_id"`
	Nodes   types.Map    `tfsdk:"nodes"`
}

var factsNodeAttrTypes = map[string]attr.Type{
	"status":     types.StringType,
	"output":     types.StringType,
	"error":      types.StringType,
	"facts_json": types.StringType,
}

func (d *factsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_facts"
}

func (d *factsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Runs one read-only action (one that changes nothing, such as `sysinfo.os`, `cert.expiry` or " +
			"`health.http`) on a target when Terraform reads data sources — at plan and refresh — and exposes each " +
			"node's result and facts. Actions that can change a node are refused before anything runs; the job is " +
			"also submitted in check mode. A node whose action fails (an expiring certificate, say) is reported with " +
			"its error and facts; it does not fail the read.",
		Attributes: map[string]schema.Attribute{
			"target": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "Which nodes to read from.",
				Attributes: map[string]schema.Attribute{
					"scope": schema.StringAttribute{
						Required:            true,
						MarkdownDescription: targetScopeDescription,
						Validators:          []validator.String{stringvalidator.OneOf(targetScopes...)},
					},
					"value": schema.StringAttribute{Optional: true, MarkdownDescription: targetValueDescription},
					"site":  schema.StringAttribute{Optional: true, MarkdownDescription: targetSiteDescription},
				},
			},
			"backend": schema.StringAttribute{Required: true, MarkdownDescription: "Backend of the action, e.g. `sysinfo`."},
			"action":  schema.StringAttribute{Required: true, MarkdownDescription: "A read-only action of the backend, e.g. `os`."},
			"params": schema.MapAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "The action's parameters, as strings."},
			"timeout": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Bound on the read (a Go duration, default `1m`); the job is cancelled when it passes."},
			"job_id": schema.StringAttribute{Computed: true, MarkdownDescription: "Id of the job that read the facts."},
			"nodes": schema.MapNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Each targeted node's result, by node id. Decode `facts_json` with `jsondecode()`.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"status":     schema.StringAttribute{Computed: true, MarkdownDescription: "`success`, `failed`, `unreachable`, …"},
					"output":     schema.StringAttribute{Computed: true, MarkdownDescription: "What the action reported."},
					"error":      schema.StringAttribute{Computed: true, MarkdownDescription: "Why it failed."},
					"facts_json": schema.StringAttribute{Computed: true, MarkdownDescription: "The action's facts as a JSON object (`{}` when it returned none)."},
				}},
			},
		},
	}
}

func (d *factsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type", err.Error())
		return
	}
	d.client = c
}

func (d *factsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg factsDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot read facts.")
		return
	}
	target, ok, diags := readTarget(ctx, cfg.Target)
	resp.Diagnostics.Append(diags...)
	if !ok || resp.Diagnostics.HasError() {
		resp.Diagnostics.AddError("Invalid Target", "target must be known when the data source is read.")
		return
	}
	timeout := defaultFactsTimeout
	if s := cfg.Timeout.ValueString(); s != "" {
		t, err := time.ParseDuration(s)
		if err != nil || t <= 0 {
			resp.Diagnostics.AddAttributeError(path.Root("timeout"), "Invalid Timeout", fmt.Sprintf("timeout %q: want a positive Go duration such as 30s or 2m.", s))
			return
		}
		timeout = t
	}
	params := api.Params{}
	if !cfg.Params.IsNull() {
		resp.Diagnostics.Append(cfg.Params.ElementsAs(ctx, &params, false)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	backend, action := cfg.Backend.ValueString(), cfg.Action.ValueString()

	// Only an action that changes nothing runs at plan time: the nodes'
	// schemas say which those are.
	cat, err := d.client.Backends(ctx)
	if err != nil {
		addClientError(&resp.Diagnostics, "Read Facts Error", err)
		return
	}
	if err := readOnlyAction(cat, backend, action); err != nil {
		resp.Diagnostics.AddError("Action Not Allowed In grid_facts", err.Error())
		return
	}

	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	job, err := d.client.SubmitJob(rctx, &api.JobSpec{
		Target:    target,
		Tasks:     []api.Phase{{Backend: backend, Action: action, Params: params}},
		Strategy:  api.StrategyContinue,
		Timeout:   timeout.String(),
		CheckMode: true,
	})
	if err != nil {
		addClientError(&resp.Diagnostics, "Read Facts Error", err)
		return
	}
	done, err := d.client.WaitJob(rctx, job.ID)
	if err != nil {
		// The read is over; so is its job.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = d.client.CancelJob(cctx, job.ID)
		ccancel()
		if errors.Is(err, context.DeadlineExceeded) {
			resp.Diagnostics.AddError("Read Facts Timeout", fmt.Sprintf("Job %s did not finish within %s; it was cancelled.", job.ID, timeout))
			return
		}
		addClientError(&resp.Diagnostics, "Read Facts Error", err)
		return
	}
	nodes := map[string]attr.Value{}
	for _, id := range done.Expected {
		r := done.Results.Node(0, id)
		if r == nil {
			r = &api.NodeResult{Status: api.StepNotStarted}
		}
		facts := r.Facts
		if facts == nil {
			facts = map[string]any{}
		}
		fj, err := json.Marshal(facts)
		if err != nil {
			resp.Diagnostics.AddError("Read Facts Error", fmt.Sprintf("node %s: facts do not encode as JSON: %v", id, err))
			return
		}
		nodes[id] = types.ObjectValueMust(factsNodeAttrTypes, map[string]attr.Value{
			"status": types.StringValue(r.Status), "output": types.StringValue(r.Output),
			"error": types.StringValue(r.Error), "facts_json": types.StringValue(string(fj)),
		})
	}
	m, diags := types.MapValue(types.ObjectType{AttrTypes: factsNodeAttrTypes}, nodes)
	resp.Diagnostics.Append(diags...)
	cfg.Nodes = m
	cfg.JobID = types.StringValue(done.ID)
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}

// readOnlyAction says why backend.action may not run in grid_facts: no
// online node offers it, or it can change a node.
func readOnlyAction(cat *api.Catalog, backend, action string) error {
	for _, b := range api.MergeSchemas(cat.Backends) {
		if b.Name != backend {
			continue
		}
		a, ok := b.Action(action)
		if !ok {
			return fmt.Errorf("no online node offers %s.%s (the backend's actions: %v)", backend, action, b.ActionNames())
		}
		if !a.ReadOnly {
			return fmt.Errorf("%s.%s can change a node; grid_facts runs only read-only actions (use grid_job to run it)", backend, action)
		}
		return nil
	}
	return fmt.Errorf("no online node offers the %s backend", backend)
}
