package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Two controllers share one NATS server. The one running a job crashes
// mid-job; the other notices its heartbeat stop, takes the job over by
// compare-and-swap and finishes it without re-running finished steps.
func TestPeerTakesOverJobOfCrashedController(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b"}, []string{"node-1", "node-2"}, func(cfg *controller.Config) {
		cfg.ControllerStaleAfter = config.Duration(time.Second)
		cfg.FlushInterval = config.Duration(20 * time.Millisecond)
	})
	ctls, clients := p.ctls, p.clients
	cl := clients["ctl-a"]
	waitFor(t, 10*time.Second, "both nodes online", func() bool {
		n, err := cl.ListNodes(ctx)
		return err == nil && len(n) == 2 && n[0].Status == api.NodeOnline && n[1].Status == api.NodeOnline
	})
	j, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "before"}},
		{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1500ms"}},
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "after"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	waitFor(t, 10*time.Second, "the sleep step to run", func() bool {
		cur, err := cl.GetJob(ctx, j.ID)
		if err != nil || nodeStatus(cur, 1, "node-1") != api.StepRunning {
			return false
		}
		owner = cur.Owner
		return true
	})
	survivor := "ctl-a"
	if owner == "ctl-a" {
		survivor = "ctl-b"
	}
	ctls[owner].Kill()

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	done, err := clients[survivor].WaitJob(wctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.JobCompleted || done.Owner != survivor {
		t.Fatalf("job %s owned by %s (%s), want completed by %s", done.Status, done.Owner, done.Error, survivor)
	}
	for _, n := range []string{"node-1", "node-2"} {
		if r := done.Results.Node(0, n); r.Attempts != 1 {
			t.Fatalf("step 0 on %s re-ran after the takeover: %+v", n, r)
		}
		if r := done.Results.Node(2, n); r.Output != "after" {
			t.Fatalf("step 2 on %s: %+v", n, r)
		}
	}
}
