package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var (
	_ datasource.DataSource              = &backendsDataSource{}
	_ datasource.DataSourceWithConfigure = &backendsDataSource{}
)

// NewBackendsDataSource returns the grid_backends data source.
func NewBackendsDataSource() datasource.DataSource {
	return &backendsDataSource{}
}

// backendsDataSource lists the backends, actions and parameter schemas the
// online nodes offer.
type backendsDataSource struct {
	client *api.Client
}

type backendsDataSourceModel struct {
	Names    types.List `tfsdk:"names"`
	Backends types.List `tfsdk:"backends"`
}

var (
	paramAttrTypes = map[string]attr.Type{
		"name":        types.StringType,
		"type":        types.StringType,
		"required":    types.BoolType,
		"default":     types.StringType,
		"pattern":     types.StringType,
		"enum":        types.ListType{ElemType: types.StringType},
		"description": types.StringType,
	}
	actionAttrTypes = map[string]attr.Type{
		"name":        types.StringType,
		"description": types.StringType,
		"read_only":   types.BoolType,
		"idempotent":  types.BoolType,
		"check_mode":  types.BoolType,
		"dangerous":   types.BoolType,
		"params":      types.ListType{ElemType: types.ObjectType{AttrTypes: paramAttrTypes}},
	}
	backendAttrTypes = map[string]attr.Type{
		"name":        types.StringType,
		"description": types.StringType,
		"nodes":       types.Int64Type,
		"actions":     types.ListType{ElemType: types.ObjectType{AttrTypes: actionAttrTypes}},
	}
)

func (d *backendsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backends"
}

func (d *backendsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	boolean := func(desc string) schema.BoolAttribute {
		return schema.BoolAttribute{Computed: true, MarkdownDescription: desc}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists the backends the online nodes offer, with their actions and the schema of each action's parameters: " +
			"what a `grid_job` task may use. Backends are sorted by name.",
		Attributes: map[string]schema.Attribute{
			"names": schema.ListAttribute{
				MarkdownDescription: "Backend names.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"backends": schema.ListNestedAttribute{
				MarkdownDescription: "The backends.",
				Computed:            true,
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":        str("Backend name."),
					"description": str("What the backend does."),
					"nodes":       schema.Int64Attribute{Computed: true, MarkdownDescription: "How many online nodes offer it."},
					"actions": schema.ListNestedAttribute{
						MarkdownDescription: "The backend's actions.",
						Computed:            true,
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name":        str("Action name."),
							"description": str("What the action does."),
							"read_only":   boolean("The action only queries state."),
							"idempotent":  boolean("The action is safe to retry."),
							"check_mode":  boolean("The action supports check mode (dry run)."),
							"dangerous":   boolean("The action is disabled unless an agent's allowlist names it."),
							"params": schema.ListNestedAttribute{
								MarkdownDescription: "The action's parameters.",
								Computed:            true,
								NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
									"name":        str("Parameter name."),
									"type":        str("`string`, `int`, `bool`, `duration` or `list` (comma-separated)."),
									"required":    boolean("The parameter must be set."),
									"default":     str("Value used when the parameter is left out."),
									"pattern":     str("Regular expression the value must match."),
									"enum":        schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Allowed values."},
									"description": str("What the parameter means."),
								}},
							},
						}},
					},
				}},
			},
		},
	}
}

func (d *backendsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type", err.Error())
		return
	}
	d.client = c
}

func (d *backendsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var state backendsDataSourceModel
	if d.client == nil {
		resp.Diagnostics.AddError("Provider Not Configured", "The grid provider was not configured; cannot read backends.")
		return
	}
	cat, err := d.client.Backends(ctx)
	if err != nil {
		addClientError(&resp.Diagnostics, "Read Backends Error", err)
		return
	}
	var names []string
	var elems []attr.Value
	for _, b := range api.MergeSchemas(cat.Backends) {
		names = append(names, b.Name)
		o, diags := backendValue(b, cat.Nodes[b.Name])
		resp.Diagnostics.Append(diags...)
		elems = append(elems, o)
	}
	state.Names = stringList(names)
	l, diags := types.ListValue(types.ObjectType{AttrTypes: backendAttrTypes}, elems)
	resp.Diagnostics.Append(diags...)
	state.Backends = l
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func backendValue(b api.BackendSchema, nodes int) (types.Object, diag.Diagnostics) {
	var diags diag.Diagnostics
	actions := make([]attr.Value, 0, len(b.Actions))
	for _, a := range b.Actions {
		params := make([]attr.Value, 0, len(a.Params))
		for _, p := range a.Params {
			o, d := types.ObjectValue(paramAttrTypes, map[string]attr.Value{
				"name":        types.StringValue(p.Name),
				"type":        types.StringValue(string(p.Type)),
				"required":    types.BoolValue(p.Required),
				"default":     types.StringValue(p.Default),
				"pattern":     types.StringValue(p.Pattern),
				"enum":        stringList(p.Enum),
				"description": types.StringValue(p.Description),
			})
			diags.Append(d...)
			params = append(params, o)
		}
		pl, d := types.ListValue(types.ObjectType{AttrTypes: paramAttrTypes}, params)
		diags.Append(d...)
		o, d := types.ObjectValue(actionAttrTypes, map[string]attr.Value{
			"name":        types.StringValue(a.Name),
			"description": types.StringValue(a.Description),
			"read_only":   types.BoolValue(a.ReadOnly),
			"idempotent":  types.BoolValue(a.Idempotent),
			"check_mode":  types.BoolValue(a.CheckMode),
			"dangerous":   types.BoolValue(a.Dangerous),
			"params":      pl,
		})
		diags.Append(d...)
		actions = append(actions, o)
	}
	al, d := types.ListValue(types.ObjectType{AttrTypes: actionAttrTypes}, actions)
	diags.Append(d...)
	o, d := types.ObjectValue(backendAttrTypes, map[string]attr.Value{
		"name":        types.StringValue(b.Name),
		"description": types.StringValue(b.Description),
		"nodes":       types.Int64Value(int64(nodes)),
		"actions":     al,
	})
	diags.Append(d...)
	return o, diags
}
