package provider

import (
	"context"
	"net/http"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ datasource.DataSource              = &nodeDataSource{}
	_ datasource.DataSourceWithConfigure = &nodeDataSource{}
)

// NewNodeDataSource returns the grid_node data source.
func NewNodeDataSource() datasource.DataSource {
	return &nodeDataSource{}
}

// nodeDataSource reads one node.
type nodeDataSource struct {
	client *api.Client
}

type nodeDataSourceModel struct {
	ID          types.String `tfsdk:"id"`
	Hostname    types.String `tfsdk:"hostname"`
	Groups      types.List   `tfsdk:"groups"`
	Site        types.String `tfsdk:"site"`
	Backends    types.List   `tfsdk:"backends"`
	Status      types.String `tfsdk:"status"`
	LastSeen    types.String `tfsdk:"last_seen"`
	OnlineSince types.String `tfsdk:"online_since"`
	Version     types.String `tfsdk:"version"`
}

func (d *nodeDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node"
}

func (d *nodeDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := nodeSchemaAttributes()
	attrs["id"] = schema.StringAttribute{Required: true, MarkdownDescription: "Node id."}
	attrs["online_since"] = schema.StringAttribute{Computed: true, MarkdownDescription: "When the agent's current session registered (RFC 3339)."}
	attrs["version"] = schema.StringAttribute{Computed: true, MarkdownDescription: "Version of the agent."}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads one node by id. Reading a node the controller does not know is an error.",
		Attributes:          attrs,
	}
}

func (d *nodeDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type", err.Error())
		return
	}
	d.client = c
}

func (d *nodeDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg nodeDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot read the node.")
		return
	}
	n, err := d.client.GetNode(ctx, cfg.ID.ValueString())
	if err != nil {
		if api.IsStatus(err, http.StatusNotFound) {
			resp.Diagnostics.AddError("Node Not Found", notFound("node", cfg.ID.ValueString(),
				"The grid_nodes data source (or `grid node list`) lists the registered nodes."))
			return
		}
		addClientError(&resp.Diagnostics, "Read Node Error", err)
		return
	}
	cfg.Hostname = types.StringValue(n.Hostname)
	cfg.Groups = stringList(n.Groups)
	cfg.Site = types.StringValue(api.SiteOf(n.Site))
	cfg.Backends = stringList(n.Backends)
	cfg.Status = types.StringValue(n.Status)
	cfg.LastSeen = types.StringValue(timeString(n.LastSeen))
	cfg.OnlineSince = types.StringValue(timeString(n.OnlineSince))
	cfg.Version = types.StringValue(n.Version)
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}
