package agent

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestRegistration(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("reg1", func(c *Config) {
		c.Groups = []string{"web.dev", "db"}
		c.Registry = nil // the built-in set
	})

	n := h.nodeInfo("reg1")
	if n.ID != "reg1" || n.Status != api.NodeOnline || n.Version != Version {
		t.Errorf("node info: id %q status %q version %q, want reg1 online %q", n.ID, n.Status, n.Version, Version)
	}
	if n.Hostname == "" {
		t.Error("hostname is empty")
	}
	if !slices.Equal(n.Groups, []string{"web.dev", "db"}) {
		t.Errorf("groups = %v", n.Groups)
	}
	for _, b := range []string{"ping", "test"} {
		if !slices.Contains(n.Backends, b) {
			t.Errorf("backends %v lack %s", n.Backends, b)
		}
	}
	if len(n.Schemas) != 0 {
		t.Errorf("the nodes bucket holds %d schemas; want only the digest", len(n.Schemas))
	}
	if n.OnlineSince.IsZero() || n.LastSeen.Before(n.OnlineSince) {
		t.Errorf("online_since %v last_seen %v", n.OnlineSince, n.LastSeen)
	}
	info := a.Info()
	if n.SchemaDigest == "" || n.SchemaDigest != api.SchemaDigest(info.Schemas) {
		t.Fatalf("schema digest %q, want %q", n.SchemaDigest, api.SchemaDigest(info.Schemas))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, api.BucketSchemas)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, n.SchemaDigest)
	if err != nil {
		t.Fatalf("schemas/%s: %v", n.SchemaDigest, err)
	}
	var stored []api.BackendSchema
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if api.SchemaDigest(stored) != n.SchemaDigest {
		t.Errorf("stored schema set hashes to %s, want %s", api.SchemaDigest(stored), n.SchemaDigest)
	}
	if len(stored) != len(n.Backends) {
		t.Errorf("stored %d schemas for backends %v", len(stored), n.Backends)
	}

	// A second node with the same set reuses the digest (Create must not
	// fail on an existing key).
	h.startAgent("reg2", func(c *Config) { c.Registry = nil })
	if d := h.nodeInfo("reg2").SchemaDigest; d != n.SchemaDigest {
		t.Errorf("second node digest %s, want %s", d, n.SchemaDigest)
	}
}

func TestHeartbeatRefreshesLastSeen(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("hb", func(c *Config) { c.HeartbeatInterval = Duration(100 * time.Millisecond) })
	first := h.nodeInfo("hb")
	eventually(t, 3*time.Second, "a heartbeat with a newer last_seen", func() bool {
		n := h.nodeInfo("hb")
		return n.LastSeen.After(first.LastSeen) && n.Status == api.NodeOnline && n.OnlineSince.Equal(first.OnlineSince)
	})
}

func TestGracefulShutdownFinishesTasksThenMarksOffline(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, stop := h.startAgent("gs", nil)
	h.send(api.NodeCommandSubject("gs", "ping", "sleep"), command("gs-job", "ping", "sleep", api.Params{"duration": "400ms"}))
	eventually(t, 3*time.Second, "the task to start", func() bool { return len(h.resultsOf("gs-job", api.ResultRunning)) == 1 })

	stop()
	eventually(t, 3*time.Second, "shutdown to begin", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.stopping
	})
	// While the agent waits for the sleep, it takes no new command.
	h.send(api.NodeCommandSubject("gs", "ping", "echo"), echo("gs-late"))
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
	// The running task was allowed to finish and its result was published
	// before the agent stopped.
	if r := h.resultsOf("gs-job", api.StepSuccess); len(r) != 1 {
		t.Fatalf("want the running task's success before Done, got %v", h.resultsOf("gs-job", ""))
	}
	if got := h.resultsOf("gs-late", ""); len(got) != 0 {
		t.Errorf("a stopping agent took a command: %v", got)
	}
	if n := h.nodeInfo("gs"); n.Status != api.NodeOffline {
		t.Errorf("status after shutdown = %q, want offline", n.Status)
	}
}

func TestShutdownGraceInterruptsLongTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, stop := h.startAgent("grace", func(c *Config) { c.ShutdownGrace = Duration(200 * time.Millisecond) })
	h.send(api.NodeCommandSubject("grace", "ping", "sleep"), command("grace-job", "ping", "sleep", api.Params{"duration": "1m"}))
	eventually(t, 3*time.Second, "the task to start", func() bool { return len(h.resultsOf("grace-job", api.ResultRunning)) == 1 })
	began := time.Now()
	stop()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("shutdown took %s with a 200ms grace", took)
	}
	r := h.final("grace-job", "grace", time.Second)
	if r.Status != api.StepFailed || !contains(r.Error, "shut down") {
		t.Errorf("interrupted task: status %q error %q", r.Status, r.Error)
	}
	if n := h.nodeInfo("grace"); n.Status != api.NodeOffline {
		t.Errorf("status = %q, want offline", n.Status)
	}
}

func TestKillLeavesNodeOnline(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("crash", nil)
	a.Kill()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("killed agent did not stop")
	}
	if n := h.nodeInfo("crash"); n.Status != api.NodeOnline {
		t.Errorf("status after a crash = %q; the registration must be left for the heartbeat timeout", n.Status)
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("web1", func(c *Config) { c.Groups = []string{"web.dev.us-east"} })
	cases := []struct {
		name    string
		subject string
		runs    bool
	}{
		{"all", "cmd.all.ping.echo", true},
		{"own node", api.NodeCommandSubject("web1", "ping", "echo"), true},
		{"other node", api.NodeCommandSubject("web2", "ping", "echo"), false},
		{"top group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web"}, "ping", "echo"), true},
		{"mid group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web.dev"}, "ping", "echo"), true},
		{"own group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web.dev.us-east"}, "ping", "echo"), true},
		{"sibling group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web.prod"}, "ping", "echo"), false},
		{"deeper group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "web.dev.us-east.a"}, "ping", "echo"), false},
		{"other group", api.CommandSubject(api.Target{Scope: api.ScopeGroup, Value: "db"}, "ping", "echo"), false},
	}
	for i, c := range cases {
		h.send(c.subject, echo(jobName("subj", i)))
	}
	// Every positive case answers; a sentinel sent last on the node subject
	// bounds how long a wrongly delivered negative could still take.
	h.send(api.NodeCommandSubject("web1", "ping", "echo"), echo("subj-sentinel"))
	for i, c := range cases {
		if c.runs {
			r := h.final(jobName("subj", i), "web1", 3*time.Second)
			if r.Status != api.StepSuccess || r.Output != "hello "+jobName("subj", i) {
				t.Errorf("%s: status %q output %q error %q", c.name, r.Status, r.Output, r.Error)
			}
		}
	}
	h.final("subj-sentinel", "web1", 3*time.Second)
	time.Sleep(100 * time.Millisecond)
	positives := int64(1) // the sentinel
	for _, c := range cases {
		if c.runs {
			positives++
		}
	}
	if got := a.stats.received.Load(); got != positives {
		t.Errorf("the agent received %d commands, want %d", got, positives)
	}
	for i, c := range cases {
		if !c.runs {
			if got := h.resultsOf(jobName("subj", i), ""); len(got) != 0 {
				t.Errorf("%s (%s): the agent answered %v", c.name, c.subject, got)
			}
		}
	}
}

func jobName(prefix string, i int) string { return prefix + "-" + string(rune('a'+i)) }

func TestBroadcastFiltering(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("bf", func(c *Config) { c.Groups = []string{"web"} })
	since := a.Info().OnlineSince
	cases := []struct {
		name    string
		subject string
		mutate  func(*api.Command)
		runs    bool
	}{
		{"broadcast", "cmd.all.ping.echo", nil, true},
		{"excluded from all", "cmd.all.ping.echo", func(c *api.Command) { c.Exclude = []string{"x", "bf"} }, false},
		{"excluded from group", "cmd.group.web.ping.echo", func(c *api.Command) { c.Exclude = []string{"bf"} }, false},
		{"others excluded", "cmd.group.web.ping.echo", func(c *api.Command) { c.Exclude = []string{"bf2"} }, true},
		{"resolved before online", "cmd.all.ping.echo", func(c *api.Command) { c.ResolvedAt = since.Add(-time.Second) }, false},
		{"resolved at online", "cmd.group.web.ping.echo", func(c *api.Command) { c.ResolvedAt = since }, true},
		{"no resolved_at", "cmd.all.ping.echo", func(c *api.Command) { c.ResolvedAt = time.Time{} }, true},
		// A command addressed to the node runs whatever the broadcast
		// fields say: the controller chose this node.
		{"node ignores exclude", api.NodeCommandSubject("bf", "ping", "echo"), func(c *api.Command) { c.Exclude = []string{"bf"} }, true},
		{"node ignores resolved_at", api.NodeCommandSubject("bf", "ping", "echo"), func(c *api.Command) { c.ResolvedAt = since.Add(-time.Hour) }, true},
	}
	wantIgnored := int64(0)
	for i, c := range cases {
		cmd := echo(jobName("bf", i))
		if c.mutate != nil {
			c.mutate(&cmd)
		}
		if !c.runs {
			wantIgnored++
		}
		h.send(c.subject, cmd)
	}
	for i, c := range cases {
		if c.runs {
			if r := h.final(jobName("bf", i), "bf", 3*time.Second); r.Status != api.StepSuccess {
				t.Errorf("%s: status %q error %q", c.name, r.Status, r.Error)
			}
		}
	}
	eventually(t, 3*time.Second, "ignored broadcasts to be counted", func() bool { return a.stats.ignored.Load() == wantIgnored })
	for i, c := range cases {
		if !c.runs {
			if got := h.resultsOf(jobName("bf", i), ""); len(got) != 0 {
				t.Errorf("%s: the agent answered %v", c.name, got)
			}
		}
	}
}

func TestDuplicateRunsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := &probe{}
	a, _ := h.startAgent("dup", func(c *Config) {
		c.Groups = []string{"g"}
		c.Registry = testRegistry(t, p)
	})
	cmd := command("dup-job", "probe", "count", api.Params{"hold": "200ms"})
	// The same (job, step, attempt) on every subject the node hears, twice
	// while it runs and once after.
	h.send(api.NodeCommandSubject("dup", "probe", "count"), cmd)
	h.send("cmd.all.probe.count", cmd)
	h.send("cmd.group.g.probe.count", cmd)
	h.final("dup-job", "dup", 3*time.Second)
	if got := h.resultsOf("dup-job", api.StepSuccess); len(got) != 1 {
		t.Errorf("%d success results while duplicates arrived mid-run, want 1", len(got))
	}
	// Asked again after it finished (a controller that restarted and never
	// saw the answer), the agent re-sends the recorded result without
	// running the backend.
	h.send(api.NodeCommandSubject("dup", "probe", "count"), cmd)
	eventually(t, 3*time.Second, "three duplicates", func() bool { return a.stats.duplicates.Load() == 3 })
	eventually(t, 3*time.Second, "the result sent again", func() bool {
		return len(h.resultsOf("dup-job", api.StepSuccess)) == 2
	})
	if n := p.runs.Load(); n != 1 {
		t.Errorf("backend ran %d times, want 1", n)
	}

	// A retry is a new attempt and runs again.
	retry := cmd
	retry.Attempt = 2
	h.send(api.NodeCommandSubject("dup", "probe", "count"), retry)
	eventually(t, 3*time.Second, "the retry to finish", func() bool {
		return len(h.resultsOf("dup-job", api.StepSuccess)) == 3
	})
	if n := p.runs.Load(); n != 2 {
		t.Errorf("backend ran %d times after a retry, want 2", n)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("cx", func(c *Config) { c.MaxConcurrent = 1 })
	h.send(api.NodeCommandSubject("cx", "ping", "sleep"), command("cx-job", "ping", "sleep", api.Params{"duration": "1m"}))
	eventually(t, 3*time.Second, "the sleep to start", func() bool { return len(h.resultsOf("cx-job", api.ResultRunning)) == 1 })
	// A second step of the same job waits for the only slot; the cancel
	// must fail it without running it.
	queued := command("cx-job", "ping", "echo", nil)
	queued.TaskIndex = 1
	h.send(api.NodeCommandSubject("cx", "ping", "echo"), queued)
	eventually(t, 3*time.Second, "the second step to queue", func() bool { return a.stats.accepted.Load() == 2 })

	began := time.Now()
	h.cancelJob("cx-job")
	r := h.final("cx-job", "cx", 3*time.Second)
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("cancel took %s to interrupt the sleep", took)
	}
	if r.Status != api.StepFailed || !contains(r.Error, "cancel") {
		t.Errorf("cancelled task: status %q error %q", r.Status, r.Error)
	}
	if time.Duration(r.Duration) > 5*time.Second || r.Attempt != 1 || r.Timestamp.IsZero() {
		t.Errorf("cancelled task result: duration %s attempt %d timestamp %v", r.Duration, r.Attempt, r.Timestamp)
	}
	eventually(t, 3*time.Second, "the queued step's failure", func() bool {
		for _, r := range h.resultsOf("cx-job", api.StepFailed) {
			if r.TaskIndex == 1 {
				return contains(r.Error, "cancel")
			}
		}
		return false
	})
	for _, r := range h.resultsOf("cx-job", api.ResultRunning) {
		if r.TaskIndex == 1 {
			t.Error("the queued step started after the cancel")
		}
	}

	// A command of a cancelled job that arrives late does not run either.
	late := command("cx-job", "ping", "echo", nil)
	late.TaskIndex = 2
	h.send(api.NodeCommandSubject("cx", "ping", "echo"), late)
	eventually(t, 3*time.Second, "the late step's failure", func() bool {
		for _, r := range h.resultsOf("cx-job", api.StepFailed) {
			if r.TaskIndex == 2 {
				return contains(r.Error, "cancel")
			}
		}
		return false
	})
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("to", func(c *Config) { c.TaskTimeout = Duration(300 * time.Millisecond) })
	cases := []struct {
		name    string
		timeout string
		want    string
	}{
		{"command timeout", "200ms", "timed out after 200ms"},
		{"agent default", "", "timed out after 300ms"},
		{"invalid timeout", "soon", "invalid task timeout"},
	}
	for i, c := range cases {
		cmd := command(jobName("to", i), "ping", "sleep", api.Params{"duration": "1m"})
		cmd.Timeout = c.timeout
		h.send(api.NodeCommandSubject("to", "ping", "sleep"), cmd)
	}
	for i, c := range cases {
		r := h.final(jobName("to", i), "to", 3*time.Second)
		if r.Status != api.StepFailed || !contains(r.Error, c.want) {
			t.Errorf("%s: status %q error %q, want failed with %q", c.name, r.Status, r.Error, c.want)
		}
	}
}

func TestRefusalsAndOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("ref", nil)
	h.startAgent("strict", func(c *Config) { c.Allow = []string{"test", "probe.count"} })
	cases := []struct {
		name   string
		node   string
		cmd    api.Command
		status string
		want   string // in Error for failures, in Output for successes
	}{
		{"unknown action", "ref", command("r-a", "ping", "nope", nil), api.StepFailed, "unknown action"},
		{"unknown backend", "ref", command("r-b", "nope", "echo", nil), api.StepFailed, "unknown backend"},
		{"missing param", "ref", command("r-c", "ping", "sleep", nil), api.StepFailed, "invalid params"},
		{"bad param", "ref", command("r-d", "ping", "sleep", api.Params{"duration": "forever"}), api.StepFailed, "invalid params"},
		{"unknown param", "ref", command("r-e", "ping", "echo", api.Params{"colour": "red"}), api.StepFailed, "invalid params"},
		{"backend error", "ref", command("r-f", "test", "fail", api.Params{"message": "boom"}), api.StepFailed, "boom"},
		{"panic", "ref", command("r-g", "probe", "panic", nil), api.StepFailed, "panicked"},
		{"check mode unsupported", "ref", checkMode(command("r-h", "probe", "write", nil)), api.StepFailed, "check mode"},
		{"write", "ref", command("r-i", "probe", "write", nil), api.StepSuccess, "wrote"},
		{"not allowed", "strict", command("r-j", "ping", "echo", nil), api.StepFailed, "not allowed"},
		{"allowed action", "strict", command("r-k", "probe", "count", nil), api.StepSuccess, "run 1"},
		{"action outside the allowed one", "strict", command("r-l", "probe", "write", nil), api.StepFailed, "not allowed"},
	}
	for _, c := range cases {
		h.send(api.NodeCommandSubject(c.node, c.cmd.Task.Backend, c.cmd.Task.Action), c.cmd)
	}
	for _, c := range cases {
		r := h.final(c.cmd.JobID, c.node, 3*time.Second)
		text := r.Error
		if c.status == api.StepSuccess {
			text = r.Output
		}
		if r.Status != c.status || !contains(text, c.want) {
			t.Errorf("%s: status %q output %q error %q; want %s with %q", c.name, r.Status, r.Output, r.Error, c.status, c.want)
		}
	}
	if r := h.final("r-i", "ref", time.Second); !r.Changed {
		t.Error("write: changed not reported")
	}
	if r := h.final("r-k", "strict", time.Second); r.Facts["run"] != float64(1) {
		t.Errorf("facts = %v, want run 1", r.Facts)
	}
}

func checkMode(c api.Command) api.Command {
	c.CheckMode = true
	return c
}

func TestProgressAndCheckMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("pg", nil)
	h.send(api.NodeCommandSubject("pg", "probe", "progress"), checkMode(command("pg-job", "probe", "progress", nil)))
	r := h.final("pg-job", "pg", 5*time.Second)
	if r.Status != api.StepSuccess || r.Facts["check_mode"] != true {
		t.Errorf("status %q facts %v error %q; want success with check_mode true", r.Status, r.Facts, r.Error)
	}
	prog := h.resultsOf("pg-job", api.ResultProgress)
	// ~120 reports over 600ms, rate-limited to one per 200ms: 3 or 4.
	if len(prog) < 2 || len(prog) > 5 {
		t.Errorf("%d progress results, want 2..5 after rate limiting", len(prog))
	}
	for _, p := range prog {
		if p.Progress == nil || *p.Progress < 0 || *p.Progress > 100 || !contains(p.Output, "step") {
			t.Errorf("progress result %+v", p)
		}
		if p.Timestamp.After(r.Timestamp) {
			t.Error("a progress report came after the final result")
		}
	}
	if got := h.resultsOf("pg-job", api.ResultRunning); len(got) != 1 {
		t.Errorf("%d running results, want 1", len(got))
	}
}

func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startAgent("mc", func(c *Config) { c.MaxConcurrent = 2 })
	for i := range 4 {
		h.send(api.NodeCommandSubject("mc", "ping", "sleep"), command(jobName("mc", i), "ping", "sleep", api.Params{"duration": "250ms"}))
	}
	type span struct{ start, end time.Time }
	var spans []span
	for i := range 4 {
		job := jobName("mc", i)
		f := h.final(job, "mc", 5*time.Second)
		if f.Status != api.StepSuccess {
			t.Fatalf("%s: %s %s", job, f.Status, f.Error)
		}
		run := h.resultsOf(job, api.ResultRunning)
		if len(run) != 1 {
			t.Fatalf("%s: %d running results", job, len(run))
		}
		spans = append(spans, span{run[0].Timestamp, f.Timestamp})
	}
	// At no task's start may two others be running.
	for i, s := range spans {
		overlapping := 0
		for j, o := range spans {
			if i != j && !o.start.After(s.start) && o.end.After(s.start) {
				overlapping++
			}
		}
		if overlapping >= 2 {
			t.Errorf("task %d started while %d others ran; max_concurrent is 2", i, overlapping)
		}
	}
}
