package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// In a cluster of three controllers sharing a CA and join token (routes
// on mutual TLS), an agent enrolled through one controller's server
// connects later to another's with its key alone and is online everywhere.
func TestClusterAgentEnrolledThroughOneConnectsToAnother(t *testing.T) {
	const n = 3
	ctls, shared := startSecureCluster(t, n, "sec", nil)
	startAgent := func(url string, token bool) (*agent.Agent, context.CancelFunc, error) {
		acfg := agent.DefaultConfig()
		acfg.Name, acfg.Groups, acfg.NATSURLs = "roamer", []string{"web"}, []string{url}
		acfg.DataDir, acfg.CAFile = filepath.Join(shared, "roamer"), filepath.Join(shared, pki.CAFile)
		acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
		if token {
			acfg.JoinTokenFile = filepath.Join(shared, pki.JoinTokenFile)
		}
		a, err := agent.New(acfg)
		if err != nil {
			return nil, nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := a.Start(ctx); err != nil {
			cancel()
			return nil, nil, err
		}
		return a, cancel, nil
	}
	a, stop, err := startAgent(ctls[0].NATSURL(), true)
	if err != nil {
		t.Fatalf("enroll through ctl-1: %v", err)
	}
	stop()
	<-a.Done()
	a, stop, err = startAgent(ctls[2].NATSURL(), false)
	if err != nil {
		t.Fatalf("connect to ctl-3 with the key enrolled through ctl-1: %v", err)
	}
	defer func() { stop(); <-a.Done() }()
	cl, _ := api.NewClient(ctls[1].APIClientConfig(ctls[1].AdminToken()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, 20*time.Second, "roamer online on ctl-2", func() bool {
		nd, err := cl.GetNode(ctx, "roamer")
		return err == nil && nd.Status == api.NodeOnline
	})
	j, err := cl.SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web"}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	done, err := cl.WaitJob(ctx, j.ID)
	if err != nil || done.Status != api.JobCompleted {
		t.Fatalf("job through ctl-2 on roamer: %v %+v", err, done)
	}

	// A scoped join token with 2 uses, made through ctl-2, and enrollments
	// through all three servers at once: exactly 2 succeed, whichever
	// controllers answer them.
	nt, err := cl.CreateJoinToken(ctx, api.JoinTokenRequest{Name: "twice", TTL: api.Duration(time.Hour), Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	const m = 9
	ens := make([]*enrollee, m)
	for i := range ens {
		ens[i] = newEnrolleeAt(t, ctls[i%n].NATSURL(), filepath.Join(shared, pki.CAFile))
	}
	replies := make([]api.EnrollReply, m)
	var ewg sync.WaitGroup
	for i := range m {
		ewg.Go(func() { replies[i] = ens[i].ask(t, fmt.Sprintf("twice-%d", i), nil, nt.Token) })
	}
	ewg.Wait()
	won := 0
	for _, r := range replies {
		if r.Status == api.EnrollAdmitted {
			won++
		} else if !strings.Contains(r.Error, "used up") {
			t.Errorf("enrollment with the two-use token: %+v", r)
		}
	}
	ts, err := cl.ListJoinTokens(ctx)
	if won != 2 || err != nil || len(ts) != 1 || ts[0].Used != 2 {
		t.Fatalf("%d enrollments with a two-use token across three controllers, want 2; token %+v %v", won, ts, err)
	}
	es, err := cl.ListEnrollments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, e := range es {
		if strings.HasPrefix(e.NodeID, "twice-") {
			stored++
		}
	}
	if stored != 2 {
		t.Fatalf("%d enrollments stored for the two-use token, want 2", stored)
	}
}

// startSecureCluster starts n controllers in the cluster named cluster, routed to
// each other on mutual TLS and sharing a CA and join token, which stay in
// the directory it returns; more, when given, configures each further.
func startSecureCluster(t *testing.T, n int, cluster string, more func(*controller.Config)) ([]*controller.Controller, string) {
	t.Helper()
	shared := t.TempDir()
	if _, err := pki.EnsureCA(shared); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureToken(filepath.Join(shared, pki.JoinTokenFile)); err != nil {
		t.Fatal(err)
	}
	dirs, clAddrs := make([]string, n), make([]string, n)
	for i := range n {
		dirs[i], clAddrs[i] = t.TempDir(), freeAddr(t)
		for _, name := range []string{pki.CAFile, pki.CAKeyFile, pki.JoinTokenFile} {
			b, err := os.ReadFile(filepath.Join(shared, name))
			if err == nil {
				err = os.WriteFile(filepath.Join(dirs[i], name), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	ctls := make([]*controller.Controller, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cfg := controller.DefaultConfig()
		cfg.Name, cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = fmt.Sprintf("ctl-%d", i+1), dirs[i], freeAddr(t), "127.0.0.1:0"
		cfg.ClusterName, cfg.ClusterAddr = cluster, clAddrs[i]
		for j := range n {
			if j != i {
				cfg.Routes = append(cfg.Routes, "nats://"+clAddrs[j])
			}
		}
		cfg.HeartbeatInterval = config.Duration(300 * time.Millisecond)
		if more != nil {
			more(&cfg)
		}
		c, err := controller.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		t.Cleanup(func() {
			stop()
			if ctls[i] != nil {
				<-c.Done()
			}
		})
		wg.Go(func() {
			if errs[i] = c.Start(ctx); errs[i] == nil {
				ctls[i] = c
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("controller %d: %v", i+1, err)
		}
	}
	return ctls, shared
}
