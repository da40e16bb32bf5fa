package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// peers is several controllers and agents sharing one NATS server, as
// controllers pointed at an existing NATS deployment run.
type peers struct {
	ctls    map[string]*controller.Controller
	clients map[string]*api.Client
}

// startPeers starts an embedded NATS server, the named controllers
// connected to it (heartbeat 200ms; tweak adjusts each config) and the named
// agents (heartbeat 200ms). Everything stops when the test ends.
func startPeers(ctx context.Context, t *testing.T, ctlNames, agentNames []string, tweak func(*controller.Config)) *peers {
	t.Helper()
	ns, err := embedded.StartServer(ctx, embedded.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()
	p := &peers{ctls: map[string]*controller.Controller{}, clients: map[string]*api.Client{}}
	for _, name := range ctlNames {
		cfg := controller.DefaultConfig()
		cfg.Name, cfg.DataDir, cfg.APIAddr, cfg.NATSURLs = name, t.TempDir(), "127.0.0.1:0", []string{url}
		// The shared server is a plain NATS of our own: securing an existing
		// NATS deployment is its operator's business (nats_creds).
		cfg.Insecure = true
		cfg.HeartbeatInterval = config.Duration(200 * time.Millisecond)
		if tweak != nil {
			tweak(&cfg)
		}
		c, err := controller.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cctx, stop := context.WithCancel(ctx)
		if err := c.Start(cctx); err != nil {
			stop()
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(); <-c.Done() })
		p.ctls[name] = c
		p.clients[name], _ = api.NewClient(c.APIClientConfig(c.AdminToken()))
	}
	for _, name := range agentNames {
		acfg := agent.DefaultConfig()
		acfg.Name, acfg.NATSURLs, acfg.DataDir = name, []string{url}, t.TempDir()
		acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
		a, err := agent.New(acfg)
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		if err := a.Start(actx); err != nil {
			stop()
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(); <-a.Done() })
	}
	return p
}
