package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// everySecond is a schedule of one ping.echo on every node each second
// (the optional leading seconds field).
func everySecond(name string) *api.ScheduleSpec {
	return &api.ScheduleSpec{Name: name, Cron: "* * * * * *", Overlap: api.OverlapAllow,
		Job: api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}}}
}

// scheduleJobs lists the jobs a schedule submitted, by tick (from their id).
func scheduleJobs(t *testing.T, c *api.Client, id string) map[int64]api.Job {
	t.Helper()
	jobs, err := c.ListJobsPage(context.Background(), api.JobQuery{Limit: 1000, ScheduleID: id})
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	out := map[int64]api.Job{}
	for _, j := range jobs {
		if j.ScheduleID != id {
			continue
		}
		tick, err := strconv.ParseInt(j.ID[strings.LastIndexByte(j.ID, '-')+1:], 10, 64)
		if err != nil || j.ID != api.ScheduleJobID(id, time.Unix(tick, 0)) {
			t.Fatalf("job %s of schedule %s: id is not the tick's", j.ID, id)
		}
		if _, dup := out[tick]; dup {
			t.Fatalf("two jobs for tick %d of schedule %s", tick, id)
		}
		out[tick] = j
	}
	return out
}

func getSchedule(t *testing.T, c *api.Client, id string) *api.Schedule {
	t.Helper()
	s, err := c.GetSchedule(context.Background(), id)
	if err != nil {
		t.Fatalf("get schedule %s: %v", id, err)
	}
	return s
}

// settled waits until no tick of the schedule is claimed and unconfirmed.
func settled(t *testing.T, c *api.Client, id string) *api.Schedule {
	t.Helper()
	var s *api.Schedule
	waitFor(t, 20*time.Second, "schedule "+id+" without a pending claim", func() bool {
		s = getSchedule(t, c, id)
		return s.PendingJob == ""
	})
	return s
}

// TestScheduleFiresPauseResume: a schedule every second submits ordinary
// jobs linked by schedule_id that run to completion; paused it submits
// none; resumed it fires again; deleted it stops and its jobs stay.
func TestScheduleFiresPauseResume(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	s, err := c.CreateSchedule(ctx, everySecond("tick"))
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "tick" || s.NextRun == nil || s.TimeZone != "UTC" || s.CatchUp != api.CatchUpSkip || s.CreatedBy == "" {
		t.Fatalf("created schedule: %+v", s)
	}
	waitFor(t, 30*time.Second, "three jobs of the schedule", func() bool { return len(scheduleJobs(t, c, "tick")) >= 3 })
	for _, j := range scheduleJobs(t, c, "tick") {
		if j.SubmittedBy != s.CreatedBy {
			t.Fatalf("job %s submitted_by %q, want the schedule's creator %q", j.ID, j.SubmittedBy, s.CreatedBy)
		}
		if done := wait(t, f, j.ID); done.Status != api.JobCompleted || done.ScheduleID != "tick" {
			t.Fatalf("scheduled job %s: %s %q (schedule %q)", j.ID, done.Status, done.Error, done.ScheduleID)
		}
	}

	if p, err := c.PauseSchedule(ctx, "tick"); err != nil || !p.Paused || p.NextRun != nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	paused := settled(t, c, "tick")
	before := len(scheduleJobs(t, c, "tick"))
	if int64(before) != paused.Fired {
		t.Fatalf("%d jobs, schedule says %d fired", before, paused.Fired)
	}
	time.Sleep(2500 * time.Millisecond) // two ticks and more
	if n := len(scheduleJobs(t, c, "tick")); n != before {
		t.Fatalf("paused schedule fired: %d jobs, had %d", n, before)
	}

	r, err := c.ResumeSchedule(ctx, "tick")
	if err != nil || r.Paused || r.NextRun == nil || !r.NextRun.After(time.Now().Add(-2*time.Second)) {
		t.Fatalf("resume: %+v %v", r, err)
	}
	waitFor(t, 30*time.Second, "a job after resume", func() bool { return len(scheduleJobs(t, c, "tick")) > before })

	if err := c.DeleteSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "tick"); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("deleted schedule: %v, want 404", err)
	}
	if len(scheduleJobs(t, c, "tick")) == 0 {
		t.Fatal("the deleted schedule's jobs are gone")
	}
	if v := value(t, f.Controller.Registry(), "grid_schedule_fired_total", nil); v < 4 {
		t.Fatalf("grid_schedule_fired_total = %v, want at least 4", v)
	}
}

// TestScheduleOverlapSkip: with overlap skip, a tick while the previous
// job runs fires nothing and says why; the schedule's jobs never overlap.
func TestScheduleOverlapSkip(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	spec := everySecond("slow")
	spec.Overlap = ""
	spec.Job.Tasks = []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2500ms"}}}
	s, err := c.CreateSchedule(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if s.Overlap != api.OverlapSkip {
		t.Fatalf("default overlap %q, want skip", s.Overlap)
	}
	waitFor(t, 40*time.Second, "two jobs and two overlap skips", func() bool {
		s = getSchedule(t, c, "slow")
		return s.Fired >= 2 && s.Skipped >= 2
	})
	if !strings.Contains(s.LastSkipReason, "overlap") {
		t.Fatalf("last skip reason %q, want overlap", s.LastSkipReason)
	}
	if _, err := c.PauseSchedule(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	settled(t, c, "slow")
	var jobs []*api.Job
	for _, j := range scheduleJobs(t, c, "slow") {
		jobs = append(jobs, wait(t, f, j.ID))
	}
	slices.SortFunc(jobs, func(a, b *api.Job) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for i := 1; i < len(jobs); i++ {
		prev, cur := jobs[i-1], jobs[i]
		if prev.FinishedAt == nil || cur.CreatedAt.Before(*prev.FinishedAt) {
			t.Fatalf("job %s was submitted at %s, before %s finished (%v)", cur.ID, cur.CreatedAt, prev.ID, prev.FinishedAt)
		}
	}
	if v := value(t, f.Controller.Registry(), "grid_schedule_skipped_total", map[string]string{"reason": "overlap"}); v < 2 {
		t.Fatalf("grid_schedule_skipped_total{reason=overlap} = %v, want at least 2", v)
	}
}

// TestScheduleBadInput: every malformed schedule is a 400 naming the field;
// unknown ids are 404, a taken name 409, and nothing is stored.
func TestScheduleBadInput(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	c := f.Client()
	for _, tc := range []struct {
		name  string
		edit  func(*api.ScheduleSpec)
		field string
	}{
		{"bad cron", func(s *api.ScheduleSpec) { s.Cron = "61 * * * *" }, "cron:"},
		{"empty cron", func(s *api.ScheduleSpec) { s.Cron = "" }, "cron:"},
		{"cron with its own zone", func(s *api.ScheduleSpec) { s.Cron = "CRON_TZ=UTC 0 3 * * *" }, "cron:"},
		{"unknown time zone", func(s *api.ScheduleSpec) { s.TimeZone = "Mars/Olympus" }, "time_zone:"},
		{"bad name", func(s *api.ScheduleSpec) { s.Name = "Bad Name" }, "name:"},
		{"bad catch_up", func(s *api.ScheduleSpec) { s.CatchUp = "all" }, "catch_up:"},
		{"bad overlap", func(s *api.ScheduleSpec) { s.Overlap = "queue" }, "overlap:"},
		{"job without tasks", func(s *api.ScheduleSpec) { s.Job.Tasks = nil }, "job.tasks"},
		{"unknown backend", func(s *api.ScheduleSpec) { s.Job.Tasks[0].Backend = "nope" }, "job.tasks[0]"},
		{"missing param", func(s *api.ScheduleSpec) { s.Job.Tasks[0].Action = "sleep" }, "job.tasks[0].params.duration"},
		{"bad not_before", func(s *api.ScheduleSpec) { s.Job.NotBefore = "soon" }, "job.not_before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := everySecond("bad")
			tc.edit(spec)
			_, err := c.CreateSchedule(ctx, spec)
			if !api.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("%v, want 400 naming %s", err, tc.field)
			}
		})
	}
	for _, body := range []string{`{"name":"x","cron":"@hourly","job":{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}]},"every":"1h"}`,
		`{"name":"x","cron":"@hourly","job":{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}],"priorty":3}}`,
		`{"name":"x","cron":"@hourly"}`} {
		req, _ := http.NewRequest(http.MethodPost, f.APIURL()+"/schedules", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.AdminToken())
		resp, err := f.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, resp.StatusCode)
		}
	}
	if list, err := c.ListSchedules(ctx); err != nil || len(list) != 0 {
		t.Fatalf("schedules after bad input: %v %v", list, err)
	}
	if _, err := c.GetSchedule(ctx, "none"); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := c.PauseSchedule(ctx, "none"); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("pause unknown: %v", err)
	}
	if err := c.DeleteSchedule(ctx, "none"); !api.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	spec := everySecond("once")
	spec.Cron, spec.Paused = "@daily", true
	if _, err := c.CreateSchedule(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSchedule(ctx, spec); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("create a taken name: %v, want 409", err)
	}
	renamed := *spec
	renamed.Name = "other"
	if _, err := c.UpdateSchedule(ctx, "once", &renamed); !api.IsStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "name") {
		t.Fatalf("rename by update: %v, want 400 naming name", err)
	}
	upd := *spec
	upd.Cron, upd.TimeZone, upd.Paused = "0 3 * * *", "Europe/Berlin", false
	s, err := c.UpdateSchedule(ctx, "once", &upd)
	if err != nil || s.Cron != "0 3 * * *" || s.TimeZone != "Europe/Berlin" || s.Paused || s.NextRun == nil {
		t.Fatalf("update: %+v %v", s, err)
	}
	if loc, _ := time.LoadLocation("Europe/Berlin"); s.NextRun.In(loc).Hour() != 3 {
		t.Fatalf("next run %s is not 03:00 in Berlin", s.NextRun)
	}
}

// startScheduleController starts one controller on dataDir with
// schedule_grace grace.
func startScheduleController(t *testing.T, dataDir, natsAddr string, grace time.Duration) (*controller.Controller, *api.Client, context.CancelFunc) {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = dataDir, natsAddr, "127.0.0.1:0"
	cfg.ScheduleGrace = config.Duration(grace)
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ctl.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	cl, err := api.NewClient(ctl.APIClientConfig(ctl.AdminToken()))
	if err != nil {
		t.Fatal(err)
	}
	return ctl, cl, cancel
}

// TestScheduleCatchUpAcrossRestart: the only controller is down for
// several ticks. With catch_up skip no job is submitted for them (the skip
// is recorded); with run_once exactly one is, for the first missed tick.
func TestScheduleCatchUpAcrossRestart(t *testing.T) {
	for _, policy := range []api.CatchUp{api.CatchUpSkip, api.CatchUpRunOnce} {
		t.Run(string(policy), func(t *testing.T) {
			dataDir, natsAddr := t.TempDir(), freeAddr(t)
			ctl, cl, stop := startScheduleController(t, dataDir, natsAddr, 2*time.Second)
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
			spec := everySecond("catchup")
			spec.CatchUp = policy
			if _, err := cl.CreateSchedule(ctx, spec); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "a job before the restart", func() bool { return len(scheduleJobs(t, cl, "catchup")) >= 1 })
			stop()
			<-ctl.Done()
			down := time.Now()
			time.Sleep(4 * time.Second) // ticks pass with no controller
			up := time.Now()
			ctl2, cl2, stop2 := startScheduleController(t, dataDir, natsAddr, 2*time.Second)
			defer func() { stop2(); <-ctl2.Done() }()
			waitFor(t, 30*time.Second, "jobs after the restart", func() bool {
				for tick := range scheduleJobs(t, cl2, "catchup") {
					if tick > up.Unix()+1 {
						return true
					}
				}
				return false
			})
			var missed []string
			for tick, j := range scheduleJobs(t, cl2, "catchup") {
				if tick > down.Unix() && tick < up.Unix() {
					missed = append(missed, j.ID)
				}
			}
			s := getSchedule(t, cl2, "catchup")
			skipped := value(t, ctl2.Registry(), "grid_schedule_skipped_total", map[string]string{"reason": "missed"})
			switch policy {
			case api.CatchUpSkip:
				if len(missed) != 0 {
					t.Fatalf("catch_up skip submitted %v for ticks while down", missed)
				}
				if skipped < 3 || s.Skipped < 3 {
					t.Fatalf("missed ticks recorded: metric %v, schedule %d (%s); want at least 3", skipped, s.Skipped, s.LastSkipReason)
				}
			case api.CatchUpRunOnce:
				if len(missed) != 1 || skipped != 0 {
					t.Fatalf("catch_up run_once submitted %v for ticks while down (and skipped %v), want exactly one", missed, skipped)
				}
			}
		})
	}
}

// TestScheduleTickFiresOnceWhenClaimerDies: three controllers on one NATS;
// the one that claims a tick loses its connection, as in a crash, before
// submitting the tick's job. Another submits it, every tick has exactly
// one job, and ticks go on firing on the survivors.
func TestScheduleTickFiresOnceWhenClaimerDies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"ctl-a", "ctl-b", "ctl-c"}, []string{"node-1"}, nil)
	checkTickFiresOnce(t, p.ctls, p.clients, func(c *controller.Controller) { c.Kill() })
}

// TestScheduleTickFiresOnceInClusterWhenClaimerDies: the same with three
// controllers whose embedded servers form a cluster (schedules and jobs
// replicated three times): the claimer's controller and server both stop
// at once, without cleanup.
func TestScheduleTickFiresOnceInClusterWhenClaimerDies(t *testing.T) {
	runsInChaos(t)
	members := make([]*clusterMember, 3)
	var urls []string
	for i, cfg := range clusterConfigs(t, 3, 0) {
		members[i] = &clusterMember{cfg: cfg}
		urls = append(urls, "nats://"+cfg.NATSAddr)
	}
	startCluster(t, members)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range members {
				t.Logf("%s log:\n%s", m.cfg.Name, m.logs.String())
			}
		}
	})
	ctls, clients := map[string]*controller.Controller{}, map[string]*api.Client{}
	for _, m := range members {
		ctls[m.cfg.Name] = m.ctl
		clients[m.cfg.Name], _ = api.NewClient(m.ctl.APIClientConfig(m.ctl.AdminToken()))
	}
	acfg := agent.DefaultConfig()
	acfg.Name, acfg.NATSURLs, acfg.DataDir = "node-1", urls, t.TempDir()
	acfg.HeartbeatInterval = agent.Duration(200 * time.Millisecond)
	agentLog := &syncBuffer{}
	acfg.Logger = slog.New(slog.NewJSONHandler(agentLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	})
	a, err := agent.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	t.Cleanup(func() { stopAgent(); <-a.Done() })
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	checkTickFiresOnce(t, ctls, clients, func(c *controller.Controller) {
		c.Kill()
		c.NATSServer().Shutdown()
	})
}

// checkTickFiresOnce crashes (with crash) whichever controller first claims
// a tick of an every-second schedule, right after the claim, and checks
// that the tick's job is submitted by another and that every tick from the
// first on has exactly one job.
func checkTickFiresOnce(t *testing.T, ctls map[string]*controller.Controller, clients map[string]*api.Client, crash func(*controller.Controller)) {
	t.Helper()
	ctx := context.Background()
	var (
		mu                sync.Mutex
		killed, killedJob string
	)
	names := slices.Sorted(maps.Keys(ctls))
	for _, name := range names {
		ctl := ctls[name]
		ctl.OnScheduleClaim(func(jobID string) bool {
			mu.Lock()
			defer mu.Unlock()
			if killed != "" {
				return false
			}
			killed, killedJob = name, jobID
			crash(ctl) // between the claim and the job
			return true
		})
	}
	c := clients[names[0]]
	waitFor(t, 20*time.Second, "the node online", func() bool {
		n, err := c.ListNodes(ctx)
		return err == nil && len(n) == 1 && n[0].Status == api.NodeOnline
	})
	if _, err := c.CreateSchedule(ctx, everySecond("ha")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a controller to claim a tick and die", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return killed != ""
	})
	mu.Lock()
	survivor := clients[names[(slices.Index(names, killed)+1)%len(names)]]
	job := killedJob
	mu.Unlock()
	killedTick, _ := strconv.ParseInt(job[strings.LastIndexByte(job, '-')+1:], 10, 64)
	waitFor(t, 60*time.Second, "the dead claimer's tick and three later ones fired", func() bool {
		jobs := scheduleJobs(t, survivor, "ha")
		_, ok := jobs[killedTick]
		return ok && slices.Max(slices.Collect(maps.Keys(jobs))) >= killedTick+3
	})
	if _, err := survivor.PauseSchedule(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	s := settled(t, survivor, "ha")
	if s.Skipped != 0 {
		t.Fatalf("schedule skipped %d ticks (%s)", s.Skipped, s.LastSkipReason)
	}
	// The list comes from the survivor's jobs index, which follows the jobs
	// bucket with a watch; when the dead server held that watch's consumer
	// the watch resumes only some seconds later, so the list may lag.
	var ticks []int64
	listed := time.Now()
	waitFor(t, 30*time.Second, fmt.Sprintf("the survivor to list the %d jobs the schedule fired", s.Fired), func() bool {
		ticks = slices.Sorted(maps.Keys(scheduleJobs(t, survivor, "ha")))
		return int64(len(ticks)) >= s.Fired
	})
	t.Logf("the survivor listed every fired tick %v after the pause", time.Since(listed).Round(time.Millisecond))
	for tick := ticks[0]; tick <= ticks[len(ticks)-1]; tick++ {
		if _, err := survivor.GetJob(ctx, api.ScheduleJobID("ha", time.Unix(tick, 0))); err != nil {
			t.Fatalf("ticks %v: tick %d has no job: %v", ticks, tick, err)
		}
	}
	if int64(len(ticks)) != s.Fired || ticks[len(ticks)-1]-ticks[0]+1 != s.Fired {
		t.Fatalf("schedule says fired %d; jobs for ticks %v", s.Fired, ticks)
	}
	if j := waitScheduled(t, survivor, job); j.Status != api.JobCompleted || j.Owner == killed {
		t.Fatalf("the dead claimer's tick %s: %s on %s", job, j.Status, j.Owner)
	}
}

func waitScheduled(t *testing.T, c *api.Client, id string) *api.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := c.WaitJob(ctx, id)
	if err != nil {
		last, gerr := c.GetJob(context.Background(), id)
		t.Fatalf("wait %s: %v; now %+v (%v)", id, err, last, gerr)
	}
	return j
}

// TestScheduleRunsAsItsCreator: a schedule's jobs are submitted with the
// name and role of the token that created it: a read token cannot create
// one, an operator's jobs carry its name, and once its token is revoked
// the ticks fire no job and say why.
func TestScheduleRunsAsItsCreator(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	admin := f.Client()
	read, err := admin.CreateToken(ctx, "viewer", api.RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ClientWithToken(read.Token).CreateSchedule(ctx, everySecond("nope")); !api.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("create with a read token: %v, want 403", err)
	}
	op, err := admin.CreateToken(ctx, "ops-bot", api.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ClientWithToken(op.Token).CreateSchedule(ctx, everySecond("bot")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a job of the schedule", func() bool { return len(scheduleJobs(t, admin, "bot")) > 0 })
	for _, j := range scheduleJobs(t, admin, "bot") {
		if j.SubmittedBy != "ops-bot" {
			t.Fatalf("job %s submitted_by %q, want ops-bot", j.ID, j.SubmittedBy)
		}
	}
	if _, err := admin.RevokeToken(ctx, "ops-bot"); err != nil {
		t.Fatal(err)
	}
	var s *api.Schedule
	waitFor(t, 30*time.Second, "a tick refused for the revoked creator", func() bool {
		s = getSchedule(t, admin, "bot")
		return s.Skipped > 0 && strings.Contains(s.LastSkipReason, "revoked")
	})
	before := s.Fired
	waitFor(t, 30*time.Second, "more refused ticks", func() bool { return getSchedule(t, admin, "bot").Skipped > s.Skipped })
	if after := settled(t, admin, "bot"); after.Fired != before || int64(len(scheduleJobs(t, admin, "bot"))) != after.Fired {
		t.Fatalf("fired %d after the revocation (had %d), %d jobs", after.Fired, before, len(scheduleJobs(t, admin, "bot")))
	}
	if v := value(t, f.Controller.Registry(), "grid_schedule_skipped_total", map[string]string{"reason": "refused"}); v < 2 {
		t.Fatalf("grid_schedule_skipped_total{reason=refused} = %v", v)
	}
}
