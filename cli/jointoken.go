package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newJoinTokenCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join-token",
		Short: "Manage scoped join tokens for agent enrollment (admin role)",
		Long: `Manage scoped join tokens: each may enroll agents only into some groups (a
group and its sub-groups: --groups web allows web and web.prod), until it
expires, a number of times. Hand one to a batch of hosts instead of the
controller's unscoped DATA_DIR/join-token. Tokens live hashed in the
cluster's join_tokens bucket; a use is counted on every controller at once.`,
	}
	var (
		name   string
		groups []string
		site   string
		ttl    time.Duration
		uses   int
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a scoped join token and print it (it is shown only this once)",
		Example: `  grid join-token create --groups web --ttl 24h --uses 10
  grid agent ... --join-token "$(grid join-token create --name batch-7 --groups db.prod --uses 3)"`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if name != "" && !api.ValidToken(name) {
				return usageErrorf("--name %q: use 1-128 letters, digits, '_' and '-'", name)
			}
			for _, gr := range groups {
				if !api.ValidGroup(gr) {
					return usageErrorf("--groups: %q is not a valid group", gr)
				}
			}
			if site != "" && !api.ValidToken(site) {
				return usageErrorf("--site %q: letters, digits, '_' and '-'", site)
			}
			if ttl <= 0 {
				return usageErrorf("--ttl %s: want a positive duration", ttl)
			}
			if uses < 1 {
				return usageErrorf("--uses %d: want 1 or more", uses)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.CreateJoinToken(cmd.Context(), api.JoinTokenRequest{Name: name, Groups: groups, Site: site, TTL: api.Duration(ttl), Uses: uses})
			if err != nil {
				return fmt.Errorf("create join token: %w", err)
			}
			if g.json() {
				return writeJSON(g.stdout, t)
			}
			_, _ = fmt.Fprintln(g.stdout, t.Token)
			_, _ = fmt.Fprintf(g.stderr, "join token %q created (groups %s, %d uses, expires %s); it is not shown again\n",
				t.Name, scopeText(t.Groups), t.Uses, t.ExpiresAt.Format(time.RFC3339))
			return nil
		}),
	}
	create.Flags().StringVar(&name, "name", "", "name of the token (default: a generated one)")
	create.Flags().StringSliceVar(&groups, "groups", nil, "groups the token may enroll into, each with its sub-groups (default: any)")
	create.Flags().StringVar(&site, "site", "", "the only site the token enrolls through (its relay; default: any, the hub included)")
	create.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token stays valid")
	create.Flags().IntVar(&uses, "uses", 1, "how many enrollments the token allows")

	list := &cobra.Command{
		Use:   "list",
		Short: "List scoped join tokens (never the tokens)",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ts, err := c.ListJoinTokens(cmd.Context())
			if err != nil {
				return fmt.Errorf("list join tokens: %w", err)
			}
			if g.json() {
				if ts == nil {
					ts = []api.JoinTokenInfo{}
				}
				return writeJSON(g.stdout, ts)
			}
			return printJoinTokens(g.stdout, ts, time.Now())
		}),
	}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a scoped join token (agents it enrolled stay enrolled)",
		Args:  exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			t, err := c.RevokeJoinToken(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke join token %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, t)
			}
			_, _ = fmt.Fprintf(g.stdout, "join token %q revoked\n", t.Name)
			return nil
		}),
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func scopeText(groups []string) string {
	if len(groups) == 0 {
		return "any"
	}
	return strings.Join(groups, ",")
}

func printJoinTokens(w io.Writer, ts []api.JoinTokenInfo, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "NAME\tGROUPS\tSITE\tUSED\tEXPIRES\tCREATED\tBY\tSTATE")
	for _, t := range ts {
		state := "valid"
		switch {
		case t.RevokedAt != nil:
			state = "revoked " + fmtAge(*t.RevokedAt, now) + " ago by " + orDash(t.RevokedBy)
		case !now.Before(t.ExpiresAt):
			state = "expired"
		case t.Used >= t.Uses:
			state = "used up"
		}
		expires := t.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
		site := t.Site
		if site == "" {
			site = "any"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", t.Name, scopeText(t.Groups), site, t.Used, t.Uses, expires,
			fmtAge(t.CreatedAt, now), orDash(t.CreatedBy), state)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
