package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/provider"
)

// StartedByTerraform reports whether Terraform started this process as a
// provider plugin.
func StartedByTerraform() bool { return provider.StartedByTerraform() }

// ServeProvider serves the Terraform provider until Terraform stops it.
func ServeProvider(ctx context.Context, version string, debug bool) error {
	if err := provider.Serve(ctx, version, debug); err != nil {
		return fmt.Errorf("serve provider: %w", err)
	}
	return nil
}

func newProviderCommand(g *globals) *cobra.Command {
	var debug bool
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Serve the Terraform provider (Terraform does this by itself)",
		Long: `Serve the Terraform provider over plugin protocol 6. Terraform starts the
binary this way by itself; run it by hand with --debug to attach a debugger:
it prints a TF_REATTACH_PROVIDERS value to export for terraform.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return ServeProvider(cmd.Context(), g.version, debug)
		}),
	}
	cmd.Flags().BoolVar(&debug, "debug", false, "debug mode: print TF_REATTACH_PROVIDERS and serve until interrupted")
	return cmd
}
