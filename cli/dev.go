package cli

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry/traceexport"
)

func newDevCommand(g *globals) *cobra.Command {
	var (
		agents  int
		apiAddr string
		logs    logOptions
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a controller and N agents in one process, for trying GRID out",
		Long: `Run a local fleet: a controller with its embedded NATS server and N agents
in this process, with a temporary data directory that is removed at exit.
It prints an export line (GRID_ADDR, GRID_TOKEN, the admin token, and
GRID_CACERT, the CA of the API's HTTPS certificate) to paste into another
terminal. Stop it with Ctrl-C.

The agents never change this machine. What each backend really does here:
  ping, test     real and harmless: echo, sleep, fail
  sysinfo        real, read-only: load, memory, disks
  file           real, but only inside each agent's sandbox directory in the
                 temporary data directory
  net            ping sends real ICMP echo requests; dns_get reads a
                 resolv.conf in the sandbox; dns_set is off (dangerous)
  apt, systemd   check mode only: they query the host (dpkg-query,
                 apt-get -s, systemctl show) and report what they would
                 change, changing nothing; apt remove and upgrade, systemd
                 stop and disable are off (dangerous)
  package        check mode only, as apt (or dnf/rpm queries); info, list
                 and search read the host's package database for real;
                 remove and upgrade are off (dangerous)
  rke2           check mode only (install fetches nothing but the
                 checksum file, and has no mirror unless configured);
                 stop and uninstall are off (dangerous)
  config         real, but only inside the sandbox, like file
  user           check mode only: it reads the host's accounts (getent, id,
                 ~/.ssh/authorized_keys) and reports the useradd/usermod
                 it would run or the diff it would make; absent and
                 group_absent are off (dangerous)
  firewall       check mode only: status and list read the host's nftables
                 (GRID's table inet grid), allow and deny report the rule
                 they would add; remove is off (dangerous)
  exec           off: no programs are registered`,
		Example: `  grid dev
  grid dev --agents 10 --api-addr 127.0.0.1:9000`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if agents < 0 {
				return usageErrorf("--agents must not be negative, got %d", agents)
			}
			logger, err := logs.logger(g.stderr)
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "grid-dev-")
			if err != nil {
				return fmt.Errorf("temp data dir: %w", err)
			}
			defer func() { _ = os.RemoveAll(dir) }()

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopTracing, err := traceexport.StartTracing(ctx, "grid-dev", g.stderr, logger)
			if err != nil {
				return usageErrorf("%w", err)
			}
			defer stopTracing()
			f, err := fleet.Start(ctx, fleet.Options{Agents: agents, APIAddr: apiAddr, DataDir: dir, Logger: logger,
				Agent: fleet.DevAgent})
			if err != nil {
				return fmt.Errorf("start dev fleet: %w", err)
			}
			addr := f.APIURL()
			self := invokedAs()
			_, _ = fmt.Fprintf(g.stdout, `GRID dev fleet: %d agent(s) named node-1…node-%d
  API:    %s
  UI:     %s/ui/ (sign in with the token below; for the browser to trust the
          certificate, import %s as a certificate authority)
  NATS:   %s (TLS; CA %s, also the API's; join token in %s)
  groups: %s
  data:   %s (removed at exit)
  apt, package, systemd and rke2 run in check mode only; see grid dev --help

Paste into another terminal (the token is the admin token):
  export GRID_ADDR=%s GRID_TOKEN=%s GRID_CACERT=%s
then try:
  %s node list
  %s job run --target group:web ping echo --message hi --wait

Ctrl-C stops the fleet.
`, agents, agents, addr, addr, f.CAFile(), f.NATSURL(), f.CAFile(), f.JoinTokenFile(), devGroups(agents), dir, addr, f.AdminToken(), f.CAFile(), self, self)
			<-ctx.Done()
			_, _ = fmt.Fprintln(g.stderr, "stopping the dev fleet…")
			<-f.Done()
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&agents, "agents", 3, "number of agents to run")
	f.StringVar(&apiAddr, "api-addr", "127.0.0.1:8765", "HTTP API listen address (host:port; port 0 picks one)")
	// Quiet by default: the fleet's logs would bury the instructions above.
	logs.register(f, "warn")
	return cmd
}

// devGroups lists the groups the dev fleet's agents are in.
func devGroups(agents int) string {
	var groups []string
	for i := range agents {
		for _, grp := range fleet.DefaultGroups(i) {
			if !slices.Contains(groups, grp) {
				groups = append(groups, grp)
			}
		}
	}
	if len(groups) == 0 {
		return "-"
	}
	return strings.Join(groups, ", ")
}

// invokedAs is how to run this binary again as the user just did: the
// path it was started with when it is a grid binary (./bin/grid after make
// build), else "grid".
func invokedAs() string {
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == "grid" {
		return os.Args[0]
	}
	return "grid"
}
