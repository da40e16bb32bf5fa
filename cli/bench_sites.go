//go:build !windows

package cli

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/internal/compose/bench"
)

func newBenchSitesCommand(g *globals, bf *benchFlags) *cobra.Command {
	var (
		sites, rounds, procs int
		agentBin             string
		relaysHere           bool
	)
	cmd := &cobra.Command{
		Use:   "sites",
		Short: "Measure sites: what a site's link carries for a broadcast, and fan-out through relays against direct agents",
		Long: `Start an embedded controller with a leaf port, create --sites sites and run a
relay process for each ("grid site relay" of this binary, or a relay in
this process with --relays-in-process), with --agents
agents per site connected to their relay (in this process, or --agent-procs
"grid agent" processes per site).

First, a one-step "ping echo" job to every node of the first site
(target site:NAME): the messages and bytes that crossed that site's link,
read from the hub's end of the leaf connection before and after, and over
an idle window as long right after (heartbeats and the relay's roster
requests cross anyway). Then --rounds one-step jobs to every site's agents
at once; then the same number of agents connected to the controller
directly, and --rounds jobs to them. One warm-up round of each is not
counted. Every job's stored results must hold one successful echo from
every agent, or the command fails.`,
		Example: `  grid bench sites --sites 3 --agents 100 --rounds 10
  grid bench sites --sites 3 --agent-procs 100 --rounds 10 -o json`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if sites < 1 || rounds < 1 || procs < 0 {
				return usageErrorf("--sites and --rounds must be at least 1, --agent-procs not negative")
			}
			if cmd.Flags().Changed("addr") {
				return usageErrorf("bench sites runs its own controller (with a leaf port); --addr is not for it")
			}
			perSite := bf.agents
			if procs > 0 {
				if cmd.Flags().Changed("agents") {
					return usageErrorf("--agents and --agent-procs: give one")
				}
				perSite = procs
				if agentBin == "" {
					exe, err := os.Executable()
					if err != nil {
						return fmt.Errorf("--agent-bin: %w", err)
					}
					agentBin = exe
				}
				bf.agentBin, bf.agentLogLevel = agentBin, "warn"
			}
			// benchSetup sizes the open-files limit by --agents: every
			// site's agents, then as many again directly.
			bf.agents, bf.sites = perSite*sites, true
			ctx, env, done, err := benchSetup(cmd, g, bf)
			if err != nil {
				return err
			}
			defer done()
			r, err := runBenchSites(ctx, g, env, sites, perSite, rounds, procs > 0, relaysHere)
			if err != nil {
				return err
			}
			return printBench(g, r)
		}),
	}
	cmd.Flags().IntVar(&sites, "sites", 3, "sites, each with a relay process")
	cmd.Flags().IntVar(&rounds, "rounds", 10, "fan-out jobs to time, through the sites and directly")
	cmd.Flags().IntVar(&procs, "agent-procs", 0, "run this many agents per site as separate grid agent processes (instead of --agents per site in this process)")
	cmd.Flags().StringVar(&agentBin, "agent-bin", "", "with --agent-procs: the grid binary to run (default: this one)")
	cmd.Flags().BoolVar(&relaysHere, "relays-in-process", false, "run the relays in this process instead of as grid site relay processes")
	return cmd
}

func runBenchSites(ctx context.Context, g *globals, env *bench.Env, nSites, perSite, rounds int, procs, relaysHere bool) (bench.SitesReport, error) {
	var zero bench.SitesReport
	start := func(n int, url string) error {
		var err error
		if procs {
			_, err = env.StartAgentProcsAt(ctx, n, url)
		} else {
			_, err = env.StartAgentsAt(ctx, n, url)
		}
		return err
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: %d sites with a relay each\n", nSites)
	sites, err := env.StartSites(ctx, nSites, relaysHere)
	if err != nil {
		return zero, err
	}
	env.UseGroup("-sites")
	var firstSite []string
	for i, s := range sites {
		_, _ = fmt.Fprintf(g.stderr, "bench: %d agents at site %s\n", perSite, s.Name)
		before := env.Names()
		if err := start(perSite, s.URL); err != nil {
			return zero, err
		}
		if i == 0 {
			for _, n := range env.Names() {
				if !slices.Contains(before, n) {
					firstSite = append(firstSite, n)
				}
			}
		}
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: broadcast to site %s, counting its link\n", sites[0].Name)
	link, err := env.SiteBroadcast(ctx, sites[0].Name, firstSite)
	if err != nil {
		return zero, err
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: %d rounds to %d agents through %d relays\n", rounds, nSites*perSite, nSites)
	via, err := env.Fanout(ctx, rounds, nil)
	if err != nil {
		return zero, err
	}
	_, _ = fmt.Fprintln(g.stderr, "bench: stopping the sites' agents")
	env.StopAgents()
	env.UseGroup("-direct")
	_, _ = fmt.Fprintf(g.stderr, "bench: %d agents connected to the controller\n", nSites*perSite)
	if err := start(nSites*perSite, env.NATSURL()); err != nil {
		return zero, err
	}
	_, _ = fmt.Fprintf(g.stderr, "bench: %d rounds to %d agents directly\n", rounds, nSites*perSite)
	direct, err := env.Fanout(ctx, rounds, nil)
	if err != nil {
		return zero, err
	}
	return bench.NewSitesReport(nSites, perSite, procs, link,
		bench.NewFanoutSide(nSites*perSite, via), bench.NewFanoutSide(nSites*perSite, direct)), nil
}
