package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

func newAgentCommand(g *globals) *cobra.Command {
	var (
		configFile string
		flags      agent.Config
		logs       logOptions
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent: register with the fleet and run backend actions",
		Long: `Run an agent on a host. Settings come from the defaults, then the --config
YAML file, then the flags given on the command line, each overriding the one
before. The agent stops taking commands on SIGINT or SIGTERM, lets running
tasks finish and deregisters.`,
		Example: `  grid agent --name web-1 --groups web,web.prod --nats nats://10.0.0.1:4222
  grid agent --config /etc/grid/agent.yaml --allow ping,apt,systemd.restart`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(g.stderr)
			if err != nil {
				return err
			}
			cfg := agent.DefaultConfig()
			if configFile != "" {
				if err := agent.LoadConfig(configFile, &cfg); err != nil {
					return usageErrorf("%w", err)
				}
			}
			fs := cmd.Flags()
			setIfChanged(fs, "name", &cfg.Name, flags.Name)
			setIfChanged(fs, "groups", &cfg.Groups, flags.Groups)
			setIfChanged(fs, "nats", &cfg.NATSURLs, flags.NATSURLs)
			setIfChanged(fs, "data-dir", &cfg.DataDir, flags.DataDir)
			setIfChanged(fs, "allow", &cfg.Allow, flags.Allow)
			setIfChanged(fs, "check-only", &cfg.CheckOnly, flags.CheckOnly)
			setIfChanged(fs, "metrics-addr", &cfg.MetricsAddr, flags.MetricsAddr)
			cfg.Logger = logger
			if err := cfg.Validate(); err != nil {
				return usageErrorf("agent config: %w", err)
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopTracing, err := telemetry.StartTracing(ctx, "grid-agent", g.stderr, logger)
			if err != nil {
				return usageErrorf("%w", err)
			}
			defer stopTracing()
			a, err := agent.New(cfg)
			if err != nil {
				return fmt.Errorf("agent: %w", err)
			}
			if err := a.Start(ctx); err != nil {
				return fmt.Errorf("start agent: %w", err)
			}
			logger.Info("agent running", "name", cfg.Name, "groups", cfg.Groups)
			<-a.Done()
			return nil
		}),
	}
	def := agent.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML config file")
	f.StringVar(&flags.Name, "name", def.Name, "node id (default: from the config or the host)")
	f.StringSliceVar(&flags.Groups, "groups", def.Groups, "groups the node is in, comma-separated (web,web.prod)")
	f.StringSliceVar(&flags.NATSURLs, "nats", def.NATSURLs, "NATS server URLs, comma-separated")
	f.StringVar(&flags.DataDir, "data-dir", def.DataDir, "directory for agent state")
	f.StringSliceVar(&flags.Allow, "allow", def.Allow, "backend actions to enable: backend, backend.action or * (comma-separated); dangerous ones only when named")
	f.StringSliceVar(&flags.CheckOnly, "check-only", def.CheckOnly, "backend actions to run in check mode only, changing nothing: backend, backend.action or * (comma-separated)")
	f.StringVar(&flags.MetricsAddr, "metrics-addr", def.MetricsAddr, "serve /metrics, /healthz and /readyz on this address (host:port); off when empty")
	logs.register(f, "info")
	return cmd
}
