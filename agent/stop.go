package agent

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// errJobTimedOut marks a task stopped because its job ran past the job's
// timeout: the owning controller announces that on cancel.<job> with the
// reason api.StopReasonJobTimeout. Such a task failed (the job did not
// finish in time) but was not cancelled by anyone.
var errJobTimedOut = errors.New(api.StoppedByJobTimeout)

// stopCause is why a message on cancel.<job> stops the job's tasks.
func stopCause(job string, msg *nats.Msg) error {
	if msg.Header != nil && msg.Header.Get(api.StopReasonHeader) == api.StopReasonJobTimeout {
		return fmt.Errorf("job %s: %w", job, errJobTimedOut)
	}
	return cancelledErr(job)
}
