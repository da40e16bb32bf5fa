package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// A job claimed (or adopted) while the controller shuts down must not start
// a run that outlives it: a run started once stopping began would be
// neither cancelled nor waited for before the connection drains. Runs that
// did start are cancelled and waited for before Done closes.
func TestClaimDuringShutdownStartsNoStrayRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	cfg.FlushInterval = config.Duration(20 * time.Millisecond)
	cfg.MemoryLimit = 0
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A job on a node that never answers: its run lives until cancelled.
	job := func(id string) *api.Job {
		now := time.Now().UTC()
		return &api.Job{ID: id, Status: api.JobRunning, Owner: c.id, CreatedAt: now, UpdatedAt: now,
			Target:   api.Target{Scope: api.ScopeNode, Value: "ghost"},
			Expected: []string{"ghost"},
			Tasks:    []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1h"}}}}
	}
	if !c.startRun(job("before"), 0) {
		t.Fatal("a run was refused before shutdown")
	}
	before := c.localRun("before")

	cancel()
	<-c.stopping // shutdown has begun
	// What claim and adopt do once they have won the job.
	startedInWindow := c.startRun(job("window"), 0)
	window := c.localRun("window")

	select {
	case <-c.Done():
	case <-time.After(time.Minute): // a hang guard, not a speed bound
		t.Fatal("controller did not stop")
	}
	select {
	case <-before.done:
	default:
		t.Error("a run started before shutdown outlived Done")
	}
	if window != nil {
		select {
		case <-window.done:
		default:
			t.Errorf("a run started during shutdown (started=%v) outlived Done", startedInWindow)
		}
	}
	if startedInWindow {
		t.Error("startRun started a run after shutdown began")
	}
}
