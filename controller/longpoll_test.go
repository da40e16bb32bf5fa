package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// apiGet does a raw GET of the fleet's API with its admin token.
func apiGet(f *fleet.Fleet, path string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, f.APIURL()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	return f.HTTPClient().Do(req)
}

// longPoll does GET /job/{id}?wait=… and returns the raw body.
func longPoll(t *testing.T, f *fleet.Fleet, id string, wait time.Duration) []byte {
	t.Helper()
	resp, err := apiGet(f, "/job/"+id+"?wait="+wait.String())
	if err != nil {
		t.Fatalf("long poll %s: %v", id, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("long poll %s: %s %v: %s", id, resp.Status, err, body)
	}
	return body
}

func storedJob(t *testing.T, natsURL, id string, opts ...nats.Option) []byte {
	t.Helper()
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return e.Value()
}

func decodeJob(t *testing.T, b []byte) *api.Job {
	t.Helper()
	var j api.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("decode job: %v\n%s", err, b)
	}
	return &j
}

// The long poll on the controller that runs the job answers with the
// terminal job exactly as stored, also for a job that waited for a free
// slot (pending when the poll began).
func TestLongPollAnswersWithStoredJob(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 2, Controller: func(c *controller.Config) { c.MaxConcurrent = 1 }})
	slow := submit(t, f, `
target: {scope: all}
tasks:
  - {backend: ping, action: sleep, params: {duration: 400ms}}
`)
	queued := submit(t, f, `
target: {scope: all}
tasks:
  - {backend: ping, action: echo, params: {message: queued}}
`)
	var wg sync.WaitGroup
	bodies := make([][]byte, 2)
	for i, id := range []string{slow.ID, queued.ID} {
		wg.Go(func() { bodies[i] = longPoll(t, f, id, 20*time.Second) })
	}
	wg.Wait()
	for i, id := range []string{slow.ID, queued.ID} {
		j := decodeJob(t, bodies[i])
		if j.Status != api.JobCompleted || len(j.Results[0]) != 2 {
			t.Fatalf("job %s: %s (%s), %d results", id, j.Status, j.Error, len(j.Results[0]))
		}
		if stored := storedJob(t, f.NATSURL(), id, f.NATSOptions()...); !bytes.Equal(stored, bodies[i]) {
			t.Fatalf("job %s: the answer differs from the stored job:\n%s\n%s", id, bodies[i], stored)
		}
	}
	if decodeJob(t, bodies[1]).StartedAt.Before(*decodeJob(t, bodies[0]).FinishedAt) {
		t.Fatal("max_concurrent 1: the queued job started before the first ended")
	}
	// An unknown job is answered at once.
	start := time.Now()
	resp, err := apiGet(f, "/job/nosuchjob?wait=10s")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || time.Since(start) > 5*time.Second {
		t.Fatalf("unknown job: %s after %s", resp.Status, time.Since(start))
	}
}

// With two controllers a long poll on either answers when the job ends,
// whichever of them runs it.
func TestLongPollOnEveryController(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b"}, []string{"node-1"}, nil)
	clients := []*api.Client{p.clients["ctl-a"], p.clients["ctl-b"]}
	waitFor(t, 10*time.Second, "the node online on both controllers", func() bool {
		for _, cl := range clients {
			n, err := cl.ListNodes(ctx)
			if err != nil || len(n) != 1 || n[0].Status != api.NodeOnline {
				return false
			}
		}
		return true
	})
	owners := map[string]bool{}
	for i := range 6 {
		j, err := clients[i%2].SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
			Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "100ms"}}}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		got := make([]*api.Job, 2)
		for k, cl := range clients {
			wg.Go(func() {
				wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
				defer wcancel()
				got[k], _ = cl.WaitJob(wctx, j.ID)
			})
		}
		wg.Wait()
		for k, g := range got {
			if g == nil || g.Status != api.JobCompleted {
				t.Fatalf("job %d on controller %d: %+v", i, k, g)
			}
		}
		owners[got[0].Owner] = true
	}
	t.Logf("jobs ran on %v", owners)
}
