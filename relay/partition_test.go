package relay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// link is a TCP proxy standing for a site's WAN link: cut closes every
// connection through it and refuses new ones until heal.
type link struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newLink(t *testing.T, target string) *link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &link{l: l, target: target, conns: map[net.Conn]bool{}}
	k.wg.Add(1)
	go k.accept()
	t.Cleanup(func() {
		l.Close()
		k.cut()
		k.wg.Wait()
	})
	return k
}

func (k *link) url() string { return "tls://" + k.l.Addr().String() }

func (k *link) accept() {
	defer k.wg.Done()
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.down {
			k.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", k.target)
		if err != nil {
			k.mu.Unlock()
			c.Close()
			continue
		}
		k.conns[c], k.conns[up] = true, true
		k.mu.Unlock()
		k.wg.Add(2)
		go k.pipe(c, up)
		go k.pipe(up, c)
	}
}

func (k *link) pipe(dst, src net.Conn) {
	defer k.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (k *link) cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down = true
	for c := range k.conns {
		c.Close()
	}
	clear(k.conns)
}

func (k *link) heal() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down = false
}

// A cut site link: a job running on the site's node ends with the node
// unreachable rather than hang, and the hub marks the node offline; the
// agent stays with the relay. When the link heals, the node is back
// online without enrolling again and runs jobs.
func TestSiteLinkCutAndHealed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One agent of the hub's own, which offers the backends while the
	// site's node is cut off.
	f, cred := startSiteHub(t, ctx, 1, func(c *controller.Config) {
		c.NodeOfflineAfter = config.Duration(2 * time.Second)
	})
	var hubLeaf string
	if _, err := fmt.Sscanf(cred.HubURLs[0], "tls://%s", &hubLeaf); err != nil {
		t.Fatal(err)
	}
	wan := newLink(t, hubLeaf)
	cred.HubURLs = []string{wan.url()}
	r := startLinkedRelay(t, &cred, "")

	cfg := siteAgentConfig(t, f, r, "p-1")
	cfg.JoinTokenFile = f.JoinTokenFile()
	cfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
	cfg.ShutdownGrace = agent.Duration(100 * time.Millisecond)
	startSiteAgent(t, cfg)
	if err := f.WaitOnline(ctx, "p-1"); err != nil {
		t.Fatal(err)
	}
	enrolled, ok := enrollmentOf(t, ctx, f, "p-1")
	if !ok {
		t.Fatal("p-1 has no enrollment")
	}

	// A job running on p-1 when the link is cut ends with p-1 unreachable.
	j := submitJob(t, ctx, f, "{scope: node, value: p-1}", "{backend: ping, action: sleep, params: {duration: 60s}}")
	testwait.Until(t, 30*time.Second, 20*time.Millisecond, "the sleep running on p-1", func() bool {
		cur, err := f.Client().GetJob(ctx, j.ID)
		if err != nil {
			return false
		}
		res := cur.Results.Node(0, "p-1")
		return res != nil && res.Status == api.StepRunning
	})
	wan.cut()
	testwait.Until(t, 30*time.Second, 20*time.Millisecond, "the relay to notice the cut", func() bool { return !r.LeafConnected() })
	j, err := f.Client().WaitJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res := j.Results.Node(0, "p-1"); res == nil || res.Status != api.StepUnreachable {
		t.Fatalf("job running behind a cut link: %s, result %+v, want p-1 unreachable", j.Status, res)
	}
	if st := nodeStatus(ctx, f, "p-1"); st != api.NodeOffline {
		t.Fatalf("p-1 is %q behind a cut link, want offline", st)
	}

	wan.heal()
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "p-1 back online", func() bool {
		return nodeStatus(ctx, f, "p-1") == api.NodeOnline
	})
	j = submitJob(t, ctx, f, "{scope: site, value: "+site+"}", "{backend: ping, action: echo}")
	if j, err = f.Client().WaitJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if res := j.Results.Node(0, "p-1"); j.Status != api.JobCompleted || res == nil || res.Status != api.StepSuccess {
		t.Fatalf("job after the link healed: %s, result %+v", j.Status, res)
	}
	if again, _ := enrollmentOf(t, ctx, f, "p-1"); !again.RequestedAt.Equal(enrolled.RequestedAt) || again.PublicKey != enrolled.PublicKey {
		t.Fatalf("p-1 enrolled again: %+v, was %+v", again, enrolled)
	}
}

func enrollmentOf(t *testing.T, ctx context.Context, f *fleet.Fleet, id string) (api.Enrollment, bool) {
	t.Helper()
	es, err := f.Client().ListEnrollments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.NodeID == id {
			return e, true
		}
	}
	return api.Enrollment{}, false
}

func nodeStatus(ctx context.Context, f *fleet.Fleet, id string) string {
	nodes, err := f.Client().ListNodes(ctx)
	if err != nil {
		return ""
	}
	for _, n := range nodes {
		if n.ID == id {
			return n.Status
		}
	}
	return ""
}

func submitJob(t *testing.T, ctx context.Context, f *fleet.Fleet, target, task string) *api.Job {
	t.Helper()
	spec, err := api.ParseJobSpec([]byte("target: " + target + "\ntasks:\n  - " + task + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := f.Client().SubmitJob(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
