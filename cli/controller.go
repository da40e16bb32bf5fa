package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry/traceexport"
)

// controllerOptions are the flags of "grid controller".
type controllerOptions struct {
	configFile string
	flags      controller.Config
	logs       logOptions
}

func newControllerCommand(g *globals) *cobra.Command {
	return controllerCommand(g, &controllerOptions{})
}

func controllerCommand(g *globals, o *controllerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run a controller: embedded NATS JetStream, scheduler and HTTP API",
		Long: `Run a controller. Settings come from the defaults, then the --config YAML
file, then the flags given on the command line, each overriding the one
before. The controller stops on SIGINT or SIGTERM.

Every API route but /healthz and /readyz wants a bearer token. At its first
start the controller writes an admin token to DATA_DIR/admin-token (mode
0600) and reuses it after; "grid token create" makes more. In a lab
(--insecure) --anonymous-role lets clients without a token in, with that
role.`,
		Example: `  grid controller --data-dir /var/lib/grid
  grid controller --config /etc/grid/controller.yaml --api-addr 0.0.0.0:8765
  grid controller --name c1 --cluster-name grid --cluster-addr 0.0.0.0:6222 \
      --routes nats://c2:6222,nats://c3:6222`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			logger, err := o.logs.logger(g.stderr)
			if err != nil {
				return err
			}
			cfg, err := controllerConfig(cmd.Flags(), o.configFile, &o.flags)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			if err := cfg.Validate(); err != nil {
				return usageErrorf("controller config: %w", err)
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopTracing, err := traceexport.StartTracing(ctx, "grid-controller", g.stderr, logger)
			if err != nil {
				return usageErrorf("%w", err)
			}
			defer stopTracing()
			c, err := controller.New(cfg)
			if err != nil {
				return fmt.Errorf("controller: %w", err)
			}
			if limit, why := cfg.RunMemoryLimit(ctx, os.Getenv, logger, c.Busy); limit > 0 {
				logger.Info("soft memory limit", "limit", controller.ByteSize(limit).String(), "at_least", "twice the live heap; while jobs run, twice the live heap plus stacks plus 64MiB")
			} else {
				logger.Info("no soft memory limit set by grid", "because", why)
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
	f.StringVar(&o.configFile, "config", "", "YAML config file")
	f.StringVar(&o.flags.APIAddr, "api-addr", def.APIAddr, "HTTPS API listen address (host:port)")
	f.StringVar(&o.flags.NATSAddr, "nats-addr", def.NATSAddr, "embedded NATS listen address (host:port)")
	f.StringVar(&o.flags.DataDir, "data-dir", def.DataDir, "directory for JetStream data and the controller id")
	f.StringVar(&o.flags.Name, "name", def.Name, "controller name (default: an id kept in the data dir)")
	f.IntVar(&o.flags.MaxConcurrent, "max-concurrent", def.MaxConcurrent, "jobs this controller runs at once")
	f.IntVar(&o.flags.MaxPending, "max-pending", def.MaxPending, "jobs waiting to run before submissions get 429")
	f.StringSliceVar(&o.flags.NATSURLs, "nats-url", def.NATSURLs, "connect to these NATS servers (comma-separated) instead of embedding one")
	f.StringVar(&o.flags.ClusterName, "cluster-name", def.ClusterName, "join the embedded NATS server to this cluster (with --cluster-addr and --routes)")
	f.StringVar(&o.flags.ClusterAddr, "cluster-addr", def.ClusterAddr, "embedded NATS cluster listen address for routes from peers (host:port)")
	f.StringVar(&o.flags.LeafAddr, "leaf-addr", def.LeafAddr, "accept sites' relays (NATS leaf connections) on this host:port (off when empty; see grid site)")
	f.StringVar(&o.flags.LeafAdvertise, "leaf-advertise", def.LeafAdvertise, "the URL sites' credentials name for this controller's leaf port (default tls://<leaf-addr>)")
	f.StringSliceVar(&o.flags.Routes, "routes", def.Routes, "peers' cluster addresses, comma-separated (nats://host:port,...)")
	f.IntVar(&o.flags.Replicas, "replicas", def.Replicas, "replicas of every stream and bucket; 0 chooses: 1 on a single server, min(3, servers named by --routes plus this one) in a cluster")
	o.flags.MemoryLimit = def.MemoryLimit
	f.Var(&o.flags.MemoryLimit, "memory-limit", "soft memory limit of the Go runtime for this process (raised to twice the live heap, and while jobs run to that plus stacks plus 64MiB), e.g. 300MiB; 0 for none (GOMEMLIMIT or GOGC in the environment take precedence)")
	f.StringVar(&o.flags.DebugAddr, "debug-addr", def.DebugAddr, "serve the Go profiler (/debug/pprof/) and runtime memory figures (/debug/memory) on this host:port (off when empty)")
	f.BoolVar(&o.flags.Insecure, "insecure", false, "run NATS without TLS or authentication and the API over plain HTTP (labs only: anyone who reaches NATS controls every node)")
	f.StringVar((*string)(&o.flags.AnonymousRole), "anonymous-role", "", "with --insecure only: let requests without a token in with this role (read, operator or admin), answering the job routes in the seed's status set; empty: every request needs a token")
	f.StringVar(&o.flags.APITLSCert, "api-tls-cert", "", "the API's HTTPS certificate (PEM; default: issued by DATA_DIR/ca.pem)")
	f.StringVar(&o.flags.APITLSKey, "api-tls-key", "", "the key of --api-tls-cert (PEM)")
	f.StringVar(&o.flags.APIClientCA, "api-client-ca", "", "require API clients to present a certificate of this CA (PEM file; mTLS)")
	o.flags.AutoAdmit = new(bool)
	f.BoolVar(o.flags.AutoAdmit, "auto-admit", true, "admit an agent with a valid join token at once; false keeps it pending until 'grid node approve'")
	f.StringVar(&o.flags.NATSCreds, "nats-creds", "", "credentials file for --nats-url (.creds or an NKey seed)")
	f.StringVar(&o.flags.NATSCAFile, "nats-ca-file", "", "CA of the --nats-url servers' certificates")
	o.logs.register(f, "info")
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

// controllerConfig layers the config: defaults, then the file, then the
// flags that were given.
func controllerConfig(fs flagChanged, configFile string, flags *controller.Config) (controller.Config, error) {
	cfg := controller.DefaultConfig()
	if configFile != "" {
		if err := controller.LoadConfig(configFile, &cfg); err != nil {
			return cfg, usageErrorf("%w", err)
		}
	}
	setIfChanged(fs, "api-addr", &cfg.APIAddr, flags.APIAddr)
	setIfChanged(fs, "nats-addr", &cfg.NATSAddr, flags.NATSAddr)
	setIfChanged(fs, "data-dir", &cfg.DataDir, flags.DataDir)
	setIfChanged(fs, "name", &cfg.Name, flags.Name)
	setIfChanged(fs, "max-concurrent", &cfg.MaxConcurrent, flags.MaxConcurrent)
	setIfChanged(fs, "max-pending", &cfg.MaxPending, flags.MaxPending)
	setIfChanged(fs, "nats-url", &cfg.NATSURLs, flags.NATSURLs)
	setIfChanged(fs, "cluster-name", &cfg.ClusterName, flags.ClusterName)
	setIfChanged(fs, "cluster-addr", &cfg.ClusterAddr, flags.ClusterAddr)
	setIfChanged(fs, "leaf-addr", &cfg.LeafAddr, flags.LeafAddr)
	setIfChanged(fs, "leaf-advertise", &cfg.LeafAdvertise, flags.LeafAdvertise)
	setIfChanged(fs, "routes", &cfg.Routes, flags.Routes)
	setIfChanged(fs, "replicas", &cfg.Replicas, flags.Replicas)
	setIfChanged(fs, "debug-addr", &cfg.DebugAddr, flags.DebugAddr)
	setIfChanged(fs, "memory-limit", &cfg.MemoryLimit, flags.MemoryLimit)
	setIfChanged(fs, "insecure", &cfg.Insecure, flags.Insecure)
	setIfChanged(fs, "anonymous-role", &cfg.AnonymousRole, flags.AnonymousRole)
	setIfChanged(fs, "api-tls-cert", &cfg.APITLSCert, flags.APITLSCert)
	setIfChanged(fs, "api-tls-key", &cfg.APITLSKey, flags.APITLSKey)
	setIfChanged(fs, "api-client-ca", &cfg.APIClientCA, flags.APIClientCA)
	setIfChanged(fs, "nats-creds", &cfg.NATSCreds, flags.NATSCreds)
	setIfChanged(fs, "nats-ca-file", &cfg.NATSCAFile, flags.NATSCAFile)
	if fs.Changed("auto-admit") {
		cfg.AutoAdmit = flags.AutoAdmit
	}
	return cfg, nil
}
