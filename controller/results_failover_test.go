package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
)

// TestResultsReachARunAfterTheirConsumerServerDies: a controller receives
// results through an ordered consumer that lives on one server of the
// cluster. When that server dies before the controller has received any
// result, the client recreates the consumer only some seconds later; the
// results stored in between must still reach their runs (a consumer that
// starts at "new" skips them, and the job waits for ever).
func TestResultsReachARunAfterTheirConsumerServerDies(t *testing.T) {
	runsInChaos(t)
	members := make([]*clusterMember, 3)
	for i, cfg := range clusterConfigs(t, 3, 0) {
		members[i] = &clusterMember{cfg: cfg}
	}
	startCluster(t, members)
	ctx := context.Background()

	nc, err := nats.Connect("nats://" + members[0].cfg.NATSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, api.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	// Where each controller's results consumer lives, and a controller whose
	// consumer lives on another member's server: the survivor, the other
	// the victim. The placement is the cluster's choice; when every
	// consumer lives on its own controller's server, one is deleted so
	// that its controller makes it again, until one lands elsewhere.
	var survivor, victim *clusterMember
	var host map[string]string // controller → server of its consumer
	for try := 0; survivor == nil; try++ {
		host = map[string]string{}
		names := map[string]string{}
		waitFor(t, 30*time.Second, "every controller's results consumer", func() bool {
			infos := stream.ListConsumers(ctx)
			for ci := range infos.Info() {
				for _, m := range members {
					if strings.HasPrefix(ci.Name, controller.ResultsConsumerPrefix(m.cfg.Name)+"_") && ci.Cluster != nil {
						host[m.cfg.Name], names[m.cfg.Name] = ci.Cluster.Leader, ci.Name
					}
				}
			}
			return len(host) == len(members)
		})
		for _, s := range members {
			for _, v := range members {
				if s != v && host[s.cfg.Name] == v.ctl.NATSServer().Name() {
					survivor, victim = s, v
				}
			}
		}
		if survivor != nil {
			break
		}
		if try == 10 {
			t.Fatalf("every controller's results consumer lives on its own server after %d placements (%v)", try+1, host)
		}
		m := members[try%len(members)]
		t.Logf("placement %v: every consumer on its own controller's server; deleting %s", host, names[m.cfg.Name])
		if err := stream.DeleteConsumer(ctx, names[m.cfg.Name]); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, m.cfg.Name+"'s results consumer made again", func() bool {
			infos := stream.ListConsumers(ctx)
			for ci := range infos.Info() {
				if strings.HasPrefix(ci.Name, controller.ResultsConsumerPrefix(m.cfg.Name)+"_") && ci.Name != names[m.cfg.Name] {
					return true
				}
			}
			return false
		})
	}
	t.Logf("%s's results consumer lives on %s's server", survivor.cfg.Name, victim.cfg.Name)

	// One agent, on the survivor's server only.
	acfg := agent.DefaultConfig()
	acfg.Name, acfg.NATSURLs, acfg.DataDir = "node-1", []string{"nats://" + survivor.cfg.NATSAddr}, t.TempDir()
	acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
	a, err := agent.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	t.Cleanup(func() { stopAgent(); <-a.Done() })
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(survivor.ctl.APIClientConfig(survivor.ctl.AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the node online", func() bool {
		n, err := cl.GetNode(ctx, "node-1")
		return err == nil && n.Status == api.NodeOnline
	})

	victim.ctl.Kill()
	victim.ctl.NATSServer().Shutdown()

	// The cluster elects new leaders for what the dead server led; a
	// submission may be refused meanwhile.
	var id string
	waitFor(t, 30*time.Second, "a job submitted", func() bool {
		j, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
		if err != nil {
			t.Logf("submit: %v", err)
			return false
		}
		id = j.ID
		return true
	})
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	j, err := cl.WaitJob(wctx, id)
	if err != nil {
		t.Fatalf("job %s did not end: %v", id, err)
	}
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s (%s)", id, j.Status, j.Error)
	}
}
