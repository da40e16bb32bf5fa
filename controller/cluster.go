package controller

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// ensureSchedulerConsumer creates (or finds) the durable consumer every
// controller pulls submitted jobs from, retrying while the cluster elects
// leaders: a controller that gave up here would never run a job. Replicas is
// left at 0, which makes the consumer inherit the stream's replicas (R3 in a
// cluster of three), so it survives the loss of one server with its state.
//
// name and filter pick one of the consumers: one per priority
// (request.<p>.*) and the first one, which keeps requests queued before
// priorities (request.*).
func (c *Controller) ensureSchedulerConsumer(ctx context.Context, name, filter string) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := retry.Do(ctx, retry.Policy{Initial: 250 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second}, func(try int) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		cons, err = c.js.CreateOrUpdateConsumer(cctx, api.StreamRequests, jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: filter,
			AckPolicy:     jetstream.AckExplicitPolicy,
			// A request fetched by a controller that dies before claiming
			// it goes to another after AckWait. Claims are a few KV round
			// trips and compare-and-swap, so a slow one redelivered meanwhile
			// is harmless.
			AckWait:       10 * time.Second,
			MaxAckPending: 10000,
		})
		if err != nil && ctx.Err() == nil && (try == 1 || try%10 == 0) {
			c.log.Warn("scheduler consumer; retrying", "err", err)
		}
		return err
	})
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return cons, err
}
