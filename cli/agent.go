package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/agent/agentcmd"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry/traceexport"
)

// newAgentCommand is "grid agent". Its flags, config layering and run are
// agentcmd's, shared with the slim grid-agent binary (cmd/grid-agent).
func newAgentCommand(g *globals) *cobra.Command {
	var opts agentcmd.Options
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent: register with the fleet and run backend actions",
		Long: `Run an agent on a host. Settings come from the defaults, then the --config
YAML file, then the flags given on the command line, each overriding the one
before. The agent stops taking commands on SIGINT or SIGTERM, lets running
tasks finish and deregisters.

The grid-agent binary (package grid-agent) runs the same agent with the same
flags and holds nothing else.`,
		Example: `  grid agent --name web-1 --groups web,web.prod --nats nats://10.0.0.1:4222 \
      --data-dir /var/lib/grid --ca-file /etc/grid/ca.pem --join-token-file /etc/grid/join-token
  grid agent --config /etc/grid/agent.yaml --allow ping,apt,systemd.restart`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			logger, err := opts.Logs.Logger(g.stderr)
			if err != nil {
				return usageErrorf("%w", err)
			}
			cfg, err := opts.Config(cmd.Flags(), os.Getenv)
			if err != nil {
				return usageErrorf("%w", err)
			}
			err = agentcmd.Run(cmd.Context(), cfg, logger, g.stderr, agentcmd.Hooks{Tracing: traceexport.StartTracing})
			if ue := (*agentcmd.ErrUsage)(nil); errors.As(err, &ue) {
				return usageErrorf("%w", ue.Err)
			}
			return err
		}),
	}
	opts.Register(cmd.Flags())
	return cmd
}
