package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/internal/testport"
)

// freeAddr is a free port of 127.0.0.1, for a server whose address its
// peers must know before it starts (a cluster's routes).
func freeAddr(t *testing.T) string { return testport.Addr(t) }

func startController(t *testing.T, dataDir, natsAddr string) (*controller.Controller, *api.Client, context.CancelFunc) {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = dataDir, natsAddr, "127.0.0.1:0"
	cfg.NodeOfflineAfter = config.Duration(3 * time.Second)
	cfg.FlushInterval = config.Duration(20 * time.Millisecond)
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	cl, err := api.NewClient(c.APIClientConfig(c.AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	return c, cl, cancel
}

// A controller restarted on the same data dir keeps its jobs and nodes, and
// finishes the job it was running without re-running finished steps.
func TestControllerRestartKeepsJobsAndResumes(t *testing.T) {
	dataDir, natsAddr := t.TempDir(), freeAddr(t)
	ctl, cl, stop := startController(t, dataDir, natsAddr)

	acfg := agent.DefaultConfig()
	acfg.Name, acfg.Groups, acfg.NATSURLs = "node-1", []string{"web"}, []string{"nats://" + natsAddr}
	acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
	acfg.DataDir = t.TempDir()
	// The agent trusts the CA the first start made; the restart reuses it.
	acfg.CAFile, acfg.JoinTokenFile = filepath.Join(dataDir, pki.CAFile), filepath.Join(dataDir, pki.JoinTokenFile)
	a, err := agent.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	stopped := false
	stopA := func() {
		if !stopped {
			stopped = true
			stopAgent()
			<-a.Done()
		}
	}
	defer stopA()
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waitFor(t, 10*time.Second, "node online", func() bool {
		n, err := cl.GetNode(ctx, "node-1")
		return err == nil && n.Status == api.NodeOnline
	})
	done, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := cl.WaitJob(ctx, done.ID); err != nil || j.Status != api.JobCompleted {
		t.Fatalf("first job: %+v %v", j, err)
	}
	running, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "before"}},
		{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "1500ms"}},
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "after"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the sleep step to run", func() bool {
		j, err := cl.GetJob(ctx, running.ID)
		return err == nil && nodeStatus(j, 1, "node-1") == api.StepRunning
	})
	stop()
	<-ctl.Done()

	ctl2, cl2, stop2 := startController(t, dataDir, natsAddr)
	defer func() { stop2(); <-ctl2.Done() }()
	if ctl2.ID() != ctl.ID() {
		t.Fatalf("restarted controller is %s, was %s", ctl2.ID(), ctl.ID())
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	j, err := cl2.WaitJob(wctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != api.JobCompleted {
		t.Fatalf("resumed job %s: %s", j.Status, j.Error)
	}
	if r := j.Results.Node(0, "node-1"); r.Attempts != 1 || len(r.Events) == 0 {
		t.Fatalf("step 0 re-ran after restart: %+v", r)
	}
	if r := j.Results.Node(2, "node-1"); r.Output != "after" {
		t.Fatalf("step 2: %+v", r)
	}
	if old, err := cl2.GetJob(ctx, done.ID); err != nil || old.Status != api.JobCompleted {
		t.Fatalf("job from before the restart: %+v %v", old, err)
	}
	nodes, err := cl2.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].ID != "node-1" {
		t.Fatalf("nodes after restart: %+v %v", nodes, err)
	}
	stopA()
}
