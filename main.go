// Command grid is GRID's single binary: the Terraform provider (when
// Terraform starts it), the controller, the agent, a local dev fleet and the
// client CLI.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gridfleet/terraform-provider-grid/cli"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	// Terraform starts providers with its handshake in the environment and
	// talks gRPC over the plugin protocol; no command line applies then.
	if cli.StartedByTerraform() {
		if err := cli.ServeProvider(context.Background(), version, false); err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(cli.ExitFailed)
		}
		return
	}
	os.Exit(cli.Execute(version))
}
