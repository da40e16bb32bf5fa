package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newJobDLQCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, replay and drop job requests in the dead-letter stream",
		Long: `A job's request moves to the dead-letter stream when no controller could
claim it after max_deliveries deliveries (its job cannot be read, or a
controller crashed claiming it); the job is marked failed with the reason.
replay queues the request again (the job pending again); drop removes it.`,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered job requests with the reason",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			dls, err := c.DeadLetters(cmd.Context())
			if err != nil {
				return fmt.Errorf("list dead letters: %w", err)
			}
			if g.json() {
				return writeJSON(g.stdout, dls)
			}
			tw := newTable(g.stdout)
			_, _ = fmt.Fprintln(tw, "JOB\tDELIVERIES\tAGE\tREASON")
			for _, d := range dls {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", d.JobID, d.Deliveries, fmtAge(d.Time, time.Now()), d.Reason)
			}
			return tw.Flush()
		}),
	}
	replay := &cobra.Command{
		Use:   "replay JOB_ID",
		Short: "Queue a dead-lettered job request again",
		Args:  exactArgs("JOB_ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.ReplayDeadLetter(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("replay dead letter of %s: %w", args[0], err)
			}
			_, err = fmt.Fprintf(g.stdout, "job %s queued again\n", args[0])
			return err
		}),
	}
	drop := &cobra.Command{
		Use:   "drop JOB_ID",
		Short: "Remove a dead-lettered job request for good",
		Args:  exactArgs("JOB_ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DropDeadLetter(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("drop dead letter of %s: %w", args[0], err)
			}
			_, err = fmt.Fprintf(g.stdout, "dead letter of job %s dropped\n", args[0])
			return err
		}),
	}
	cmd.AddCommand(list, replay, drop)
	return cmd
}
