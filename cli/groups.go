package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// requireSubcommands gives every command that only groups others (grid job,
// grid node, …) a body that rejects an unknown subcommand with a usage
// error. Without one cobra prints the group's help and exits 0 for
// "grid job retyr ID", which a script cannot tell from success. A bare
// group still prints its help.
func requireSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		requireSubcommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() || !cmd.HasParent() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		var names []string
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				names = append(names, s.Name())
			}
		}
		return usageErrorf("unknown command %q for %q (want one of: %s; see '%s --help')",
			args[0], c.CommandPath(), strings.Join(names, ", "), c.CommandPath())
	}
}
