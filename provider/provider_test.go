package provider

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/gridfleet/terraform-provider-grid/internal/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/fleet/fleettest"
)

// testAccProtoV6ProviderFactories serves the provider in-process to the
// terraform binary the acceptance tests run.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"grid": providerserver.NewProtocol6WithError(New("test")()),
}

// testAccFleet starts an in-process fleet (controller and agents, node-1 …
// node-N; even-numbered agents from 0 in web.prod, the others in db.prod)
// for an acceptance test, and skips the test without TF_ACC.
func testAccFleet(t *testing.T, agents int) *fleet.Fleet {
	t.Helper()
	testAccPreCheck(t)
	return fleettest.Start(t, fleet.Options{Agents: agents})
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
}

// providerConfig is the provider block for a fleet.
func providerConfig(f *fleet.Fleet) string {
	return fmt.Sprintf("provider \"grid\" {\n  address = %q\n}\n", f.APIURL())
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
