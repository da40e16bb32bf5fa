package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// idlePoll is how often an idle scheduler looks at the queues without being
// told of a submission: a request put back with a delay (a claim that
// could not read its job yet) becomes due without a publish.
const idlePoll = time.Second

// requestStored paces the looks at the queues after a publish was heard
// but the pull found nothing: the core subscription hears a request as it
// is published, and the stream stores it a moment later (after its
// replicas agree, in a cluster), so the first look can come too early.
// Without these looks such a request would wait for idlePoll.
var requestStored = retry.Policy{Initial: 2 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond, Tries: 8}

// schedule pulls submitted jobs while this controller has capacity and
// starts them, higher priorities first.
//
// Each priority has its own subject (request.<p>.<job>) and durable
// consumer on the requests stream (scheduler-p<p>), shared by every
// controller of the cluster. A controller with a free slot asks the
// consumers from the highest priority down, without waiting, and takes the
// first requests it finds; so whichever controller has the slot, the next
// job to start is the oldest of the highest priority waiting. While nothing
// waits it sleeps until a request is published (a core subscription hears
// every publish the stream stores) or idlePoll passes.
func (c *Controller) schedule(ctx context.Context) {
	queues, err := c.priorityQueues(ctx)
	if err != nil {
		return // ctx ended
	}
	kick := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(api.SubjectRequests, func(*nats.Msg) {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	if err != nil {
		c.log.Warn("subscribe to requests; polling only", "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	// Claims run concurrently (each is a few KV round trips), so one slow
	// claim does not hold up the queue; schedule returns once they are done.
	var claims sync.WaitGroup
	defer claims.Wait()
	// early counts the looks that found nothing since a publish was heard;
	// while it is below requestStored's tries, the next look comes soon.
	early := requestStored.Tries
	for ctx.Err() == nil {
		// Take a slot before taking work, so a busy controller leaves
		// requests to its peers; then as many more free slots as a batch
		// holds, so a burst of submissions is fetched in one pull.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < fetchBatch {
			select {
			case c.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		got := c.pullByPriority(ctx, queues, n, &claims)
		for range n - got {
			<-c.slots
		}
		if got > 0 {
			continue
		}
		wait := idlePoll
		if early < requestStored.Tries {
			early++
			wait = requestStored.Delay(early)
		}
		select {
		case <-kick:
			early = 0
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// pullByPriority fetches up to n requests, highest priority first, and
// starts a claim for each. It returns how many it fetched; a claim that
// does not start a run gives its slot back itself.
func (c *Controller) pullByPriority(ctx context.Context, queues []jetstream.Consumer, n int, claims *sync.WaitGroup) int {
	got := 0
	for _, q := range queues {
		if got == n || ctx.Err() != nil {
			break
		}
		batch, err := q.FetchNoWait(n - got)
		if err != nil {
			if !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
				c.log.Warn("fetch requests", "err", err)
			}
			continue
		}
		for m := range batch.Messages() {
			got++
			claims.Go(func() {
				if !c.claim(ctx, m) {
					<-c.slots
				}
			})
		}
	}
	return got
}

// priorityQueues creates (or finds) the scheduler's consumers, highest
// priority first. The first consumer of all ("scheduler", now filtered to
// request.<job>) still drains requests queued before priorities existed,
// at the default priority.
func (c *Controller) priorityQueues(ctx context.Context) ([]jetstream.Consumer, error) {
	// The first consumer first: a stream made before priorities has it
	// without a filter, which would overlap every priority's consumer (a
	// work-queue stream refuses that) until it is narrowed.
	legacy, err := c.ensureSchedulerConsumer(ctx, schedulerConsumer, "request.*")
	if err != nil {
		return nil, err
	}
	var out []jetstream.Consumer
	for p := api.MaxPriority; p >= api.MinPriority; p-- {
		q, err := c.ensureSchedulerConsumer(ctx, fmt.Sprintf("%s-p%d", schedulerConsumer, p), api.PriorityRequests(p))
		if err != nil {
			return nil, err
		}
		out = append(out, q)
		if p == api.DefaultPriority {
			out = append(out, legacy)
		}
	}
	return out, nil
}
