package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newTokenCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage API tokens (admin role)",
		Long: `Manage the bearer tokens the controller API accepts. Tokens live (hashed) in
the cluster's tokens bucket, so every controller honours a new token and
refuses a revoked one at once. Roles, each including the ones before it:

  metrics   GET /metrics only
  read      every GET: jobs, nodes, status, backends
  operator  also submit and cancel jobs
  admin     also manage tokens, read the audit trail, and submit dangerous actions

The first admin token is in the controller's data dir, file admin-token.`,
	}
	var name, role string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a token and print it (it is shown only this once)",
		Example: `  grid token create --name ci --role read
  export GRID_TOKEN=$(grid token create --name deploy --role operator)`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if !api.ValidToken(name) {
				return usageErrorf("--name %q: use 1-128 letters, digits, '_' and '-'", name)
			}
			r, err := api.ParseRole(role)
			if err != nil {
				return usageErrorf("--role: %w", err)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.CreateToken(cmd.Context(), name, r)
			if err != nil {
				return fmt.Errorf("create token %s: %w", name, err)
			}
			if g.json() {
				return writeJSON(g.stdout, t)
			}
			// The token alone on stdout, so $(grid token create ...) works;
			// the note goes to stderr.
			_, _ = fmt.Fprintln(g.stdout, t.Token)
			_, _ = fmt.Fprintf(g.stderr, "token %q (role %s) created; it is not shown again\n", t.Name, t.Role)
			return nil
		}),
	}
	create.Flags().StringVar(&name, "name", "", "name of the token (recorded as submitted_by on its jobs)")
	create.Flags().StringVar(&role, "role", string(api.RoleRead), "role: metrics, read, operator or admin")
	_ = create.MarkFlagRequired("name")

	list := &cobra.Command{
		Use:   "list",
		Short: "List tokens (names and roles; never the tokens)",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ts, err := c.ListTokens(cmd.Context())
			if err != nil {
				return fmt.Errorf("list tokens: %w", err)
			}
			if g.json() {
				if ts == nil {
					ts = []api.TokenInfo{}
				}
				return writeJSON(g.stdout, ts)
			}
			return printTokens(g.stdout, ts, time.Now())
		}),
	}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a token on every controller",
		Args:  exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.RevokeToken(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke token %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, t)
			}
			_, _ = fmt.Fprintf(g.stdout, "token %q revoked\n", t.Name)
			return nil
		}),
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func printTokens(w io.Writer, ts []api.TokenInfo, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tBY\tREVOKED")
	for _, t := range ts {
		revoked := "-"
		if t.RevokedAt != nil {
			revoked = fmtAge(*t.RevokedAt, now) + " by " + orDash(t.RevokedBy)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, fmtAge(t.CreatedAt, now), orDash(t.CreatedBy), revoked)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// clientFlags are the root's flags that only commands calling the API use.
var clientFlags = map[string]string{ //nolint:gosec // flag names and their help, not credentials
	"addr":    "the controller address the CLI calls",
	"token":   "the API token the CLI sends",
	"output":  "the CLI's output format",
	"timeout": "the CLI's request timeout",
}

// serverCommand marks a command that runs a server rather than calling
// one: the client flags mean nothing to it, so giving one is refused
// instead of silently ignored (grid controller --token x would otherwise
// look like it set a token).
func serverCommand(cmd *cobra.Command, hint string) *cobra.Command {
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		for _, name := range []string{"addr", "token", "output", "timeout"} {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed && cmd.LocalFlags().Lookup(name) == nil {
				return usageErrorf("--%s is %s; %q does not use it. %s", name, clientFlags[name], cmd.CommandPath(), hint)
			}
		}
		return nil
	}
	return cmd
}
