package controller

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// maxDelayedNak bounds how long a waiting job's request is put back at a
// time, so a clock step or a long not_before is looked at again now and
// then.
const maxDelayedNak = 10 * time.Minute

// untilDue is how long a waiting job still has to wait (0 when it may start,
// or is not waiting).
func untilDue(j *api.Job) time.Duration {
	if j.Status != api.JobWaiting || j.NotBefore == nil {
		return 0
	}
	return max(time.Until(*j.NotBefore), 0)
}

// putBackUntilDue returns a waiting job's request to its queue until the
// job's not_before: the requests stream's consumer redelivers it then, to
// whichever controller has a free slot. The wait lives in the consumer's
// replicated state, so it survives a restart of every controller and the
// failover of a server.
func (c *Controller) putBackUntilDue(m jetstream.Msg, id string, d time.Duration) {
	d = min(d, maxDelayedNak)
	if err := m.NakWithDelay(d); err != nil {
		c.log.Warn("put back a waiting job's request", "job", id, "err", err)
	}
}
