// Package agentcmd is an agent's start-up, shared by "grid agent" and the
// slim grid-agent binary so the two take the same flags, config file and
// environment: the flags, the config layered from them, and the run until
// SIGINT or SIGTERM.
//
// It must stay light: grid-agent is built from it and is meant to hold only
// the agent and its backends. Nothing here may import the controller, the
// embedded NATS server, the Terraform SDK or the OpenTelemetry exporters
// (a caller that wants traces passes StartTracing).
package agentcmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/internal/logflags"
)

// JoinTokenEnv is read for the join token when neither the flags nor the
// config file give one.
const JoinTokenEnv = "GRID_JOIN_TOKEN" //nolint:gosec // the variable's name, not a credential

// Options are an agent's command-line settings.
type Options struct {
	// ConfigFile is the --config YAML file; empty means none.
	ConfigFile string
	// Logs are --log-level and --log-format.
	Logs logflags.Options

	flags agent.Config
}

// Register adds the agent's flags to fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	def := agent.DefaultConfig()
	fs.StringVar(&o.ConfigFile, "config", "", "YAML config file")
	fs.StringVar(&o.flags.Name, "name", def.Name, "node id (default: from the config or the host)")
	fs.StringSliceVar(&o.flags.Groups, "groups", def.Groups, "groups the node is in, comma-separated (web,web.prod)")
	fs.StringSliceVar(&o.flags.NATSURLs, "nats", def.NATSURLs, "NATS server URLs, comma-separated")
	fs.StringVar(&o.flags.DataDir, "data-dir", def.DataDir, "directory for agent state")
	fs.StringSliceVar(&o.flags.Allow, "allow", def.Allow, "backend actions to enable: backend, backend.action or * (comma-separated); dangerous ones only when named")
	fs.StringSliceVar(&o.flags.CheckOnly, "check-only", def.CheckOnly, "backend actions to run in check mode only, changing nothing: backend, backend.action or * (comma-separated)")
	fs.StringVar(&o.flags.MetricsAddr, "metrics-addr", def.MetricsAddr, "serve /metrics, /healthz and /readyz on this address (host:port); off when empty")
	fs.StringVar(&o.flags.CAFile, "ca-file", def.CAFile, "CA of the controllers' certificates (a controller's DATA_DIR/ca.pem); set, the agent connects with TLS and its own key and enrolls")
	fs.StringVar(&o.flags.JoinToken, "join-token", "", "join token for the first enrollment (a controller's DATA_DIR/join-token; or "+JoinTokenEnv+")")
	fs.StringVar(&o.flags.JoinTokenFile, "join-token-file", "", "file holding the join token")
	o.Logs.Register(fs, "info")
}

// Config layers the agent's config: the defaults, then the config file,
// then the flags fs saw given, then the join token from getenv when none
// was set. It is validated; every error is the operator's input to fix.
func (o *Options) Config(fs *pflag.FlagSet, getenv func(string) string) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	if o.ConfigFile != "" {
		if err := agent.LoadConfig(o.ConfigFile, &cfg); err != nil {
			return cfg, err
		}
	}
	setIfChanged(fs, "name", &cfg.Name, o.flags.Name)
	setIfChanged(fs, "groups", &cfg.Groups, o.flags.Groups)
	setIfChanged(fs, "nats", &cfg.NATSURLs, o.flags.NATSURLs)
	setIfChanged(fs, "data-dir", &cfg.DataDir, o.flags.DataDir)
	setIfChanged(fs, "allow", &cfg.Allow, o.flags.Allow)
	setIfChanged(fs, "check-only", &cfg.CheckOnly, o.flags.CheckOnly)
	setIfChanged(fs, "metrics-addr", &cfg.MetricsAddr, o.flags.MetricsAddr)
	setIfChanged(fs, "ca-file", &cfg.CAFile, o.flags.CAFile)
	setIfChanged(fs, "join-token", &cfg.JoinToken, o.flags.JoinToken)
	setIfChanged(fs, "join-token-file", &cfg.JoinTokenFile, o.flags.JoinTokenFile)
	if cfg.JoinToken == "" && cfg.JoinTokenFile == "" {
		cfg.JoinToken = getenv(JoinTokenEnv)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("agent config: %w", err)
	}
	agent.ApplyProcessSettings(cfg)
	return cfg, nil
}

func setIfChanged[T any](fs *pflag.FlagSet, name string, dst *T, v T) {
	if fs.Changed(name) {
		*dst = v
	}
}

// StartTracing sets up trace export for service and returns the function
// that flushes and stops it (internal/telemetry/traceexport.StartTracing).
type StartTracing func(ctx context.Context, service string, stderr io.Writer, log *slog.Logger) (stop func(), err error)

// Hooks are what the two binaries do differently around the same run.
type Hooks struct {
	// Tracing, when set, is started before the agent.
	Tracing StartTracing
	// Registered, when set, runs once the agent has registered.
	Registered func()
}

// ErrUsage marks an error that is the operator's input to fix (exit 2), as
// opposed to a failure to run.
type ErrUsage struct{ Err error }

func (e *ErrUsage) Error() string { return e.Err.Error() }
func (e *ErrUsage) Unwrap() error { return e.Err }

// Run starts an agent with cfg and blocks until ctx ends or SIGINT or
// SIGTERM arrives, then lets running tasks finish and deregisters (the
// agent's own shutdown).
func Run(ctx context.Context, cfg agent.Config, logger *slog.Logger, stderr io.Writer, hooks Hooks) error {
	cfg.Logger = logger
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if hooks.Tracing != nil {
		stopTracing, err := hooks.Tracing(ctx, "grid-agent", stderr, logger)
		if err != nil {
			return &ErrUsage{Err: err}
		}
		defer stopTracing()
	}
	a, err := agent.New(cfg)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// Start returns once the node is registered.
	if err := a.Start(ctx); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	logger.Info("agent running", "name", cfg.Name, "groups", cfg.Groups, "version", agent.Version)
	if hooks.Registered != nil {
		hooks.Registered()
	}
	<-a.Done()
	if err := a.Err(); err != nil {
		return fmt.Errorf("agent stopped: %w", err)
	}
	return nil
}
