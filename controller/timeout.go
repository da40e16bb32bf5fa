package controller

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// stopAgentsOnJobTimeout makes the job's timeout stop the work it started,
// as a cancel does: when the run's context ends by the job timeout, the
// agents hear cancel.<job> with the reason, and stop the job's tasks with a
// result that says the job's timeout stopped them. Without it the
// controller gave up on the job while the agents' tasks ran on to their
// own timeouts. The callback runs once, in its own goroutine, when the
// run's context ends for whatever cause.
func (c *Controller) stopAgentsOnJobTimeout(ctx context.Context, id string) {
	context.AfterFunc(ctx, func() {
		if !errors.Is(context.Cause(ctx), errJobTimeout) {
			return
		}
		msg := &nats.Msg{Subject: api.CancelSubject(id), Header: nats.Header{}}
		msg.Header.Set(api.StopReasonHeader, api.StopReasonJobTimeout)
		if err := c.nc.PublishMsg(msg); err != nil {
			c.log.Warn("tell agents the job timed out", "job", id, "err", err)
		}
	})
}

// jobTimeoutMessage is what a node's result says when the job's timeout
// stopped its step.
func jobTimeoutMessage(timeout string) string {
	if d, err := time.ParseDuration(timeout); err == nil {
		return api.StoppedByJobTimeout + " (" + d.String() + ")"
	}
	return api.StoppedByJobTimeout
}

// isJobTimeoutStop reports whether a message on cancel.<job> is the owner's
// announcement of the job's timeout rather than a cancel by request.
func isJobTimeoutStop(m *nats.Msg) bool {
	return m.Header != nil && m.Header.Get(api.StopReasonHeader) == api.StopReasonJobTimeout
}
