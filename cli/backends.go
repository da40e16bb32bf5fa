package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newBackendsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backends [BACKEND]",
		Short: "List the backend actions online nodes offer, with their parameters",
		Long: `List the backends and actions the online nodes offer (the merged schemas a
job is validated against). With BACKEND, show that backend's actions and
every parameter: type, whether it is required, default and description.`,
		Args: cobra.MaximumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cat, err := c.Backends(cmd.Context())
			if err != nil {
				return fmt.Errorf("backends: %w", err)
			}
			if len(args) == 0 {
				if g.json() {
					return writeJSON(g.stdout, cat)
				}
				nodes := cat.Nodes
				if nodes == nil {
					nodes = map[string]int{}
				}
				return writeSchemaTable(g.stdout, cat.Backends, nodes)
			}
			b, ok := cat.Backend(args[0])
			if !ok {
				names := make([]string, 0, len(cat.Backends))
				for _, b := range cat.Backends {
					names = append(names, b.Name)
				}
				return usageErrorf("no online node offers backend %q (available: %s)", args[0], strings.Join(names, ", "))
			}
			if g.json() {
				return writeJSON(g.stdout, b)
			}
			return writeBackend(g.stdout, b)
		}),
	}
}

// writeBackend prints one backend's actions with every parameter.
func writeBackend(w io.Writer, b api.BackendSchema) error {
	if b.Description != "" {
		_, _ = fmt.Fprintf(w, "%s: %s\n", b.Name, b.Description)
	}
	for _, name := range b.ActionNames() {
		a, _ := b.Action(name)
		_, _ = fmt.Fprintf(w, "\n%s %s", b.Name, a.Name)
		if f := actionFlags(a); f != "" {
			_, _ = fmt.Fprintf(w, " [%s]", f)
		}
		_, _ = fmt.Fprintln(w)
		if a.Description != "" {
			_, _ = fmt.Fprintf(w, "  %s\n", a.Description)
		}
		if len(a.Params) == 0 {
			continue
		}
		tw := newTable(w)
		_, _ = fmt.Fprintln(tw, "  PARAM\tTYPE\tREQUIRED\tDEFAULT\tDESCRIPTION")
		for _, p := range a.Params {
			desc := p.Description
			if len(p.Enum) > 0 {
				desc += " (one of: " + strings.Join(p.Enum, ", ") + ")"
			}
			if p.Sensitive {
				desc += " (sensitive: stored and shown as " + api.SensitiveValue + ")"
			}
			_, _ = fmt.Fprintf(tw, "  --%s\t%s\t%s\t%s\t%s\n", p.Name, p.Type, yesNo(p.Required), orDash(p.Default), desc)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}
