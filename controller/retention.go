package controller

import (
	"context"
	"time"
)

// sweepJobs removes finished jobs once they are older than job_retention,
// so the jobs bucket holds what is running or pending plus at most the
// retention's worth of history. Every controller sweeps; removing a job a
// peer removed already is harmless.
func (c *Controller) sweepJobs(ctx context.Context) {
	retention := c.cfg.JobRetention.D()
	every := min(max(retention/10, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	var lastMarkers time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range c.jobIdx.expired(time.Now().Add(-retention)) {
			if ctx.Err() != nil {
				return
			}
			// Purge drops the job's value; the watch then drops it from
			// every controller's index.
			if err := c.jobs.kv.Purge(ctx, id); err != nil {
				c.log.Warn("remove expired job", "job", id, "err", err)
				continue
			}
			// Left only by a job that never ran (cancelled while pending).
			c.dropSecrets(id)
			c.log.Debug("removed expired job", "job", id)
		}
		// The purge markers themselves go after a while (the KV default
		// keeps them 30 minutes).
		if time.Since(lastMarkers) > 10*time.Minute {
			lastMarkers = time.Now()
			if err := c.jobs.kv.PurgeDeletes(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("drop purge markers of removed jobs", "err", err)
			}
		}
	}
}
