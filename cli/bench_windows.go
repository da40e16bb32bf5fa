package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCommand: the bench drives agent processes through Unix process
// and resource-limit calls and reads /proc, so on Windows (where the binary
// is the Terraform provider) it only says so.
func newBenchCommand(*globals) *cobra.Command {
	return &cobra.Command{
		Use:    "bench",
		Short:  "Benchmarks (not available on Windows)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("grid bench runs on Linux and macOS only")
		},
	}
}
