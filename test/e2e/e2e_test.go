// Package e2e applies a Terraform rollout to the containerised fleet of
// make fleet-up (deploy/fleet): three clustered controllers and agent hosts
// in Docker with systemd as PID 1, installed from the packages. It checks
// every host with docker exec, a second apply, a host joining and a
// controller killed mid-apply.
//
// It runs only with GRID_E2E=1 (make e2e) and needs a Docker engine,
// dpkg-deb and terraform. It uses the fleet GRID_FLEET_DIR/fleet.env
// describes, bringing one up (deploy/fleet/fleet.sh up) when there is none.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
	"github.com/gridfleet/terraform-provider-grid/test/internal/debrepo"
)

const (
	pkg     = "grid-hello"
	project = "grid-fleet"
	// first is the controller the provider and the test talk to while it
	// answers: the first address of fleet.env's GRID_ADDR.
	first = "controller-1"
)

// fleet is the running fleet as the test sees it.
type fleet struct {
	root, dir string
	env       map[string]string
	client    *api.Client
}

func TestTerraformRolloutOnFleet(t *testing.T) {
	if os.Getenv("GRID_E2E") != "1" {
		t.Skip("end to end: set GRID_E2E=1 (or run make e2e) to apply a rollout to the containerised fleet")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("end to end: no Docker engine reachable (docker info: %v): %s", err, lastLines(out, 3))
	}
	if why := debrepo.Available(); why != "" {
		t.Skip("end to end: " + why)
	}
	tfBin, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("end to end: terraform is not installed")
	}
	start := time.Now()
	f := upFleet(t)
	agents := f.agents(t)
	f.waitOnline(t, agents)

	work := t.TempDir()
	debrepo.Write(t, work, filepath.Join(f.dir, "repo"), debrepo.Package{Name: pkg, Version: "1.0",
		Description: "GRID end-to-end test service",
		Files: map[string]string{
			"DEBIAN/postinst":           "#!/bin/sh\nset -e\nif [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n",
			"DEBIAN/postrm":             "#!/bin/sh\nset -e\nif [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n",
			"etc/grid-hello/":           "",
			"usr/share/doc/grid-hello/": "",
			// A restart takes two seconds, so a rolling restart of the
			// fleet lasts long enough to kill a controller in the middle.
			"lib/systemd/system/grid-hello.service": "[Unit]\nDescription=GRID end-to-end test service\n\n" +
				"[Service]\nEnvironmentFile=/etc/grid-hello/hello.conf\nExecStartPre=/bin/sleep 2\n" +
				"ExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n",
		}})

	tfDir := filepath.Join(work, "tf")
	if err := os.MkdirAll(tfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mainTF, err := os.ReadFile("main.tf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tfDir, "main.tf"), mainTF, 0o644); err != nil {
		t.Fatal(err)
	}
	tfr := f.terraform(t, tfBin, tfDir, providerDir(t, f.root, work))
	run := func(t *testing.T, args ...string) string { t.Helper(); out, _ := tfr.run(t, args); return out }

	t.Run("rollout", func(t *testing.T) {
		began := time.Now()
		run(t, "apply", "-auto-approve", "-var", "greeting=hello")
		t.Logf("first apply on %d hosts: %s", len(agents), time.Since(began).Round(100*time.Millisecond))
		outputs := tfr.outputs(t)
		if outputs["rollout_status"] != "completed" || outputs["restart_status"] != "completed" {
			t.Errorf("outputs %v: want rollout and restart completed", outputs)
		}
		if outputs["rollout_changed"] != true {
			t.Errorf("rollout_changed = %v on the first apply, want true", outputs["rollout_changed"])
		}
		for _, ct := range agents {
			checkHost(t, ct, "hello")
		}
		f.checkRolling(t, "install", 2)
		f.checkRolling(t, "restart", 1)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("second apply changes nothing", func(t *testing.T) {
		out, _ := tfr.run(t, []string{"plan", "-detailed-exitcode", "-var", "greeting=hello"}, 0)
		if !strings.Contains(out, "No changes.") {
			t.Errorf("plan with the same config: want No changes.\n%s", out)
		}
		out = run(t, "apply", "-auto-approve", "-var", "greeting=hello")
		if !strings.Contains(out, "0 added, 0 changed, 0 destroyed") {
			t.Errorf("second apply: want 0 added, 0 changed, 0 destroyed\n%s", out)
		}
		// Running the rollout again (as a drift check would) finds every
		// host as it should be.
		run(t, "apply", "-auto-approve", "-var", "greeting=hello", "-replace=grid_job.rollout")
		outputs := tfr.outputs(t)
		if outputs["rollout_changed"] != false || outputs["rollout_status"] != "completed" {
			t.Errorf("rollout run again: rollout_changed = %v, status %v; want false, completed",
				outputs["rollout_changed"], outputs["rollout_status"])
		}
	})

	t.Run("a new host joins", func(t *testing.T) {
		f.compose(t, "up", "-d", "--no-recreate", "--scale", fmt.Sprintf("agent=%d", len(agents)+1), "agent")
		all := f.agents(t)
		var added string
		for _, ct := range all {
			if !slices.Contains(agents, ct) {
				added = ct
			}
		}
		if len(all) != len(agents)+1 || added == "" {
			t.Fatalf("agents after scaling: %v, before %v", all, agents)
		}
		agents = all
		f.waitOnline(t, agents)
		out, _ := tfr.run(t, []string{"plan", "-detailed-exitcode", "-var", "greeting=hello"}, 2)
		for _, want := range []string{"grid_job.rollout will be updated in-place", fmt.Sprintf("+ %q", added)} {
			if !strings.Contains(out, want) {
				t.Errorf("plan after %s joined does not show %q:\n%s", added, want, out)
			}
		}
		run(t, "apply", "-auto-approve", "-var", "greeting=hello")
		checkHost(t, added, "hello")
		converged, _ := tfr.outputs(t)["converged_nodes"].([]any)
		if len(converged) != len(agents) {
			t.Errorf("converged_nodes %v, want all %d hosts", converged, len(agents))
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("controller killed mid-apply", func(t *testing.T) {
		type result struct {
			out  string
			code int
			err  error
		}
		done := make(chan result, 1)
		began := time.Now()
		go func() {
			out, code, err := tfr.exec("apply", "-auto-approve", "-var", "greeting=bonjour")
			done <- result{out, code, err}
		}()
		// The rolling restart (two seconds a host, one at a time) is the
		// longest job of the apply: kill a controller while it runs.
		job := waitJob(t, f, "restart", done)
		// The controller the provider talks to: its next request goes to
		// the next address. Agents connected to it reconnect to the
		// others, and the job, when it owned it, is taken over.
		victim := first
		t.Logf("job %s owned by %q at step %d: docker kill %s", job.ID, job.Owner, job.Step, victim)
		if out, err := exec.Command("docker", "kill", f.container(t, victim)).CombinedOutput(); err != nil {
			t.Fatalf("docker kill %s: %v: %s", victim, err, out)
		}
		t.Cleanup(func() {
			// Leave the fleet whole for the next run.
			f.compose(t, "up", "-d", "--no-recreate", "--scale", fmt.Sprintf("agent=%d", len(agents)), victim)
		})
		select {
		case r := <-done:
			if r.err != nil || r.code != 0 {
				t.Fatalf("apply with %s killed: exit %d (%v)\n%s", victim, r.code, r.err, r.out)
			}
		case <-time.After(10 * time.Minute):
			t.Fatalf("apply did not finish in 10m")
		}
		t.Logf("apply with %s killed: %s", victim, time.Since(began).Round(100*time.Millisecond))
		outputs := tfr.outputs(t)
		if outputs["rollout_status"] != "completed" || outputs["restart_status"] != "completed" {
			t.Errorf("outputs %v: want rollout and restart completed", outputs)
		}
		for _, ct := range agents {
			checkHost(t, ct, "bonjour")
		}
	})
	t.Logf("end to end on %d hosts: %s", len(agents), time.Since(start).Round(time.Second))
}

// upFleet returns a fresh fleet: the one GRID_FLEET_DIR/fleet.env
// describes when it answers and has run nothing yet, else a new one
// (deploy/fleet/fleet.sh down and up), so that every host starts without
// grid-hello and every registered node is a running container.
func upFleet(t *testing.T) *fleet {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("GRID_FLEET_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".fleet")
	}
	f := &fleet{root: root, dir: dir}
	why := "no fleet answers"
	if err := f.load(); err == nil {
		if why = f.used(t); why == "" {
			t.Logf("reusing the fleet of %s", filepath.Join(dir, "fleet.env"))
			return f
		}
	}
	script := filepath.Join(root, "deploy", "fleet", "fleet.sh")
	began := time.Now()
	for _, step := range []string{"down", "up"} {
		cmd := exec.Command(script, step)
		cmd.Env = append(os.Environ(), "GRID_FLEET_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deploy/fleet/fleet.sh %s: %v\n%s", step, err, out)
		}
	}
	t.Logf("new fleet (%s): %s", why, time.Since(began).Round(time.Second))
	if err := f.load(); err != nil {
		t.Fatalf("the fleet is up but does not answer: %v", err)
	}
	return f
}

// used says why the fleet is not fresh ("" when it is): a job ran on it,
// or its registered nodes are not its running agent containers.
func (f *fleet) used(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := f.client.ListJobsPage(ctx, api.JobQuery{Limit: 1})
	if err != nil {
		return fmt.Sprintf("listing its jobs: %v", err)
	}
	if len(jobs) > 0 {
		return "it has run jobs"
	}
	nodes, err := f.client.ListNodes(ctx)
	if err != nil {
		return fmt.Sprintf("listing its nodes: %v", err)
	}
	agents := f.agents(t)
	for _, n := range nodes {
		if !slices.Contains(agents, n.ID) {
			return fmt.Sprintf("node %s is not one of its agent containers %v", n.ID, agents)
		}
	}
	return ""
}

// load reads fleet.env and checks that the controller answers.
func (f *fleet) load() error {
	env, err := readEnv(filepath.Join(f.dir, "fleet.env"))
	if err != nil {
		return err
	}
	c, err := api.NewClient(api.ClientConfig{Address: env[api.EnvAddr], Token: env[api.EnvToken],
		CAFile: env[api.EnvCACert], Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		return err
	}
	f.env, f.client = env, c
	return nil
}

// readEnv reads the KEY=value (or export KEY=value) lines of a file.
func readEnv(path string) (map[string]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }()
	env := map[string]string{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	for _, k := range []string{api.EnvAddr, api.EnvToken, api.EnvCACert} {
		if env[k] == "" {
			return nil, fmt.Errorf("%s: no %s", path, k)
		}
	}
	return env, sc.Err()
}

func (f *fleet) compose(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("docker-compose", append([]string{"-p", project, "-f",
		filepath.Join(f.root, "deploy", "fleet", "compose.yaml")}, args...)...)
	cmd.Env = append(os.Environ(), "GRID_FLEET_DIR="+f.dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("docker-compose %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// agents are the agent containers' node ids: their hostnames, which
// docker exec also takes as the container (a prefix of its id).
func (f *fleet) agents(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, id := range strings.Fields(f.compose(t, "ps", "-q", "agent")) {
		out, err := exec.Command("docker", "inspect", "-f", "{{.Config.Hostname}}", id).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", id, err)
		}
		ids = append(ids, strings.TrimSpace(string(out)))
	}
	slices.Sort(ids)
	return ids
}

// container is the container of a compose service.
func (f *fleet) container(t *testing.T, service string) string {
	t.Helper()
	id := strings.TrimSpace(f.compose(t, "ps", "-q", service))
	if id == "" {
		t.Fatalf("no container of %s", service)
	}
	return id
}

func (f *fleet) waitOnline(t *testing.T, ids []string) {
	t.Helper()
	testwait.Until(t, 3*time.Minute, time.Second, fmt.Sprintf("agents %v online", ids), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nodes, err := f.client.ListNodes(ctx)
		if err != nil {
			return false
		}
		var online []string
		for _, n := range nodes {
			if n.Status == api.NodeOnline {
				online = append(online, n.ID)
			}
		}
		for _, id := range ids {
			if !slices.Contains(online, id) {
				return false
			}
		}
		return true
	})
}

// waitJob waits for a running job whose first task is the action, while
// the apply is running.
func waitJob[R any](t *testing.T, f *fleet, action string, applyDone <-chan R) *api.Job {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case r := <-applyDone:
			t.Fatalf("the apply ended before a %s job ran: %+v", action, r)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		jobs, err := f.client.ListJobsPage(ctx, api.JobQuery{Status: api.JobRunning})
		cancel()
		if err == nil {
			for i := range jobs {
				if j := &jobs[i]; len(j.Tasks) > 0 && j.Tasks[0].Action == action {
					return j
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no running %s job within 5m", action)
	return nil
}

// checkRolling checks in the latest job of the action (the first task of a
// step or pipeline) that at most limit nodes ran it at once.
func (f *fleet) checkRolling(t *testing.T, action string, limit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := f.client.ListJobsPage(ctx, api.JobQuery{Status: api.JobCompleted})
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	var job *api.Job
	for i := range jobs {
		j := &jobs[i]
		first := j.Tasks[0]
		if len(first.Tasks) > 0 {
			first = first.Tasks[0]
		}
		if first.Action == action && (job == nil || j.CreatedAt.After(job.CreatedAt)) {
			job = j
		}
	}
	if job == nil {
		t.Fatalf("no completed %s job", action)
	}
	full, err := f.client.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatalf("get job %s: %v", job.ID, err)
	}
	if full.MaxConcurrency == nil || full.MaxConcurrency.String() != fmt.Sprint(limit) {
		t.Errorf("job %s: max_concurrency %v, want %d", full.ID, full.MaxConcurrency, limit)
	}
	if n := maxOverlap(full); n > limit {
		t.Errorf("job %s: %d nodes ran at once, max_concurrency is %d", full.ID, n, limit)
	}
}

// checkHost checks on the host itself that grid-hello is installed, its
// config has the greeting and its unit runs with it.
func checkHost(t *testing.T, ct, greeting string) {
	t.Helper()
	if out, err := dockerExec(ct, "dpkg-query", "-W", "-f", "${Status} ${Version}", pkg); err != nil || out != "install ok installed 1.0" {
		t.Errorf("%s: dpkg-query %s: %q, %v; want install ok installed 1.0", ct, pkg, out, err)
	}
	if out, err := dockerExec(ct, "cat", "/etc/grid-hello/hello.conf"); err != nil || out != "GREETING="+greeting+"\n" {
		t.Errorf("%s: /etc/grid-hello/hello.conf: %q, %v; want GREETING=%s", ct, out, err, greeting)
	}
	if out, err := dockerExec(ct, "systemctl", "is-active", pkg); err != nil || strings.TrimSpace(out) != "active" {
		t.Errorf("%s: systemctl is-active %s: %q, %v", ct, pkg, out, err)
	}
	if out, err := dockerExec(ct, "systemctl", "is-enabled", pkg); err != nil || strings.TrimSpace(out) != "enabled" {
		t.Errorf("%s: systemctl is-enabled %s: %q, %v", ct, pkg, out, err)
	}
	// The running process has the config of its last start.
	out, err := dockerExec(ct, "systemctl", "show", "-P", "MainPID", pkg)
	if err != nil {
		t.Errorf("%s: MainPID of %s: %v %s", ct, pkg, err, out)
		return
	}
	env, err := dockerExec(ct, "cat", "/proc/"+strings.TrimSpace(out)+"/environ")
	if err != nil || !slices.Contains(strings.Split(env, "\x00"), "GREETING="+greeting) {
		t.Errorf("%s: %s runs without GREETING=%s in its environment (%q, %v)", ct, pkg, greeting, env, err)
	}
}

// maxOverlap is the most nodes whose runs of the first step overlapped in
// time, each run from its running event to its last event.
func maxOverlap(j *api.Job) int {
	type span struct{ from, to time.Time }
	var spans []span
	for _, r := range j.Results[0] {
		if r == nil || len(r.Events) == 0 {
			continue
		}
		i := slices.IndexFunc(r.Events, func(e api.Event) bool { return e.Status == api.StepRunning })
		if i < 0 {
			continue
		}
		spans = append(spans, span{r.Events[i].Time, r.Events[len(r.Events)-1].Time})
	}
	most := 0
	for _, s := range spans {
		n := 0
		for _, o := range spans {
			if o.from.Before(s.to) && s.from.Before(o.to) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// providerDir is a directory holding the provider binary (BIN, else a
// fresh build of the repository) as terraform-provider-grid, for
// dev_overrides.
func providerDir(t *testing.T, root, work string) string {
	t.Helper()
	dir := filepath.Join(work, "provider")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "terraform-provider-grid")
	if src := os.Getenv("BIN"); src != "" {
		if err := os.Symlink(src, bin); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// tf runs terraform in the test's directory with the fleet's environment
// and the provider from dev_overrides.
type tf struct {
	bin, dir string
	env      []string
}

func (f *fleet) terraform(t *testing.T, bin, dir, providerDir string) *tf {
	t.Helper()
	rc := filepath.Join(dir, "dev.tfrc")
	conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"gridfleet/grid\" = %q\n  }\n  direct {}\n}\n", providerDir)
	if err := os.WriteFile(rc, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"CHECKPOINT_DISABLE=1", "NO_COLOR=1")
	for k, v := range f.env {
		env = append(env, k+"="+v)
	}
	return &tf{bin: bin, dir: dir, env: env}
}

// exec runs terraform and returns its output and exit code (err only when
// it could not run).
func (r *tf) exec(args ...string) (string, int, error) {
	cmd := exec.Command(r.bin, append(args[:1:1], append([]string{"-no-color"}, args[1:]...)...)...)
	cmd.Dir, cmd.Env = r.dir, r.env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode(), nil
	}
	return string(out), 0, err
}

// run runs terraform and fails the test unless it exits with one of the
// codes (default 0).
func (r *tf) run(t *testing.T, args []string, codes ...int) (string, int) {
	t.Helper()
	if len(codes) == 0 {
		codes = []int{0}
	}
	out, code, err := r.exec(args...)
	if err != nil || !slices.Contains(codes, code) {
		t.Fatalf("terraform %s: exit %d (%v), want %v\n%s", strings.Join(args, " "), code, err, codes, out)
	}
	return out, code
}

// outputs are terraform's outputs as JSON values.
func (r *tf) outputs(t *testing.T) map[string]any {
	t.Helper()
	out, code, err := r.exec("output", "-json")
	if err != nil || code != 0 {
		t.Fatalf("terraform output: exit %d (%v)\n%s", code, err, out)
	}
	var raw map[string]struct {
		Value any `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, out)
	}
	values := map[string]any{}
	for k, v := range raw {
		values[k] = v.Value
	}
	return values
}

func dockerExec(ct string, args ...string) (string, error) {
	out, err := exec.Command("docker", append([]string{"exec", ct}, args...)...).CombinedOutput()
	return string(out), err
}

// lastLines keeps the end of a command's output for a message.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
