package controller

import (
	"context"
	"errors"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// errLostOwnership ends a run whose job another controller has taken over
// (this controller was presumed dead); the new owner finishes it.
var errLostOwnership = errors.New("job taken over by another controller")

// recoverLoop takes over the running jobs of controllers that stopped
// heartbeating or shut down, so a job outlives the controller that started
// it. Controllers compete for each orphan by compare-and-swap on the job's
// owner, so exactly one adopts it.
func (c *Controller) recoverLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.recoverOrphans(ctx)
	}
}

// deadControllers returns the ids of controllers that are offline or whose
// heartbeat is older than ControllerStaleAfter.
func (c *Controller) deadControllers(ctx context.Context) (map[string]bool, error) {
	all, err := c.readControllers(ctx)
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	live := 0
	for _, ci := range all {
		if ci.ID == c.id {
			continue
		}
		if ci.Status != "online" || time.Since(ci.LastSeen) > c.cfg.ControllerStaleAfter.D() {
			dead[ci.ID] = true
		} else {
			live++
		}
	}
	c.livePeers.Store(int32(live))
	return dead, nil
}

// alone reports whether no other controller was alive at the last look
// (every heartbeat interval): then a pending job can only start here.
func (c *Controller) alone() bool { return c.livePeers.Load() == 0 }

func (c *Controller) recoverOrphans(ctx context.Context) {
	dead, err := c.deadControllers(ctx)
	if err != nil || len(dead) == 0 {
		return
	}
	// The index names the candidates without reading every job; adopt
	// reads and claims each by compare-and-swap.
	if c.jobIdx.waitReady(ctx) != nil {
		return
	}
	for _, j := range c.jobIdx.running() {
		if !dead[j.Owner] || c.localRun(j.ID) != nil {
			continue
		}
		select {
		case c.slots <- struct{}{}:
		default:
			return // busy; a peer or a later round takes the rest
		}
		if !c.adopt(ctx, j.ID, j.Owner) {
			<-c.slots
		}
	}
}

// adopt claims a running job from a dead owner and resumes it. It returns
// whether this controller now runs it.
func (c *Controller) adopt(ctx context.Context, id, from string) bool {
	adopted := false
	job, rev, err := c.jobs.mutate(ctx, id, func(j *api.Job) bool {
		// Judged on each try: an earlier try may have lost to a peer.
		adopted = false
		if j.Status != api.JobRunning || j.Owner != from {
			return false
		}
		j.Owner = c.id
		j.UpdatedAt = time.Now().UTC()
		adopted = true
		return true
	})
	if err != nil || !adopted {
		return false
	}
	if err := c.foldStoredResults(ctx, job); err != nil {
		c.log.Warn("read stored results", "job", id, "err", err)
	}
	c.log.Info("took over job from a dead controller", "job", id, "from", from)
	return c.startRun(job, rev)
}
