package chaos

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// tcpProxy forwards loopback connections to a target; cut closes every
// connection and refuses new ones (accepts and closes them at once) for a
// while, as a network partition would.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool
	accepts int
}

func newProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
	})
	return p
}

func (p *tcpProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		if !refuse {
			p.accepts++
		}
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, up)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *tcpProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *tcpProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// cut drops every connection and refuses new ones for d.
func (p *tcpProxy) cut(d time.Duration) {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.closeAll()
	time.AfterFunc(d, func() {
		p.mu.Lock()
		p.refuse = false
		p.mu.Unlock()
	})
}

func (p *tcpProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// An agent reaches NATS through a proxy that the test cuts for 2.5s:
//   - the job it is running when the cut starts finishes (its results are
//     published once it has reconnected);
//   - a job submitted during the cut, whose command the agent cannot hear,
//     still runs: the controller sends the command again after the
//     reconnect, while the step waits;
//   - a job whose step the controller has given up on (the cut outlasts
//     node_offline_after, the node is declared unreachable) never runs on
//     the agent after it reconnects.
func TestNetworkCutBetweenAgentAndNATS(t *testing.T) {
	needChaos(t)
	dir := t.TempDir()
	s, _, cl, _ := oneController(t, dir, func(s *ctlSpec) { s.nodeOffline = "6s" })
	proxy := newProxy(t, s.natsURL()[len("nats://"):])
	agent := startAgent(t, dir, "edge-1", []string{"edge"}, []string{proxy.url()}, "1s")
	waitNodes(t, cl, 30*time.Second, "edge-1")
	ctx := context.Background()
	target := api.Target{Scope: api.ScopeNode, Value: "edge-1"}
	sleep := func(d string) api.Phase {
		return api.Phase{Backend: "ping", Action: "sleep", Params: api.Params{"duration": d}}
	}

	// 1. A job running across a 2.5s cut.
	running, err := cl.SubmitJob(ctx, &api.JobSpec{Target: target, Tasks: []api.Phase{sleep("1s"), sleep("1s"), sleep("1s"), sleep("1s")}})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, cl, running.ID, 1, []string{"edge-1"}, api.StepRunning)
	cutAt := time.Now()
	proxy.cut(2500 * time.Millisecond)
	// 2. A job submitted while the agent cannot hear anything.
	time.Sleep(200 * time.Millisecond)
	missed, err := cl.SubmitJob(ctx, &api.JobSpec{Target: target, Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "caught up"}}}})
	if err != nil {
		t.Fatal(err)
	}
	j1 := waitJob(t, cl, running.ID, 40*time.Second)
	j2 := waitJob(t, cl, missed.ID, 40*time.Second)
	t.Logf("cut of 2.5s: running job %s %s %s after the cut; job submitted during the cut %s %s %s after the cut; agent connections through the proxy: %d",
		j1.ID, j1.Status, j1.FinishedAt.Sub(cutAt).Round(time.Millisecond), j2.ID, j2.Status, j2.FinishedAt.Sub(cutAt).Round(time.Millisecond), proxy.connections())
	if j1.Status != api.JobCompleted {
		t.Errorf("job running across the cut: %s %s", j1.Status, describeFailures(j1))
	}
	if j2.Status != api.JobCompleted || nodeResult(j2, 0, "edge-1").Output != "caught up" {
		t.Errorf("job submitted during the cut: %s %s", j2.Status, describeFailures(j2))
	}
	if proxy.connections() < 2 {
		t.Errorf("the agent did not reconnect through the proxy")
	}

	// 3. A cut longer than node_offline_after: the controller gives up on
	// the step (unreachable) and the agent must never run it.
	proxy.cut(9 * time.Second)
	time.Sleep(200 * time.Millisecond)
	abandoned, err := cl.SubmitJob(ctx, &api.JobSpec{Target: target, Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "too late"}}}})
	if err != nil {
		t.Fatal(err)
	}
	j3 := waitJob(t, cl, abandoned.ID, 40*time.Second)
	r := nodeResult(j3, 0, "edge-1")
	t.Logf("cut of 9s: job %s %s: %s %q", j3.ID, j3.Status, r.Status, r.Error)
	if j3.Status != api.JobFailed || r.Status != api.StepUnreachable {
		t.Errorf("job during a long cut: %s %s", j3.Status, describeFailures(j3))
	}
	// The agent comes back and keeps working, without running the
	// abandoned step.
	waitNodes(t, cl, 30*time.Second, "edge-1")
	after, err := cl.SubmitJob(ctx, &api.JobSpec{Target: target, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if j4 := waitJob(t, cl, after.ID, 30*time.Second); j4.Status != api.JobCompleted {
		t.Errorf("job after the agent came back: %s %s", j4.Status, describeFailures(j4))
	}
	time.Sleep(3 * time.Second) // anything late would have arrived by now
	runs, perStep := taskRuns(t, []*proc{agent})
	if n := perStep[taskKey{job: abandoned.ID, step: 0, node: "edge-1"}]; n != 0 {
		t.Errorf("the agent ran the step the controller gave up on (%d times)", n)
	}
	for k, n := range runs {
		if n > 1 {
			t.Errorf("%+v ran %d times", k, n)
		}
	}
}
