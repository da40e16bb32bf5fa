package provider

import (
	"context"
	"net/http"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ datasource.DataSource              = &jobDataSource{}
	_ datasource.DataSourceWithConfigure = &jobDataSource{}
)

// NewJobDataSource returns the grid_job data source.
func NewJobDataSource() datasource.DataSource {
	return &jobDataSource{}
}

// jobDataSource reads a job by id, e.g. one started by the CLI.
type jobDataSource struct {
	client *api.Client
}

type jobDataSourceModel struct {
	ID        types.String `tfsdk:"id"`
	Target    types.Object `tfsdk:"target"`
	Strategy  types.String `tfsdk:"strategy"`
	CheckMode types.Bool   `tfsdk:"check_mode"`
	Status    types.String `tfsdk:"status"`
	Error     types.String `tfsdk:"error"`
	Nodes     types.List   `tfsdk:"nodes"`
	Results   types.List   `tfsdk:"results"`
	Summary   types.Object `tfsdk:"summary"`
	// UnreachableNodes: as in the resource.
	UnreachableNodes types.List   `tfsdk:"unreachable_nodes"`
	CreatedAt        types.String `tfsdk:"created_at"`
	FinishedAt       types.String `tfsdk:"finished_at"`
}

func (d *jobDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

func (d *jobDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a job by id: its status, the nodes it reached and per-node results of each step. " +
			"Useful for jobs started outside this configuration (`grid job run`).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Required: true, MarkdownDescription: "Job id."},
			"target": schema.SingleNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The job's target.",
				Attributes: map[string]schema.Attribute{
					"scope": schema.StringAttribute{Computed: true, MarkdownDescription: "`all`, `group`, `node`, `any` or `site`."},
					"value": schema.StringAttribute{Computed: true, MarkdownDescription: "Group, node id or site name."},
					"site":  schema.StringAttribute{Computed: true, MarkdownDescription: "The site a `group`, `node` or `any` target is narrowed to; null when it is not."},
				},
			},
			"strategy":    schema.StringAttribute{Computed: true, MarkdownDescription: "`fail-fast` or `continue`."},
			"check_mode":  schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the job was a dry run."},
			"status":      schema.StringAttribute{Computed: true, MarkdownDescription: "`pending`, `running`, `completed`, `failed`, `partial_failure` or `cancelled`."},
			"error":       schema.StringAttribute{Computed: true, MarkdownDescription: "Why the job as a whole failed or was cancelled."},
			"nodes":       schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Ids of the nodes the target resolved to, sorted."},
			"created_at":  schema.StringAttribute{Computed: true, MarkdownDescription: "When the controller accepted the job (RFC 3339)."},
			"finished_at": schema.StringAttribute{Computed: true, MarkdownDescription: "When the job ended (RFC 3339); empty while it runs."},
			"results":     dataSourceResultsAttribute(),
			"summary":     dataSourceSummaryAttribute(),
			"unreachable_nodes": schema.ListAttribute{
				Computed: true, ElementType: types.StringType, MarkdownDescription: unreachableNodesDescription,
			},
		},
	}
}

func (d *jobDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type", err.Error())
		return
	}
	d.client = c
}

func (d *jobDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg jobDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot read the job.")
		return
	}
	job, err := d.client.GetJob(ctx, cfg.ID.ValueString())
	if err != nil {
		if api.IsStatus(err, http.StatusNotFound) {
			resp.Diagnostics.AddError("Job Not Found", notFound("job", cfg.ID.ValueString(),
				"Jobs expire after the controller's retention time; `grid job list` shows the ones it keeps."))
			return
		}
		addClientError(&resp.Diagnostics, "Read Job Error", err)
		return
	}
	cfg.Target = targetValue(job.Target)
	strategy := job.Strategy
	if strategy == "" {
		strategy = api.StrategyFailFast
	}
	cfg.Strategy = types.StringValue(string(strategy))
	cfg.CheckMode = types.BoolValue(job.CheckMode)
	cfg.Status = types.StringValue(string(job.Status))
	cfg.Error = types.StringValue(job.Error)
	cfg.Nodes = nodesValue(job.Expected)
	results, diags := resultsValue(job, resultsFull)
	resp.Diagnostics.Append(diags...)
	cfg.Results = results
	cfg.Summary = summaryValue(job)
	cfg.UnreachableNodes = nodesValue(unreachableNodes(job))
	cfg.CreatedAt = types.StringValue(job.CreatedAt.UTC().Format(time.RFC3339))
	cfg.FinishedAt = types.StringValue("")
	if job.FinishedAt != nil {
		cfg.FinishedAt = types.StringValue(job.FinishedAt.UTC().Format(time.RFC3339))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}
