package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

func newControllerCommand(g *globals) *cobra.Command {
	var (
		configFile string
		flags      controller.Config
		logs       logOptions
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run a controller: embedded NATS JetStream, scheduler and HTTP API",
		Long: `Run a controller. Settings come from the defaults, then the --config YAML
file, then the flags given on the command line, each overriding the one
before. The controller stops on SIGINT or SIGTERM.`,
		Example: `  grid controller --data-dir /var/lib/grid
  grid controller --config /etc/grid/controller.yaml --api-addr 0.0.0.0:8765`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(g.stderr)
			if err != nil {
				return err
			}
			cfg := controller.DefaultConfig()
			if configFile != "" {
				if err := controller.LoadConfig(configFile, &cfg); err != nil {
					return usageErrorf("%w", err)
				}
			}
			fs := cmd.Flags()
			setIfChanged(fs, "api-addr", &cfg.APIAddr, flags.APIAddr)
			setIfChanged(fs, "nats-addr", &cfg.NATSAddr, flags.NATSAddr)
			setIfChanged(fs, "data-dir", &cfg.DataDir, flags.DataDir)
			setIfChanged(fs, "name", &cfg.Name, flags.Name)
			setIfChanged(fs, "max-concurrent", &cfg.MaxConcurrent, flags.MaxConcurrent)
			setIfChanged(fs, "max-pending", &cfg.MaxPending, flags.MaxPending)
			cfg.Logger = logger
			if err := cfg.Validate(); err != nil {
				return usageErrorf("controller config: %w", err)
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopTracing, err := telemetry.StartTracing(ctx, "grid-controller", g.stderr, logger)
			if err != nil {
				return usageErrorf("%w", err)
			}
			defer stopTracing()
			c, err := controller.New(cfg)
			if err != nil {
				return fmt.Errorf("controller: %w", err)
			}
			if err := c.Start(ctx); err != nil {
				return fmt.Errorf("start controller: %w", err)
			}
			select {
			case <-ctx.Done():
				logger.Info("shutting down")
			case <-c.Done():
			}
			<-c.Done()
			return nil
		}),
	}
	def := controller.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML config file")
	f.StringVar(&flags.APIAddr, "api-addr", def.APIAddr, "HTTP API listen address (host:port)")
	f.StringVar(&flags.NATSAddr, "nats-addr", def.NATSAddr, "embedded NATS listen address (host:port)")
	f.StringVar(&flags.DataDir, "data-dir", def.DataDir, "directory for JetStream data and the controller id")
	f.StringVar(&flags.Name, "name", def.Name, "controller name (default: an id kept in the data dir)")
	f.IntVar(&flags.MaxConcurrent, "max-concurrent", def.MaxConcurrent, "jobs this controller runs at once")
	f.IntVar(&flags.MaxPending, "max-pending", def.MaxPending, "jobs waiting to run before submissions get 429")
	logs.register(f, "info")
	return cmd
}

// flagChanged is the part of pflag.FlagSet setIfChanged needs.
type flagChanged interface{ Changed(name string) bool }

// setIfChanged applies a flag over a config value only when the flag was
// given, so a flag's default never overrides the config file.
func setIfChanged[T any](fs flagChanged, name string, dst *T, v T) {
	if fs.Changed(name) {
		*dst = v
	}
}
