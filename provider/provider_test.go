package provider

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// testAccProtoV6ProviderFactories serves the provider in-process to the
// terraform binary the acceptance tests run.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"grid": providerserver.NewProtocol6WithError(New("test")()),
}

// testAccFleet starts an in-process fleet (controller and agents, node-1 …
// node-N; even-numbered agents from 0 in web.prod, the others in db.prod)
// for an acceptance test, and skips the test without TF_ACC. The
// controller wants a token: GRID_TOKEN holds its admin token, so configs
// without a token attribute exercise the provider's fallback to it.
func testAccFleet(t *testing.T, agents int) *fleet.Fleet {
	t.Helper()
	testAccPreCheck(t)
	f := fleettest.Start(t, fleet.Options{Agents: agents})
	t.Setenv("GRID_TOKEN", f.AdminToken())
	// jobConfig names no CA: the provider falls back to GRID_CACERT.
	t.Setenv("GRID_CACERT", f.CAFile())
	return f
}

func testAccPreCheck(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 to run it against terraform and an in-process fleet")
	}
	// A developer's dev_overrides would point terraform at an installed
	// binary instead of the provider under test.
	t.Setenv("TF_CLI_CONFIG_FILE", "")
	t.Setenv("GRID_ADDR", "")
	t.Setenv("GRID_TOKEN", "")
	t.Setenv("GRID_CACERT", "")
}

// providerConfig is the provider block for a fleet, with its admin token.
func providerConfig(f *fleet.Fleet) string {
	return providerConfigToken(f, f.AdminToken())
}

func providerConfigToken(f *fleet.Fleet, tok string) string {
	return fmt.Sprintf("provider \"grid\" {\n  address = %q\n  token   = %q\n  ca_file = %q\n}\n", f.APIURL(), tok, f.CAFile())
}

// The provider trusts the controller's CA (ca_file, ca_pem; without either
// it refuses the certificate and says to set ca_file) and sends its
// token: without one the controller refuses with a
// diagnostic saying so, a read token can read but not run a job, and an
// operator token can run one.
func TestAccProviderToken(t *testing.T) {
	testAccPreCheck(t) // GRID_TOKEN is empty
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	readTok, err := f.Client().CreateToken(ctx, "tf-read", api.RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	opTok, err := f.Client().CreateToken(ctx, "tf-apply", api.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	const nodes = `
data "grid_nodes" "all" {}
`
	const job = `
resource "grid_job" "echo" {
  target = { scope = "all" }
  tasks = [{ backend = "ping", action = "echo", params = { message = "hi" } }]
}
`
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// No CA: the controller's HTTPS certificate is not
				// trusted, and the diagnostic says which file to trust.
				Config:      fmt.Sprintf("provider \"grid\" {\n  address = %q\n  token   = %q\n}\n", f.APIURL(), opTok.Token) + nodes,
				ExpectError: regexp.MustCompile(`(?s)Cannot verify the GRID controller's HTTPS certificate.*ca_file\s+\(or\s+GRID_CACERT\).*DATA_DIR/ca\.pem`),
			},
			{
				Config:      fmt.Sprintf("provider \"grid\" {\n  address = %q\n  ca_file = %q\n}\n", f.APIURL(), f.CAFile()) + nodes,
				ExpectError: regexp.MustCompile(`(?s)401:\s+missing\s+API\s+token.*GRID_TOKEN`),
			},
			{
				// The CA inline works as the file does.
				Config: fmt.Sprintf("provider \"grid\" {\n  address = %q\n  token   = %q\n  ca_pem  = %q\n}\n", f.APIURL(), readTok.Token, caPEM) + nodes,
			},
			{
				Config:      providerConfigToken(f, "grid_not-a-token") + nodes,
				ExpectError: regexp.MustCompile(`(?s)401:\s+unknown\s+API\s+token`),
			},
			{
				Config: providerConfigToken(f, readTok.Token) + nodes,
			},
			{
				Config:      providerConfigToken(f, readTok.Token) + job,
				ExpectError: regexp.MustCompile(`(?s)403:\s+token\s+"tf-read"\s+has\s+role\s+read`),
			},
			{
				Config: providerConfigToken(f, opTok.Token) + job,
				Check:  resource.TestCheckResourceAttr("grid_job.echo", "status", "completed"),
			},
		},
	})
}

func TestProviderSchema(t *testing.T) {
	ctx := context.Background()
	p := New("test")()
	var resp provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("provider schema: %v", resp.Diagnostics)
	}
	srv, err := providerserver.NewProtocol6WithError(p)()
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range sr.Diagnostics {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			t.Errorf("schema diagnostic: %s: %s", d.Summary, d.Detail)
		}
	}
	if _, ok := sr.ResourceSchemas["grid_job"]; !ok {
		t.Errorf("grid_job resource missing")
	}
	for _, ds := range []string{"grid_nodes", "grid_node", "grid_backends", "grid_job"} {
		if _, ok := sr.DataSourceSchemas[ds]; !ok {
			t.Errorf("data source %s missing", ds)
		}
	}
}
