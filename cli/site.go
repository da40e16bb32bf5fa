package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newSiteCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "site",
		Short: "Manage sites: places whose agents reach the hub through one relay",
		Long: `A site is a place (a data centre, an edge location, a customer network)
whose agents connect to a relay at the site instead of to the controllers;
the relay connects out to the hub's controllers over one TLS link (a NATS
leaf connection) with its site's key. "grid site create" makes a site and
its credential (admin role), "grid site relay" runs the relay with it.`,
	}
	var (
		hosts []string
		out   string
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a site and write its credential (shown only this once)",
		Long: `Create a site and write its credential to --out (mode 0600): the site's key,
the hub's CA, a certificate for the relay's agent port (naming --host and
localhost) and the controllers' leaf URLs. Whoever holds it can run the
site's relay: keep it like a private key. The controllers must run with
--leaf-addr.`,
		Example: `  grid site create paris --host relay.paris.example.com --out paris.site.json
  grid site relay --credential paris.site.json --listen 0.0.0.0:4222`,
		Args: exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := api.ValidSiteName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if out == "" {
				out = name + ".site.json"
			}
			// Refuse before the site exists: a credential that cannot be
			// written is lost, and the site would have to be revoked.
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return usageErrorf("--out %s exists; remove it or name another file", out)
			}
			if err != nil {
				return fmt.Errorf("credential file: %w", err)
			}
			c, err := g.client()
			if err != nil {
				_ = f.Close()
				_ = os.Remove(out)
				return err
			}
			cred, err := c.CreateSite(cmd.Context(), api.SiteCreateRequest{Name: name, Hosts: hosts})
			if err != nil {
				_ = f.Close()
				_ = os.Remove(out)
				return fmt.Errorf("create site %s: %w", name, err)
			}
			if err := writeCredential(f, cred); err != nil {
				_ = os.Remove(out)
				return fmt.Errorf("write %s: %w (the site exists: revoke it and create it again)", out, err)
			}
			_, _ = fmt.Fprintf(g.stderr, "site %q created; its credential is in %s (hub %v); run the relay with:\n  grid site relay --credential %s --listen 0.0.0.0:4222\n",
				name, out, cred.HubURLs, out)
			return nil
		}),
	}
	create.Flags().StringSliceVar(&hosts, "host", nil, "a DNS name or address the site's agents reach the relay by (repeatable)")
	create.Flags().StringVar(&out, "out", "", "file to write the credential to (default NAME.site.json; must not exist)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List sites with their nodes and whether a relay is connected",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ss, err := c.ListSites(cmd.Context())
			if err != nil {
				return fmt.Errorf("list sites: %w", err)
			}
			if g.json() {
				if ss == nil {
					ss = []api.SiteStatus{}
				}
				return writeJSON(g.stdout, ss)
			}
			return printSites(g.stdout, ss, time.Now())
		}),
	}
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a site: its relay is disconnected and refused from now on",
		Long: `Revoke a site: every controller closes its relay's connection and refuses
its key from now on, so the site's agents are cut off from the hub (their
nodes go offline). It cannot be undone: create a new site for the place.`,
		Args: exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.RevokeSite(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke site %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, s)
			}
			_, _ = fmt.Fprintf(g.stdout, "site %q revoked\n", s.Name)
			return nil
		}),
	}
	cmd.AddCommand(create, list, revoke, newSiteRelayCmd(g))
	return cmd
}

func writeCredential(f *os.File, cred api.SiteCredential) error {
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cred); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func printSites(w io.Writer, ss []api.SiteStatus, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "NAME\tNODES\tONLINE\tRELAY\tCREATED\tBY\tSTATE")
	for _, s := range ss {
		relay := "not connected"
		if s.Connected {
			relay = "connected"
		}
		state := "live"
		if s.Revoked {
			state = "revoked " + fmtAge(s.RevokedAt, now) + " ago"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s ago\t%s\t%s\n", s.Name, s.Nodes, s.Online, relay,
			fmtAge(s.CreatedAt, now), orDash(s.CreatedBy), state)
	}
	return tw.Flush()
}
