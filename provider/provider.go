// Package provider is the GRID Terraform provider: the grid_job resource and
// the grid_nodes, grid_node, grid_backends and grid_job data sources, all
// talking to a controller through api.Client.
package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

var _ provider.Provider = &gridProvider{}

// gridProvider is the provider implementation.
type gridProvider struct {
	version string
}

// gridProviderModel maps the provider block.
type gridProviderModel struct {
	Address            types.String `tfsdk:"address"`
	Token              types.String `tfsdk:"token"`
	CAFile             types.String `tfsdk:"ca_file"`
	CAPEM              types.String `tfsdk:"ca_pem"`
	InsecureSkipVerify types.Bool   `tfsdk:"insecure_skip_verify"`
	ClientCertFile     types.String `tfsdk:"client_cert_file"`
	ClientKeyFile      types.String `tfsdk:"client_key_file"`
	Timeout            types.String `tfsdk:"timeout"`
}

// providerData is what Configure hands to resources and data sources.
type providerData struct {
	client *api.Client
}

// New returns a constructor of the provider for providerserver.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &gridProvider{version: version}
	}
}

func (p *gridProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "grid"
	resp.Version = p.version
}

func (p *gridProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The GRID provider runs jobs on a fleet of GRID agents through a GRID controller, " +
			"and reads the fleet's nodes and the backend actions they offer. Plans are validated against the " +
			"action schemas that live agents registered, so a `terraform plan` needs a reachable controller.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{
				MarkdownDescription: "Base URL of the GRID controller's HTTP API. Defaults to the `GRID_ADDR` " +
					"environment variable, then `" + api.DefaultAddress + "`. A bare `host:port` means `https://host:port`. " +
					"The controller serves HTTPS unless started with `insecure: true` (then use `http://`). " +
					"Several controllers of a cluster, comma-separated, are tried in turn: a request that cannot reach one " +
					"goes to the next (a job submission only when its connection was refused, so it is never sent twice).",
				Optional: true,
			},
			"ca_file": schema.StringAttribute{
				MarkdownDescription: "Path of a PEM file of CA certificates the controller's HTTPS certificate must chain to: " +
					"the controller's `DATA_DIR/ca.pem`, unless it serves a certificate of your own CA (`api_tls_cert`). " +
					"Defaults to the `GRID_CACERT` environment variable; with neither `ca_file` nor `ca_pem`, the system's roots.",
				Optional: true,
			},
			"ca_pem": schema.StringAttribute{
				MarkdownDescription: "PEM text of CA certificates to trust, as `ca_file` but inline (e.g. from a data source); " +
					"trusted in addition to `ca_file`.",
				Optional: true,
			},
			"client_cert_file": schema.StringAttribute{
				MarkdownDescription: "Path of a client certificate (PEM) for a controller that requires one (`api_client_ca`). " +
					"Defaults to the `GRID_CLIENT_CERT` environment variable.",
				Optional: true,
			},
			"client_key_file": schema.StringAttribute{
				MarkdownDescription: "Path of the key of `client_cert_file` (PEM). Defaults to the `GRID_CLIENT_KEY` environment variable.",
				Optional:            true,
			},
			"insecure_skip_verify": schema.BoolAttribute{
				MarkdownDescription: "Accept any certificate from the controller. For labs only: anyone on the path can then " +
					"impersonate the controller and read the token. Defaults to `false`.",
				Optional: true,
			},
			"token": schema.StringAttribute{
				MarkdownDescription: "Bearer token sent to the controller. Defaults to the `GRID_TOKEN` environment variable. " +
					"Data sources need a token with role `read`; `grid_job` one with role `operator` (`admin` for actions marked " +
					"dangerous, unless in check mode). The controller's first admin token is in its data dir, file `admin-token`; " +
					"`grid token create` makes more.",
				Optional:  true,
				Sensitive: true,
			},
			"timeout": schema.StringAttribute{
				MarkdownDescription: "Timeout of each request to the controller, as a duration (`30s`, `2m`). " +
					"Waiting for a job is not bounded by it; see the `timeouts` block of `grid_job`. Defaults to `30s`.",
				Optional:   true,
				Validators: []validator.String{durationValidator()},
			},
		},
	}
}

func (p *gridProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg gridProviderModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	if cfg.InsecureSkipVerify.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("insecure_skip_verify"), "Unknown GRID Provider Setting",
			"The provider's \"insecure_skip_verify\" is not known until apply. Set it to a value known at plan time.")
	}
	for name, v := range map[string]types.String{"address": cfg.Address, "token": cfg.Token, "timeout": cfg.Timeout,
		"ca_file": cfg.CAFile, "ca_pem": cfg.CAPEM, "client_cert_file": cfg.ClientCertFile, "client_key_file": cfg.ClientKeyFile} {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown GRID Provider Setting",
				fmt.Sprintf("The provider's %q is not known until apply. Set it to a value known at plan time "+
					"(a literal, a variable or an environment variable such as GRID_ADDR/GRID_TOKEN): "+
					"the provider validates plans against the controller.", name))
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}

	cc := api.DefaultClientConfig()
	if v := cfg.Address.ValueString(); v != "" {
		cc.Address = v
	}
	if v := cfg.Token.ValueString(); v != "" {
		cc.Token = v
	}
	if v := cfg.CAFile.ValueString(); v != "" {
		cc.CAFile = v
	}
	cc.CAPEM = cfg.CAPEM.ValueString()
	if v := cfg.ClientCertFile.ValueString(); v != "" {
		cc.CertFile = v
	}
	if v := cfg.ClientKeyFile.ValueString(); v != "" {
		cc.KeyFile = v
	}
	cc.InsecureSkipVerify = cfg.InsecureSkipVerify.ValueBool()
	if v := cfg.Timeout.ValueString(); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			resp.Diagnostics.AddAttributeError(path.Root("timeout"), "Invalid Request Timeout",
				fmt.Sprintf("%q is not a positive duration; use a value such as 30s or 2m.", v))
			return
		}
		cc.Timeout = d
	}
	if err := cc.Validate(); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("address"), "Invalid Controller Address",
			err.Error()+". Set the provider's address or GRID_ADDR to the controller's URL.")
		return
	}
	client, err := api.NewClient(cc)
	if err != nil {
		resp.Diagnostics.AddError("Invalid Controller TLS Settings",
			err.Error()+". Set ca_file (or GRID_CACERT) to the controller's DATA_DIR/ca.pem, or ca_pem to its contents; "+
				"client_cert_file and client_key_file (or GRID_CLIENT_CERT and GRID_CLIENT_KEY) go together.")
		return
	}
	data := &providerData{client: client}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *gridProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		NewJobResource,
		NewScheduleResource,
	}
}

func (p *gridProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewNodesDataSource,
		NewNodeDataSource,
		NewBackendsDataSource,
		NewJobDataSource,
		NewFactsDataSource,
	}
}

// clientFrom extracts the client from provider data handed to Configure of a
// resource or data source. It returns nil (no error) before the provider is
// configured.
func clientFrom(data any) (*api.Client, error) {
	if data == nil {
		return nil, nil
	}
	pd, ok := data.(*providerData)
	if !ok {
		return nil, fmt.Errorf("expected *providerData, got %T; please report this issue to the provider developers", data)
	}
	return pd.client, nil
}
