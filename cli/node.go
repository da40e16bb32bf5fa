package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newNodeCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Inspect registered nodes",
	}
	var pending bool
	var site string
	list := &cobra.Command{
		Use:   "list",
		Short: "List registered nodes (--pending: agents waiting for approval)",
		Long: `List registered nodes with their site and groups. --site lists one site's
nodes ("default" is the agents connected to the controllers directly; the
others reach the hub through their site's relay).`,
		Example: `  grid node list
  grid node list --site default`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if pending && site != "" {
				return usageErrorf("--pending lists every site's waiting agents: drop --site")
			}
			if site != "" && !api.ValidToken(site) {
				return usageErrorf("--site %q is not a site name: letters, digits, '_' and '-'", site)
			}
			if pending {
				es, err := c.ListEnrollments(cmd.Context(), api.EnrollPending)
				if err != nil {
					return fmt.Errorf("list pending nodes: %w", err)
				}
				if g.json() {
					if es == nil {
						es = []api.Enrollment{}
					}
					return writeJSON(g.stdout, es)
				}
				return printEnrollments(g.stdout, es, time.Now())
			}
			nodes, err := c.ListSiteNodes(cmd.Context(), site)
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
			if g.json() {
				if nodes == nil {
					nodes = []api.NodeInfo{}
				}
				return writeJSON(g.stdout, nodes)
			}
			return printNodeList(g.stdout, nodes, time.Now())
		}),
	}
	list.Flags().BoolVar(&pending, "pending", false, "list agents that enrolled and wait for 'grid node approve'")
	list.Flags().StringVar(&site, "site", "", "list only the nodes of this site (default: the controllers' own agents)")
	decide := func(use, short, verb string, call func(*api.Client, *cobra.Command, string) (*api.Enrollment, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " ID",
			Short: short,
			Args:  exactArgs("ID"),
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := g.client()
				if err != nil {
					return err
				}
				e, err := call(c, cmd, args[0])
				if err != nil {
					return fmt.Errorf("%s node %s: %w", use, args[0], err)
				}
				if g.json() {
					return writeJSON(g.stdout, e)
				}
				_, err = fmt.Fprintf(g.stdout, "node %s %s (key %s)\n", e.NodeID, verb, e.PublicKey)
				return err
			}),
		}
	}
	cmd.AddCommand(list,
		decide("approve", "Admit an agent waiting for approval", "admitted", func(c *api.Client, cmd *cobra.Command, id string) (*api.Enrollment, error) {
			return c.ApproveNode(cmd.Context(), id)
		}),
		decide("revoke", "Disconnect an agent and refuse its key from now on", "revoked", func(c *api.Client, cmd *cobra.Command, id string) (*api.Enrollment, error) {
			return c.RevokeNode(cmd.Context(), id)
		}),
		&cobra.Command{
			Use:   "remove ID",
			Short: "Forget an offline node's record (a host scaled down or rebuilt)",
			Long: `Forget an offline node's record, so targets, the catalog and the fleet's
counts stop listing it. An online node is refused: stop its agent first.
The node's admission is kept: an agent that comes back with the same key
registers again. To keep a host out, revoke it (grid node revoke ID).`,
			Args: exactArgs("ID"),
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := g.client()
				if err != nil {
					return err
				}
				if err := c.RemoveNode(cmd.Context(), args[0]); err != nil {
					return fmt.Errorf("remove node %s: %w", args[0], err)
				}
				_, err = fmt.Fprintf(g.stdout, "node %s removed\n", args[0])
				return err
			}),
		},
		&cobra.Command{
			Use:   "info ID",
			Short: "Show a node with its backends and actions",
			Args:  exactArgs("ID"),
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := g.client()
				if err != nil {
					return err
				}
				n, err := c.GetNode(cmd.Context(), args[0])
				if err != nil {
					return fmt.Errorf("node %s: %w", args[0], err)
				}
				if g.json() {
					return writeJSON(g.stdout, n)
				}
				return printNode(g.stdout, n, time.Now())
			}),
		})
	return cmd
}

func printEnrollments(w io.Writer, es []api.Enrollment, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "ID\tSTATUS\tSITE\tGROUPS\tPUBLIC KEY\tREQUESTED")
	for _, e := range es {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", e.NodeID, e.Status, api.SiteOf(e.Site), orDash(strings.Join(e.Groups, ",")), e.PublicKey, fmtAge(e.RequestedAt, now))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func printNodeList(w io.Writer, nodes []api.NodeInfo, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "ID\tSTATUS\tSITE\tHOSTNAME\tGROUPS\tBACKENDS\tVERSION\tLAST SEEN")
	for _, n := range nodes {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Status, api.SiteOf(n.Site), orDash(n.Hostname),
			orDash(strings.Join(n.Groups, ",")), orDash(truncate(strings.Join(n.Backends, ","), 40)),
			orDash(n.Version), fmtAge(n.LastSeen, now))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func printNode(w io.Writer, n *api.NodeInfo, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintf(tw, "id:\t%s\n", n.ID)
	_, _ = fmt.Fprintf(tw, "status:\t%s\n", n.Status)
	_, _ = fmt.Fprintf(tw, "site:\t%s\n", api.SiteOf(n.Site))
	_, _ = fmt.Fprintf(tw, "hostname:\t%s\n", orDash(n.Hostname))
	_, _ = fmt.Fprintf(tw, "groups:\t%s\n", orDash(strings.Join(n.Groups, ", ")))
	_, _ = fmt.Fprintf(tw, "version:\t%s\n", orDash(n.Version))
	if !n.OnlineSince.IsZero() {
		_, _ = fmt.Fprintf(tw, "online since:\t%s\n", n.OnlineSince.Local().Format(time.RFC3339))
	}
	_, _ = fmt.Fprintf(tw, "last seen:\t%s ago\n", fmtAge(n.LastSeen, now))
	_, _ = fmt.Fprintf(tw, "backends:\t%s\n", orDash(strings.Join(n.Backends, ", ")))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if len(n.Schemas) == 0 {
		return nil
	}
	_, _ = fmt.Fprintln(w)
	return writeSchemaTable(w, n.Schemas, nil)
}

// writeSchemaTable lists every action of the schemas, one row each. With
// nodes set, a column says how many online nodes offer the backend.
func writeSchemaTable(w io.Writer, schemas []api.BackendSchema, nodes map[string]int) error {
	tw := newTable(w)
	if nodes != nil {
		_, _ = fmt.Fprintln(tw, "BACKEND\tACTION\tNODES\tPARAMS\tFLAGS\tDESCRIPTION")
	} else {
		_, _ = fmt.Fprintln(tw, "BACKEND\tACTION\tPARAMS\tFLAGS\tDESCRIPTION")
	}
	schemas = append([]api.BackendSchema(nil), schemas...)
	sort.Slice(schemas, func(i, j int) bool { return schemas[i].Name < schemas[j].Name })
	for _, b := range schemas {
		for _, name := range b.ActionNames() {
			a, _ := b.Action(name)
			count := ""
			if nodes != nil {
				count = fmt.Sprintf("%d\t", nodes[b.Name])
			}
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\n", b.Name, a.Name, count, orDash(paramSummary(a.Params)),
				orDash(actionFlags(a)), truncate(a.Description, 50))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// paramSummary renders parameters as name:type, marking required ones with
// a trailing '*'.
func paramSummary(ps []api.ParamSchema) string {
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		s := p.Name + ":" + string(p.Type)
		if p.Required {
			s += "*"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func actionFlags(a api.ActionSchema) string {
	var f []string
	if a.ReadOnly {
		f = append(f, "read-only")
	}
	if a.Idempotent {
		f = append(f, "idempotent")
	}
	if a.CheckMode {
		f = append(f, "check")
	}
	if a.Dangerous {
		f = append(f, "dangerous")
	}
	return strings.Join(f, ",")
}
