package bus

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Connect dials NATS with reconnects that never give up: an agent or
// controller outlives a server restart. urls may be comma-separated.
func Connect(name string, urls []string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("connect NATS: no server URL")
	}
	log = config.Logger(log)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(32 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect NATS %s: %w", strings.Join(urls, ","), err)
	}
	return nc, nil
}
