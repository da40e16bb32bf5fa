package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Three controllers form one NATS cluster, four agents know all three
// servers. The controllers' configs set no replicas: the default for a
// cluster of three (R3 streams and buckets) must carry the loss of one. 300 short jobs go in round robin through
// the three APIs; one controller is killed with SIGKILL while they run.
// Every job must end, none may be lost, and no (job, step, node) may run
// twice: the agents' logs have one "task started" per step and node.
func TestClusterSurvivesControllerKill(t *testing.T) {
	needChaos(t)
	const jobs = 300
	dir := t.TempDir()
	// node_offline_after stays at the harness's 5s: liveness comes from
	// received heartbeats, not from the node watch that stalls for several
	// seconds while it moves off the dead server.
	specs := newCtlSpecs(t, dir, 3, 0)
	ctls := make([]*proc, len(specs))
	startAt := time.Now()
	for i, s := range specs {
		ctls[i] = startController(t, dir, s)
	}
	for _, s := range specs {
		waitReady(t, s, 90*time.Second)
	}
	t.Logf("cluster of 3 ready in %s", time.Since(startAt).Round(time.Millisecond))
	urls := make([]string, len(specs))
	clients := make([]*api.Client, len(specs))
	for i, s := range specs {
		urls[i] = s.natsURL()
		clients[i] = client(t, s)
	}
	var agents []*proc
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("node-%d", i+1)
		group := "web.prod"
		if i%2 == 1 {
			group = "db.prod"
		}
		// Each agent lists the servers starting with a different one, so
		// they spread over the cluster.
		order := append(append([]string{}, urls[i%3:]...), urls[:i%3]...)
		agents = append(agents, startAgent(t, dir, name, []string{group}, order, "1s"))
		names = append(names, name)
	}
	waitNodes(t, clients[0], 30*time.Second, names...)
	// The default gave every stream and bucket three replicas.
	checkStreams(t, clients[0], 3, 3)

	rng := rand.New(rand.NewPCG(7, 11))
	specsFor := make([]*api.JobSpec, jobs)
	for i := range specsFor {
		specsFor[i] = randomJob(rng, names)
	}

	// Submit round robin; a submission to the dead controller goes to the
	// next one.
	victim := 1 // ctl-2
	var dead atomic.Bool
	ids := make([]string, jobs)
	var wg sync.WaitGroup
	var next atomic.Int64
	var submitted atomic.Int64
	killed := make(chan time.Time, 1)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= jobs {
					return
				}
				for try := 0; ; try++ {
					c := (i + try) % len(clients)
					if c == victim && dead.Load() {
						continue
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					j, err := clients[c].SubmitJob(ctx, specsFor[i])
					cancel()
					if err == nil {
						ids[i] = j.ID
						break
					}
					// While a server fails over, a controller may briefly
					// see no node (heartbeats stalled) and answer 400.
					if try > 150 {
						t.Errorf("submit job %d: %v", i, err)
						return
					}
					if try%20 == 19 {
						t.Logf("submit job %d still failing: %v", i, err)
					}
					time.Sleep(200 * time.Millisecond)
				}
				if submitted.Add(1) == jobs/2 {
					// Half the jobs are in; the victim is running its
					// share. Kill it.
					go func() {
						time.Sleep(300 * time.Millisecond)
						dead.Store(true)
						ctls[victim].kill9()
						killed <- time.Now()
					}()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	submitDone := time.Now()
	killAt := <-killed
	t.Logf("submitted %d jobs in %s; killed %s at +%s", jobs, submitDone.Sub(startAt).Round(time.Millisecond),
		specs[victim].name, killAt.Sub(startAt).Round(time.Millisecond))

	// Every job reaches a terminal state, read from a survivor.
	survivor := clients[(victim+1)%3]
	final := make([]*api.Job, jobs)
	deadline := time.Now().Add(120 * time.Second)
	for i, id := range ids {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			j, err := survivor.WaitJob(ctx, id)
			cancel()
			if err == nil && j.Status.Terminal() {
				final[i] = j
				break
			}
			if time.Now().After(deadline) {
				cur, _ := survivor.GetJob(context.Background(), id)
				status := "unknown"
				if cur != nil {
					status = string(cur.Status) + " owned by " + cur.Owner
				}
				t.Fatalf("job %s (%d) not terminal 120s after the submissions: %s (err %v)", id, i, status, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	allDone := time.Now()

	counts := map[api.JobStatus]int{}
	owners := map[string]int{}
	for _, j := range final {
		counts[j.Status]++
		owners[j.Owner]++
	}
	// Jobs the victim started and did not finish were taken over.
	victimStarted, victimFinished := map[string]bool{}, map[string]bool{}
	for _, l := range ctls[victim].logLines(t) {
		switch l["msg"] {
		case "job started":
			victimStarted[str(l["job"])] = true
		case "job finished":
			victimFinished[str(l["job"])] = true
		}
	}
	takenOver := 0
	for id := range victimStarted {
		if !victimFinished[id] {
			takenOver++
		}
	}

	var survivors []*proc
	for i, c := range ctls {
		if i != victim {
			survivors = append(survivors, c)
		}
	}
	catchUps := 0
	for _, c := range ctls {
		for _, l := range c.logLines(t) {
			if l["msg"] == "no answer from node; sending the command again" {
				catchUps++
			}
		}
	}
	_ = survivors

	runs, perStep := taskRuns(t, agents)
	dups := 0
	var dupKeys []string
	for k, n := range perStep {
		// No job here declares retries: one run per (job, step, node).
		if n > 1 {
			dups++
			dupKeys = append(dupKeys, fmt.Sprintf("%s/step %d/%s ×%d", k.job, k.step, k.node, n))
		}
	}
	sort.Strings(dupKeys)
	// Every recorded success was run exactly once, on attempt 1.
	missing := 0
	for _, j := range final {
		for step, m := range j.Results {
			for node, r := range m {
				if r.Status == api.StepSuccess && runs[taskKey{job: j.ID, step: step, node: node, attempt: r.Attempts}] != 1 {
					missing++
				}
			}
		}
	}
	statusList := make([]string, 0, len(counts))
	for s, n := range counts {
		statusList = append(statusList, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(statusList)
	t.Logf("jobs: %d found, all terminal (%s) %s after the kill; total %s",
		len(final), strings.Join(statusList, " "), allDone.Sub(killAt).Round(time.Millisecond), allDone.Sub(startAt).Round(time.Millisecond))
	t.Logf("final owners: %v; jobs taken over from %s: %d; tasks run: %d; duplicate runs: %d; command re-sends: %d",
		owners, specs[victim].name, takenOver, len(runs), dups, catchUps)
	if dups > 0 {
		t.Errorf("steps ran twice on a node: %v", dupKeys[:min(len(dupKeys), 20)])
	}
	if missing > 0 {
		t.Errorf("%d successful results have no matching single run in the agents' logs", missing)
	}
	if counts[api.JobCompleted] != jobs {
		for _, j := range final {
			if j.Status != api.JobCompleted {
				t.Errorf("job %s %s: %s", j.ID, j.Status, describeFailures(j))
			}
		}
	}
	// Every stream kept a leader and two current replicas of three.
	checkStreams(t, survivor, 3, 2)
	checkAudit(t, survivor, ids, specs[victim].name)
	// The remaining controllers still agree on the state of the world.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range clients {
		if c == clients[victim] {
			continue
		}
		cs, err := c.Controllers(ctx)
		if err != nil {
			t.Errorf("GET /controllers: %v", err)
			continue
		}
		for _, ci := range cs {
			if ci.ID == specs[victim].name && ci.Status == "online" && time.Since(ci.LastSeen) < 3*time.Second {
				t.Errorf("killed controller still looks alive: %+v", ci)
			}
		}
	}
}

// idleStreams are the streams and buckets this test need not write after
// the start.
var idleStreams = map[string]bool{api.BucketTokens: true, api.BucketKeys: true, api.BucketJobSecrets: true, api.BucketEnrollments: true,
	api.BucketSchemas:     true, // schemas: written again only by a controller when an agent registers a set it does not hold
	api.BucketRateLimits:  true, // rate_limits: written only when a limited task starts
	api.BucketSchedules:   true, // schedules: written only when a schedule changes or fires
	api.BucketJoinTokens:  true, // join_tokens: written only by grid join-token and enrollments with a scoped token
	api.BucketSites:       true, // sites: written only by grid site create and revoke
	api.StreamDeadLetters: true} // dlq: written only when a request is dead-lettered

// checkStreams checks, through a controller's GET /status, that every
// stream and bucket has the given replicas, a leader and (within a while
// after a server's loss) the given number of current replicas.
func checkStreams(t *testing.T, cl *api.Client, replicas, current int) {
	t.Helper()
	var last []api.StreamHealth
	ok := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cl.Status(ctx)
		if err != nil || len(st.Streams) == 0 {
			return false
		}
		last = st.Streams
		for _, h := range st.Streams {
			if !h.HasLeader || h.Replicas != replicas || h.Current > replicas {
				return false
			}
			// JetStream learns of a lost replica through the stream's
			// traffic: a stream nobody writes after the start (API tokens,
			// cluster keys, sensitive params, enrollments here) keeps calling a dead peer current, so
			// only the streams this test writes must show the loss.
			if idleStreams[h.Name] && current < replicas {
				continue
			}
			if h.Current != current {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("streams not at %d replicas with %d current and a leader: %+v", replicas, current, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// randomJob is 1–3 steps of ping echo or sleep (50–300ms) on a random
// target; some steps are per-node pipelines.
func randomJob(rng *rand.Rand, nodes []string) *api.JobSpec {
	leaf := func() api.Phase {
		if rng.IntN(2) == 0 {
			return api.Phase{Backend: "ping", Action: "echo", Params: api.Params{"message": fmt.Sprintf("m%d", rng.IntN(1000))}}
		}
		return api.Phase{Backend: "ping", Action: "sleep", Params: api.Params{"duration": fmt.Sprintf("%dms", 50+rng.IntN(251))}}
	}
	var target api.Target
	switch rng.IntN(4) {
	case 0:
		target = api.Target{Scope: api.ScopeAll}
	case 1:
		target = api.Target{Scope: api.ScopeAny}
	case 2:
		target = api.Target{Scope: "group", Value: []string{"web", "db"}[rng.IntN(2)]}
	default:
		target = api.Target{Scope: "node", Value: nodes[rng.IntN(len(nodes))]}
	}
	spec := &api.JobSpec{Target: target, Timeout: "2m"}
	for range 1 + rng.IntN(3) {
		if rng.IntN(4) == 0 {
			spec.Tasks = append(spec.Tasks, api.Phase{Tasks: []api.Phase{leaf(), leaf()}})
		} else {
			spec.Tasks = append(spec.Tasks, leaf())
		}
	}
	return spec
}

func describeFailures(j *api.Job) string {
	var out []string
	for step, m := range j.Results {
		for node, r := range m {
			if r.Status != api.StepSuccess {
				out = append(out, fmt.Sprintf("step %d on %s %s: %s", step, node, r.Status, r.Error))
			}
		}
	}
	sort.Strings(out)
	return j.Error + " [" + strings.Join(out, "; ") + "]"
}

// checkAudit reads the audit trail through a survivor: the chain that three
// controllers wrote at once, one of them killed with SIGKILL, is unbroken;
// every accepted job has exactly one job.submit record (written before its
// answer); and the records the killed controller wrote survive it.
func checkAudit(t *testing.T, cl *api.Client, ids []string, victim string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var chain api.AuditChain
	submits := map[string]int{}
	writers := map[string]int{}
	err := cl.EachAudit(ctx, api.AuditQuery{Limit: 1000}, func(r api.AuditRecord) error {
		if err := chain.Next(r); err != nil {
			return err
		}
		writers[r.Controller]++
		if r.Action == api.AuditJobSubmit && r.Outcome == 202 {
			submits[r.Job]++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("audit trail after the kill (%d records read): %v", chain.Count, err)
	}
	for i, id := range ids {
		if submits[id] != 1 {
			t.Errorf("job %s (%d): %d job.submit records, want 1", id, i, submits[id])
		}
	}
	if writers[victim] == 0 {
		t.Errorf("no record of the killed controller %s survived: %v", victim, writers)
	}
	t.Logf("audit: %d records, chain intact, by controller %v", chain.Count, writers)
}
