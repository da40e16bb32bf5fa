package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newJobRetryCommand(g *globals) *cobra.Command {
	var failedOnly, wait bool
	cmd := &cobra.Command{
		Use:   "retry ID [--failed-only] [--wait]",
		Short: "Submit a finished job again as a new job linked by retry_of",
		Long: `Submit a new job with the same target, tasks, strategy and timeout as a
finished job. With --failed-only it runs only on the nodes that did not
succeed (failed, cancelled, unreachable, or never answered). The new job
names the old one in retry_of. Prints the new job's id, or with --wait
follows it as 'grid job run --wait' does.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			j, err := c.RetryJob(cmd.Context(), args[0], failedOnly)
			if err != nil {
				return fmt.Errorf("retry job %s: %w", args[0], err)
			}
			if !wait {
				if g.json() {
					return writeJSON(g.stdout, j)
				}
				_, err := fmt.Fprintln(g.stdout, j.ID)
				return err
			}
			final, err := c.WaitJob(cmd.Context(), j.ID)
			if err != nil {
				return fmt.Errorf("wait for job %s: %w", j.ID, err)
			}
			if err := printJob(g, final); err != nil {
				return err
			}
			return jobOutcome(final)
		}),
	}
	cmd.Flags().BoolVar(&failedOnly, "failed-only", false, "only on the nodes that did not succeed")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the new job to finish and print its results")
	return cmd
}

func newJobDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Remove a finished job (a pending or running one must be cancelled first)",
		Args:  exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteJob(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("delete job %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, map[string]string{"id": args[0], "status": "deleted"})
			}
			_, err = fmt.Fprintf(g.stdout, "job %s deleted\n", args[0])
			return err
		}),
	}
}
