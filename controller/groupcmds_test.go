package controller_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// An agent in web.prod, with its own key, subscribes with every pattern
// the server's permission check might let through ('>' where a '*' is
// allowed) and hears the commands of its own groups only: a job for the
// sibling group web.dev, with its params, never reaches it.
func TestAgentCannotReadOtherGroupsCommands(t *testing.T) {
	groups := [][]string{{"web.prod"}, {"web.dev"}}
	f := fleettest.Start(t, fleet.Options{Agents: 2, Agent: func(i int, c *agent.Config) { c.Groups = groups[i] }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The attacker stops the agent and uses its key (while the agent is
	// connected the server refuses a second connection with it).
	if err := f.KillAgent("node-1"); err != nil {
		t.Fatal(err)
	}
	a, err := connectAs(t, f, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	heard := map[string][]string{}
	for _, pattern := range []string{
		"cmd.group.web.*.>", "cmd.group.web.>", "cmd.group.web.*.*", "cmd.group.web~prod.*.>", "cmd.group.*.*.>",
		"cmd.group.>", "cmd.all.*.>", "cmd.all.>", "cmd.node.node-1.*.>", "cmd.>", ">",
	} {
		// Refused ones are reported asynchronously; what counts is what
		// arrives.
		_, _ = a.nc.Subscribe(pattern, func(m *nats.Msg) {
			mu.Lock()
			heard[pattern] = append(heard[pattern], m.Subject+" "+string(m.Data))
			mu.Unlock()
		})
	}
	if err := a.nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	const secretish = "for-web-dev-only"
	sibling, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web.dev"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": secretish}}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := f.Client().WaitJob(ctx, sibling.ID); err != nil || j.Status != api.JobCompleted {
		t.Fatalf("the web.dev job: %v %v", j, err)
	}
	// Its own group's job arrives: the subscriptions are live.
	own, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "web"},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "for-all-of-web"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().WaitJob(ctx, own.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "node-1 to hear its own group's command", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard["cmd.group.web.*.*"]) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for pattern, msgs := range heard {
		for _, m := range msgs {
			if strings.Contains(m, secretish) {
				t.Errorf("node-1 (web.prod) heard web.dev's command through %s: %s", pattern, m)
			}
		}
	}
}
