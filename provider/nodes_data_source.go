package provider

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ datasource.DataSource              = &nodesDataSource{}
	_ datasource.DataSourceWithConfigure = &nodesDataSource{}
)

// NewNodesDataSource returns the grid_nodes data source.
func NewNodesDataSource() datasource.DataSource {
	return &nodesDataSource{}
}

// nodesDataSource lists the fleet's nodes.
type nodesDataSource struct {
	client *api.Client
}

type nodesDataSourceModel struct {
	Group   types.String `tfsdk:"group"`
	Site    types.String `tfsdk:"site"`
	Status  types.String `tfsdk:"status"`
	Backend types.String `tfsdk:"backend"`
	IDs     types.List   `tfsdk:"ids"`
	Nodes   types.List   `tfsdk:"nodes"`
}

var nodeAttrTypes = map[string]attr.Type{
	"id":        types.StringType,
	"hostname":  types.StringType,
	"groups":    types.ListType{ElemType: types.StringType},
	"site":      types.StringType,
	"backends":  types.ListType{ElemType: types.StringType},
	"status":    types.StringType,
	"last_seen": types.StringType,
}

// nodeSchemaAttributes are the computed attributes of one node.
func nodeSchemaAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id":        schema.StringAttribute{Computed: true, MarkdownDescription: "Node id."},
		"hostname":  schema.StringAttribute{Computed: true, MarkdownDescription: "Host name the agent reported."},
		"groups":    schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Groups the node is in (dotted, hierarchical: `web.dev.us-east`)."},
		"site":      schema.StringAttribute{Computed: true, MarkdownDescription: "The node's site: `default` for the agents connected to the controllers directly, else the site whose relay it enrolled through."},
		"backends":  schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Backends the node's agent has enabled."},
		"status":    schema.StringAttribute{Computed: true, MarkdownDescription: "`online` or `offline`."},
		"last_seen": schema.StringAttribute{Computed: true, MarkdownDescription: "Last heartbeat (RFC 3339)."},
	}
}

func (d *nodesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_nodes"
}

func (d *nodesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists the nodes registered with the controller, optionally filtered by group, site, status and backend. Nodes are sorted by id.",
		Attributes: map[string]schema.Attribute{
			"group": schema.StringAttribute{
				MarkdownDescription: "Only nodes in this group or one of its sub-groups: `web` selects nodes in `web` and `web.dev`, not `webx`.",
				Optional:            true,
			},
			"site": schema.StringAttribute{
				MarkdownDescription: "Only nodes of this site: `default` for the agents connected to the controllers directly, or a site's name (`grid site list`). A site no node is in lists none.",
				Optional:            true,
				Validators:          []validator.String{siteNameValidator()},
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "Only nodes with this status: `online` or `offline`.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.OneOf(api.NodeOnline, api.NodeOffline)},
			},
			"backend": schema.StringAttribute{
				MarkdownDescription: "Only nodes that offer this backend.",
				Optional:            true,
			},
			"ids": schema.ListAttribute{
				MarkdownDescription: "Ids of the matching nodes.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"nodes": schema.ListNestedAttribute{
				MarkdownDescription: "The matching nodes.",
				Computed:            true,
				NestedObject:        schema.NestedAttributeObject{Attributes: nodeSchemaAttributes()},
			},
		},
	}
}

func (d *nodesDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type", err.Error())
		return
	}
	d.client = c
}

func (d *nodesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg nodesDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot list nodes.")
		return
	}
	site := cfg.Site.ValueString()
	nodes, err := d.client.ListSiteNodes(ctx, site)
	if err != nil {
		addClientError(&resp.Diagnostics, "List Nodes Error", err)
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })

	group, status, backend := cfg.Group.ValueString(), cfg.Status.ValueString(), cfg.Backend.ValueString()
	ids := []string{}
	elems := []attr.Value{}
	for _, n := range nodes {
		if group != "" && !slices.ContainsFunc(n.Groups, func(g string) bool { return api.InGroup(g, group) }) {
			continue
		}
		// A controller that predates sites ignores ?site=: the filter holds
		// here too.
		if site != "" && api.SiteOf(n.Site) != site {
			continue
		}
		if status != "" && n.Status != status {
			continue
		}
		if backend != "" && !slices.Contains(n.Backends, backend) {
			continue
		}
		o, diags := types.ObjectValue(nodeAttrTypes, nodeAttrs(n))
		resp.Diagnostics.Append(diags...)
		elems = append(elems, o)
		ids = append(ids, n.ID)
	}
	cfg.Nodes = types.ListValueMust(types.ObjectType{AttrTypes: nodeAttrTypes}, elems)
	cfg.IDs = nodesValue(ids)
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}

// nodeAttrs renders a node's common attributes.
func nodeAttrs(n api.NodeInfo) map[string]attr.Value {
	return map[string]attr.Value{
		"id":        types.StringValue(n.ID),
		"hostname":  types.StringValue(n.Hostname),
		"groups":    stringList(n.Groups),
		"site":      types.StringValue(api.SiteOf(n.Site)),
		"backends":  stringList(n.Backends),
		"status":    types.StringValue(n.Status),
		"last_seen": types.StringValue(timeString(n.LastSeen)),
	}
}

func stringList(s []string) types.List {
	elems := make([]attr.Value, 0, len(s))
	for _, v := range s {
		elems = append(elems, types.StringValue(v))
	}
	return types.ListValueMust(types.StringType, elems)
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// notFound is the detail for a lookup of something the controller does not
// know.
func notFound(kind, id, hint string) string {
	return fmt.Sprintf("The controller has no %s %q. %s", kind, id, hint)
}
