package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/relay"
)

// siteRelayOptions are the flags of "grid site relay".
type siteRelayOptions struct {
	credential string
	listen     string
	hubs       []string
	dataDir    string
	debug      bool
	logs       logOptions
}

// newSiteRelayCmd is "grid site relay": it runs a site's relay until
// SIGINT or SIGTERM.
func newSiteRelayCmd(g *globals) *cobra.Command {
	o := &siteRelayOptions{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run a site's relay: the NATS server its agents connect to, linked to the hub as a leaf node",
		Long: `Run the relay of a site. The site's agents connect to it (--listen) as they
would to a controller: TLS with the hub's ca.pem, their own key, a join token
for their first enrollment. The relay connects out to the hub's controllers
(their leaf ports, failing over from one to the next) over one TLS link,
authenticated with the site's key from the credential "grid site create"
wrote.

Each agent gets exactly the rights it would have at a controller: an admitted
one its own node's, groups' and site's commands and its own reports; any
other key only its enrollment request, which the relay passes on to the hub.
The relay learns which keys are admitted from the hub, every few seconds;
with --data-dir it keeps the last list, so that restarted while the link is
cut it still admits its agents.

The relay stops on SIGINT or SIGTERM.`,
		Example: `  grid site relay --credential paris.site.json --listen 0.0.0.0:4222
  grid site relay --credential /etc/grid/paris.site.json --listen 10.1.0.5:4222 \
      --data-dir /var/lib/grid-relay --hub tls://c1.example.com:7422 --hub tls://c2.example.com:7422`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			logger, err := o.logs.logger(g.stderr)
			if err != nil {
				return err
			}
			cfg := relay.DefaultConfig()
			cfg.CredentialFile, cfg.Listen, cfg.HubURLs, cfg.DataDir = o.credential, o.listen, o.hubs, o.dataDir
			cfg.Logger, cfg.Debug = logger, o.debug
			if err := cfg.Validate(); err != nil {
				return usageErrorf("site relay: %w", err)
			}
			r, err := relay.New(cfg)
			if err != nil {
				return fmt.Errorf("site relay: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := r.Start(ctx); err != nil {
				return fmt.Errorf("start site relay: %w", err)
			}
			<-ctx.Done()
			logger.Info("shutting down")
			r.Close()
			return nil
		}),
	}
	def := relay.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&o.credential, "credential", "", "the site's credential, as 'grid site create' wrote it (keep it like a private key)")
	f.StringVar(&o.listen, "listen", def.Listen, "where the site's agents connect (host:port)")
	f.StringArrayVar(&o.hubs, "hub", nil, "a controller's leaf URL (tls://host:port), repeated for each; default: the credential's")
	f.StringVar(&o.dataDir, "data-dir", "", "keep the last roster of the site's enrollments here, for a restart while the link is cut")
	f.BoolVar(&o.debug, "nats-debug", false, "log the embedded NATS server's own messages")
	o.logs.register(f, "info")
	return serverCommand(cmd, "The relay talks to the hub over its leaf link (--hub), not to the API.")
}
