package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Two controllers share one NATS server. The one running a job crashes
// mid-job; the other notices its heartbeat stop, takes the job over by
// compare-and-swap and finishes it without re-running finished steps.
func TestPeerTakesOverJobOfCrashedController(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, err := bus.StartServer(ctx, bus.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()

	ctls := map[string]*controller.Controller{}
	clients := map[string]*api.Client{}
	for _, name := range []string{"ctl-a", "ctl-b"} {
		cfg := controller.DefaultConfig()
		cfg.Name, cfg.DataDir, cfg.APIAddr, cfg.NATSURLs = name, t.TempDir(), "127.0.0.1:0", []string{url}
		cfg.HeartbeatInterval = config.Duration(200 * time.Millisecond)
		cfg.ControllerStaleAfter = config.Duration(time.Second)
		cfg.FlushInterval = config.Duration(20 * time.Millisecond)
		c, err := controller.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cctx, stop := context.WithCancel(ctx)
		if err := c.Start(cctx); err != nil {
			t.Fatal(err)
		}
		defer func() { stop(); <-c.Done() }()
		ctls[name] = c
		clients[name], _ = api.NewClient(api.ClientConfig{Address: c.APIURL()})
	}
	for _, name := range []string{"node-1", "node-2"} {
		acfg := agent.DefaultConfig()
		acfg.Name, acfg.NATSURLs, acfg.DataDir = name, []string{url}, t.TempDir()
		acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
		a, err := agent.New(acfg)
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		if err := a.Start(actx); err != nil {
			t.Fatal(err)
		}
		defer func() { stop(); <-a.Done() }()
	}
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
