package cli

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster: nodes, controllers and jobs",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.Status(cmd.Context())
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if g.json() {
				return writeJSON(g.stdout, s)
			}
			return printStatus(g.stdout, c.Address(), s)
		}),
	}
}

func printStatus(w io.Writer, addr string, s *api.Status) error {
	tw := newTable(w)
	_, _ = fmt.Fprintf(tw, "controller API:\t%s\n", addr)
	_, _ = fmt.Fprintf(tw, "controllers:\t%d\n", s.Controllers)
	_, _ = fmt.Fprintf(tw, "nodes:\t%d online, %d offline, %d total\n", s.Nodes.Online, s.Nodes.Offline, s.Nodes.Total)
	_, _ = fmt.Fprintf(tw, "jobs:\t%d total\n", s.Jobs.Total)
	for _, st := range sortedKeys(s.Jobs.StatusCounts) {
		_, _ = fmt.Fprintf(tw, "  %s:\t%d\n", st, s.Jobs.StatusCounts[st])
	}
	for _, name := range sortedKeys(s.Limits) {
		_, _ = fmt.Fprintf(tw, "limit %s:\t%d\n", name, s.Limits[name])
	}
	if len(s.Streams) > 0 {
		_, _ = fmt.Fprintf(tw, "streams:\t%d replicas wanted\n", s.Replicas)
		for _, h := range s.Streams {
			_, _ = fmt.Fprintf(tw, "  %s:\t%s\n", h.Stream, streamLine(h))
		}
	}
	if len(s.Jobs.OperationCounts) > 0 {
		_, _ = fmt.Fprintln(tw, "operations:\t")
		for _, op := range sortedKeys(s.Jobs.OperationCounts) {
			_, _ = fmt.Fprintf(tw, "  %s:\t%d\n", op, s.Jobs.OperationCounts[op])
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// streamLine is a stream's replication state in a few words.
func streamLine(h api.StreamHealth) string {
	switch {
	case h.Error != "":
		return "NO LEADER: " + h.Error
	case !h.HasLeader:
		return fmt.Sprintf("NO LEADER: %d replicas, %d current", h.Replicas, h.Current)
	case h.Current < h.Replicas:
		return fmt.Sprintf("DEGRADED: %d replicas, %d current, leader %s", h.Replicas, h.Current, h.Leader)
	}
	return fmt.Sprintf("ok: %d replicas, %d current, leader %s", h.Replicas, h.Current, h.Leader)
}

// versionInfo is what "grid version -o json" prints.
type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of grid",
		Args:  exactArgs(),
		RunE: runE(func(_ *cobra.Command, _ []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			v := versionInfo{Version: g.version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
			if g.json() {
				return writeJSON(g.stdout, v)
			}
			_, err := fmt.Fprintf(g.stdout, "grid %s (%s %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
			return err
		}),
	}
}
