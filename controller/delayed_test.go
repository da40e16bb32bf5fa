package controller_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

func delayedEcho(notBefore string) *api.JobSpec {
	return &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, NotBefore: notBefore,
		Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}}
}

// checkStartedAfterNotBefore fails unless the job completed no earlier than
// its not_before.
func checkStartedAfterNotBefore(t *testing.T, j *api.Job) {
	t.Helper()
	if j.Status != api.JobCompleted || j.NotBefore == nil || j.StartedAt == nil || j.StartedAt.Before(*j.NotBefore) {
		t.Fatalf("delayed job: status %s (%s), not_before %v, started %v; want completed, started at or after not_before",
			j.Status, j.Error, j.NotBefore, j.StartedAt)
	}
}

// TestDelayedJobWaitsAndIsCancellable: a job with not_before waits (status
// waiting) and starts once due; a waiting job can be cancelled and never
// runs; a bad not_before is a 400 naming the field.
func TestDelayedJobWaitsAndIsCancellable(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	j := mustSubmit(t, c, delayedEcho("1500ms"))
	if j.Status != api.JobWaiting {
		t.Fatalf("submitted delayed job is %s, want waiting", j.Status)
	}
	if cur, err := c.GetJob(ctx, j.ID); err != nil || cur.Status != api.JobWaiting {
		t.Fatalf("delayed job before its time: %+v %v", cur, err)
	}
	checkStartedAfterNotBefore(t, wait(t, f, j.ID))

	later := mustSubmit(t, c, delayedEcho(time.Now().Add(2*time.Second).UTC().Format(time.RFC3339)))
	cj, err := c.CancelJob(ctx, later.ID)
	if err != nil || cj.Status != api.JobCancelled {
		t.Fatalf("cancel a waiting job: %+v %v", cj, err)
	}
	time.Sleep(3 * time.Second) // past its not_before
	if cur, err := c.GetJob(ctx, later.ID); err != nil || cur.Status != api.JobCancelled || len(cur.Results) != 0 {
		t.Fatalf("cancelled waiting job after its time: %+v %v", cur, err)
	}

	for _, bad := range []string{"tomorrow", "-5m", "2026-13-01T00:00:00Z"} {
		_, err := c.SubmitJob(ctx, delayedEcho(bad))
		if !api.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "not_before") {
			t.Errorf("not_before %q: %v, want 400 naming not_before", bad, err)
		}
	}
}

// TestDelayedJobSurvivesRestart: the only controller stops while a job
// waits; restarted on its data dir it runs the job when due.
func TestDelayedJobSurvivesRestart(t *testing.T) {
	dataDir, natsAddr := t.TempDir(), freeAddr(t)
	ctl, cl, stop := startController(t, dataDir, natsAddr)
	acfg := agent.DefaultConfig()
	acfg.Name, acfg.NATSURLs, acfg.DataDir = "node-1", []string{"nats://" + natsAddr}, t.TempDir()
	acfg.CAFile, acfg.JoinTokenFile = filepath.Join(dataDir, pki.CAFile), filepath.Join(dataDir, pki.JoinTokenFile)
	acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
	a, err := agent.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	defer func() { stopAgent(); <-a.Done() }()
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waitFor(t, 10*time.Second, "node online", func() bool {
		n, err := cl.GetNode(ctx, "node-1")
		return err == nil && n.Status == api.NodeOnline
	})
	j := mustSubmit(t, cl, delayedEcho("3s"))
	time.Sleep(500 * time.Millisecond) // the scheduler has seen and put back its request
	stop()
	<-ctl.Done()
	ctl2, cl2, stop2 := startController(t, dataDir, natsAddr)
	defer func() { stop2(); <-ctl2.Done() }()
	if cur, err := cl2.GetJob(ctx, j.ID); err != nil || cur.Status != api.JobWaiting {
		t.Fatalf("waiting job after restart: %+v %v", cur, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done, err := cl2.WaitJob(wctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkStartedAfterNotBefore(t, done)
}

// TestDelayedJobSurvivesFailover: the controller a waiting job was
// submitted to dies; a peer runs the job when due.
func TestDelayedJobSurvivesFailover(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b"}, []string{"node-1"}, func(cfg *controller.Config) {
		cfg.ControllerStaleAfter = config.Duration(time.Second)
	})
	a, b := p.clients["ctl-a"], p.clients["ctl-b"]
	// Both controllers must know the node and its backends: the job is
	// validated against them on ctl-a and run by ctl-b.
	waitFor(t, 10*time.Second, "the node's ping backend on both controllers", func() bool {
		for _, c := range []*api.Client{a, b} {
			cat, err := c.Backends(ctx)
			if err != nil || cat.Nodes["ping"] != 1 {
				return false
			}
		}
		return true
	})
	j := mustSubmit(t, a, delayedEcho("2s"))
	time.Sleep(500 * time.Millisecond)
	p.ctls["ctl-a"].Kill()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	done, err := b.WaitJob(wctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkStartedAfterNotBefore(t, done)
	if done.Owner != "ctl-b" {
		t.Fatalf("ran on %s, want the survivor ctl-b", done.Owner)
	}
}
