// Package hosttest runs the apt, systemd, user and config backends against
// a real Debian system: a container built from a debootstrap root
// filesystem, with systemd as PID 1 and the grid agent inside, driven by a
// controller in the test process. The container shares the host's
// network, so the agent reaches the controller's NATS server on 127.0.0.1.
// TestTerraformHostBaseline instead applies a Terraform config to two
// containers on Docker's bridge, each with a network namespace (and so
// nftables) of its own, reaching NATS on the bridge's address; it also
// needs terraform, and apt-get to fetch nftables for the containers.
//
// It needs a Docker engine and, the first time, debootstrap and root to
// build the image; it runs only with GRID_HOST_TESTS=1 (make host-test).
package hosttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/test/internal/debrepo"
)

const (
	// image is the cached Debian image with systemd (deploy/image); remove
	// it (docker rmi) to rebuild. GRID_DEBIAN_MIRROR sets the mirror it is
	// built from.
	image = "grid-debian-systemd:bookworm"
	// node is the agent's name inside the container.
	node = "ct-1"
	pkg  = "grid-hello"
)

func TestAptAndSystemdInContainer(t *testing.T) {
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("host test: set GRID_HOST_TESTS=1 (or run make host-test) to run apt and systemd in a Docker container")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("host test: the docker command is not installed")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("host test: no Docker engine reachable (docker info: %v): %s", err, lastLines(out, 5))
	}
	if why := debrepo.Available(); why != "" {
		t.Skip("host test: " + why)
	}
	ensureImage(t)

	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	grid := buildGrid(t, work)
	repo := buildRepo(t, work)

	// The controller runs in this process. Agents inside the container
	// heartbeat at the default 10s, so offline detection keeps its default
	// too.
	f := fleettest.Start(t, fleet.Options{Agents: 0, Controller: func(c *controller.Config) {
		c.NATSAddr = "127.0.0.1:0"
		c.NodeOfflineAfter = config.Duration(30 * time.Second)
	}})
	natsURL := f.NATSURL()
	if u, err := url.Parse(natsURL); err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("NATS URL %q: want one on 127.0.0.1, which the container shares", natsURL)
	}

	ct, systemdReason := startContainer(t, work, grid, repo)
	startAgent(t, ct, natsURL, f.CAFile(), f.JoinTokenFile())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.WaitOnline(ctx, node); err != nil {
		t.Fatalf("agent %s in the container did not come online: %v\nagent log:\n%s", node, err, agentLog(ct))
	}
	c := f.Client()

	t.Run("apt", func(t *testing.T) {
		run(t, c, "apt", "update", nil, true)

		r := run(t, c, "apt", "install", api.Params{"package": pkg}, true)
		if r.Facts["version"] != "1.0" || r.Facts["installed"] != true {
			t.Errorf("install facts %v, want version 1.0 installed", r.Facts)
		}
		if out, err := dockerExec(ct, "test", "-f", "/usr/share/grid-hello/hello"); err != nil {
			t.Errorf("/usr/share/grid-hello/hello is not in the container after install: %v %s", err, out)
		}
		r = run(t, c, "apt", "install", api.Params{"package": pkg}, false)
		if r.Facts["version"] != "1.0" {
			t.Errorf("second install facts %v, want version 1.0", r.Facts)
		}
		r = run(t, c, "apt", "install", api.Params{"package": pkg, "version": "1.0"}, false)
		if r.Facts["version"] != "1.0" {
			t.Errorf("install at the installed version: facts %v, want version 1.0", r.Facts)
		}
	})

	t.Run("systemd", func(t *testing.T) {
		if systemdReason != "" {
			t.Skip("systemd in a container does not work on this machine: " + systemdReason)
		}
		if out, err := dockerExec(ct, "test", "-f", "/usr/share/grid-hello/hello"); err != nil {
			t.Skipf("%s is not installed (the apt subtest failed): %v %s", pkg, err, out)
		}
		unit := api.Params{"unit": pkg}
		r := run(t, c, "systemd", "status", unit, false)
		if r.Facts["active_state"] != "inactive" {
			t.Errorf("status before start: %v, want inactive", r.Facts)
		}
		r = run(t, c, "systemd", "start", unit, true)
		if r.Facts["active_state"] != "active" {
			t.Errorf("start facts %v, want active", r.Facts)
		}
		r = run(t, c, "systemd", "status", unit, false)
		if r.Facts["active_state"] != "active" || r.Facts["sub_state"] != "running" {
			t.Errorf("status after start: %v, want active (running)", r.Facts)
		}
		if out, err := dockerExec(ct, "systemctl", "is-active", pkg); err != nil || strings.TrimSpace(out) != "active" {
			t.Errorf("systemctl is-active %s in the container: %q, %v", pkg, out, err)
		}
		run(t, c, "systemd", "start", unit, false)
		r = run(t, c, "systemd", "stop", unit, true)
		if r.Facts["active_state"] != "inactive" {
			t.Errorf("stop facts %v, want inactive", r.Facts)
		}
		run(t, c, "systemd", "stop", unit, false)

		// The unit has an [Install] section, so it can be enabled.
		r = run(t, c, "systemd", "enable", unit, true)
		if r.Facts["enabled"] != "enabled" {
			t.Errorf("enable facts %v, want enabled", r.Facts)
		}
		run(t, c, "systemd", "enable", unit, false)
		r = run(t, c, "systemd", "disable", unit, true)
		if r.Facts["enabled"] != "disabled" {
			t.Errorf("disable facts %v, want disabled", r.Facts)
		}
		run(t, c, "systemd", "disable", unit, false)
	})

	// The read-only backends look at the same host: the unit's state, its
	// process and its journal, with systemd's own tools and /proc.
	t.Run("look", func(t *testing.T) {
		if systemdReason != "" {
			t.Skip("systemd in a container does not work on this machine: " + systemdReason)
		}
		if out, err := dockerExec(ct, "test", "-f", "/usr/share/grid-hello/hello"); err != nil {
			t.Skipf("%s is not installed (the apt subtest failed): %v %s", pkg, err, out)
		}
		unit := pkg + ".service"
		run(t, c, "systemd", "start", api.Params{"unit": pkg}, true)
		out, err := dockerExec(ct, "systemctl", "show", "--property=MainPID", "--value", unit)
		mainPID, _ := strconv.Atoi(strings.TrimSpace(out))
		if err != nil || mainPID <= 0 {
			t.Fatalf("MainPID of %s: %q %v", unit, out, err)
		}

		r := run(t, c, "health", "unit", api.Params{"unit": unit}, false)
		if r.Facts["active_state"] != "active" || r.Facts["healthy"] != true {
			t.Errorf("health.unit facts %v", r.Facts)
		}
		r = run(t, c, "health", "process", api.Params{"name": "sleep"}, false)
		if !slices.Contains(ints(r.Facts["pids"]), mainPID) {
			t.Errorf("health.process sleep: pids %v lack the unit's main pid %d", r.Facts["pids"], mainPID)
		}
		r = run(t, c, "proc", "find", api.Params{"pattern": "^/bin/sleep infinity$"}, false)
		if r.Facts["count"] != float64(1) {
			t.Errorf("proc.find: %v", r.Facts)
		}
		r = run(t, c, "journald", "logs", api.Params{"unit": unit, "lines": "20"}, false)
		if !strings.Contains(r.Output, "GRID host test service") {
			t.Errorf("journald.logs of %s lacks systemd's start message:\n%s", unit, r.Output)
		}
		r = run(t, c, "journald", "boots", nil, false)
		if r.Facts["count"].(float64) < 1 {
			t.Errorf("journald.boots: %v", r.Facts)
		}
		r = run(t, c, "journald", "disk_usage", nil, false)
		if r.Facts["bytes"].(float64) <= 0 {
			t.Errorf("journald.disk_usage: %v", r.Facts)
		}

		// Stopped, the unit fails its check: a rollout gate would stop here.
		run(t, c, "systemd", "stop", api.Params{"unit": pkg}, true)
		r = runFailing(t, c, "health", "unit", api.Params{"unit": unit})
		if r.Facts["active_state"] != "inactive" || !strings.Contains(r.Error, "not active") {
			t.Errorf("health.unit of a stopped unit: %v (%s)", r.Facts, r.Error)
		}
		runFailing(t, c, "health", "process", api.Params{"name": "sleep"})
	})

	t.Run("apt remove", func(t *testing.T) {
		r := run(t, c, "apt", "remove", api.Params{"package": pkg}, true)
		if r.Facts["installed"] != false {
			t.Errorf("remove facts %v, want not installed", r.Facts)
		}
		if out, err := dockerExec(ct, "test", "-e", "/usr/share/grid-hello/hello"); err == nil {
			t.Errorf("/usr/share/grid-hello/hello is still in the container after remove %s", out)
		}
		run(t, c, "apt", "remove", api.Params{"package": pkg}, false)
	})

	// Params are checked against the schema's patterns before any agent
	// sees them: a shell metacharacter is a 400, and nothing runs.
	t.Run("metacharacters refused", func(t *testing.T) {
		for _, tc := range []struct{ backend, action, param string }{
			{"apt", "install", "package"},
			{"apt", "remove", "package"},
			{"systemd", "start", "unit"},
		} {
			spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: node},
				Tasks: []api.Phase{{Backend: tc.backend, Action: tc.action,
					Params: api.Params{tc.param: pkg + "; touch /tmp/pwned"}}}}
			j, err := c.SubmitJob(context.Background(), spec)
			if !api.IsStatus(err, 400) {
				t.Errorf("%s.%s with %s %q: got job %v, err %v; want a 400", tc.backend, tc.action, tc.param,
					spec.Tasks[0].Params[tc.param], j, err)
			}
		}
		// A job that did get through would have run by now.
		time.Sleep(time.Second)
		if out, err := dockerExec(ct, "test", "-e", "/tmp/pwned"); err == nil {
			t.Errorf("/tmp/pwned exists in the container %s", out)
		}
	})
}

// run submits one action for the container's node, waits for it and checks
// it succeeded with the given changed flag.
func run(t *testing.T, c *api.Client, backend, action string, params api.Params, changed bool) *api.NodeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: node},
		Tasks: []api.Phase{{Backend: backend, Action: action, Params: params}}}
	sub, err := c.SubmitJob(ctx, spec)
	if err != nil {
		t.Fatalf("submit %s.%s %v: %v", backend, action, params, err)
	}
	j, err := c.WaitJob(ctx, sub.ID)
	if err != nil {
		t.Fatalf("wait for %s.%s %v: %v", backend, action, params, err)
	}
	r := j.Results.Node(0, node)
	if j.Status != api.JobCompleted || r == nil || r.Status != api.StepSuccess {
		t.Fatalf("%s.%s %v: job %s (%s), result %+v", backend, action, params, j.Status, j.Error, r)
	}
	if r.Changed != changed {
		t.Errorf("%s.%s %v: changed=%v, want %v; output: %s", backend, action, params, r.Changed, changed, r.Output)
	}
	t.Logf("%s.%s %v: changed=%v facts=%v (%s)", backend, action, params, r.Changed, r.Facts, time.Duration(r.Duration))
	return r
}

// runFailing submits one action for the container's node and checks that
// it failed there.
func runFailing(t *testing.T, c *api.Client, backend, action string, params api.Params) *api.NodeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: node},
		Tasks: []api.Phase{{Backend: backend, Action: action, Params: params}}}
	sub, err := c.SubmitJob(ctx, spec)
	if err != nil {
		t.Fatalf("submit %s.%s %v: %v", backend, action, params, err)
	}
	j, err := c.WaitJob(ctx, sub.ID)
	if err != nil {
		t.Fatalf("wait for %s.%s %v: %v", backend, action, params, err)
	}
	r := j.Results.Node(0, node)
	if r == nil || r.Status != api.StepFailed {
		t.Fatalf("%s.%s %v: job %s, result %+v; want the step failed", backend, action, params, j.Status, r)
	}
	t.Logf("%s.%s %v: failed as expected: %s facts=%v", backend, action, params, r.Error, r.Facts)
	return r
}

// ints reads a list of numbers from facts (JSON numbers are float64).
func ints(v any) []int {
	var out []int
	l, _ := v.([]any)
	for _, x := range l {
		if f, ok := x.(float64); ok {
			out = append(out, int(f))
		}
	}
	return out
}

// ensureImage builds the Debian image with deploy/image/debian-systemd.sh
// (debootstrap, then docker import) unless Docker has it. The fleet of
// make fleet-up starts from the same image. Exit status 2 means this
// machine cannot build it, which skips the test.
func ensureImage(t *testing.T) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "image", "debian-systemd.sh"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := exec.Command(script, image).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		t.Skipf("host test: %s", lastLines(out, 20))
	case err != nil:
		t.Fatalf("%s: %v\n%s", script, err, lastLines(out, 20))
	}
	t.Logf("%s (%s)", strings.TrimSpace(string(out)), time.Since(start).Round(100*time.Millisecond))
}

// buildGrid builds a static grid binary from the repository root.
func buildGrid(t *testing.T, work string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	bin := filepath.Join(work, "grid")
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built %s in %s", bin, time.Since(start).Round(100*time.Millisecond))
	return bin
}

// buildRepo builds grid-hello 1.0 (a file and a unit that sleeps) and a flat
// apt repository holding it, and returns the repository's directory.
func buildRepo(t *testing.T, work string) string {
	t.Helper()
	repo := filepath.Join(work, "repo")
	debrepo.Write(t, work, repo, debrepo.Package{Name: pkg, Version: "1.0",
		Description: "GRID host test package",
		Files: map[string]string{
			// The unit file appears or goes with the package; systemd should know.
			"DEBIAN/postinst":            "#!/bin/sh\nset -e\nif [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n",
			"DEBIAN/postrm":              "#!/bin/sh\nset -e\nif [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n",
			"usr/share/grid-hello/hello": "hello from grid-hello 1.0\n",
			"lib/systemd/system/grid-hello.service": "[Unit]\nDescription=GRID host test service\n\n" +
				"[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n",
		}})
	return repo
}

// systemdRecipes are the ways to run systemd as PID 1 in a container,
// tried in order. --privileged is the usual one; an engine whose own
// capability bounding set lacks a capability (so it cannot grant all of
// them) refuses it, and there CAP_SYS_ADMIN without the seccomp and AppArmor
// profiles (which block mount) is enough for systemd. Both share the host's
// cgroup tree, where systemd makes its cgroups under the container's.
var systemdRecipes = []struct {
	name string
	args []string
}{
	{"privileged", []string{"--privileged"}},
	{"CAP_SYS_ADMIN, unconfined", []string{"--cap-add", "SYS_ADMIN",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"}},
}

// startContainer runs the image with systemd as PID 1, the grid binary and
// the repository mounted, and waits for systemd to finish booting. When
// systemd cannot run here, it says why and starts the container on a plain
// sleep instead, so the apt part still runs.
func startContainer(t *testing.T, work, grid, repo string) (name, systemdReason string) {
	t.Helper()
	sources := filepath.Join(work, "grid-test.list")
	if err := os.WriteFile(sources, []byte("deb [trusted=yes] file:/repo ./\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name = "grid-hosttest-" + hex.EncodeToString(suffix)
	common := []string{"run", "-d", "--name", name, "--hostname", name, "--network", "host",
		"-v", grid + ":/usr/local/bin/grid:ro",
		"-v", repo + ":/repo:ro",
		"-v", sources + ":/etc/apt/sources.list.d/grid-test.list:ro",
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	var failures []string
	for _, r := range systemdRecipes {
		args := append(append([]string{}, common...), r.args...)
		args = append(args, "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
			"--tmpfs", "/run", "--tmpfs", "/run/lock", "-e", "container=docker",
			image, "/lib/systemd/systemd")
		start := time.Now()
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: docker run: %v: %s", r.name, err, lastLines(out, 3)))
			_ = exec.Command("docker", "rm", "-f", name).Run()
			continue
		}
		state, err := waitSystemd(name, time.Minute)
		if err == nil {
			for _, f := range failures {
				t.Logf("systemd recipe failed, tried the next: %s", f)
			}
			t.Logf("container %s (%s): systemd %s after %s", name, r.name, state, time.Since(start).Round(100*time.Millisecond))
			return name, ""
		}
		// systemd logs to its journal, not to the container's output.
		jobs, _ := dockerExec(name, "systemctl", "list-jobs", "--no-pager")
		journal, _ := dockerExec(name, "journalctl", "-b", "-p", "warning", "-n", "20", "--no-pager")
		failures = append(failures, fmt.Sprintf("%s: systemd did not boot (%v; last state %q)\npending jobs:\n%s\njournal:\n%s",
			r.name, err, state, lastLines([]byte(jobs), 10), journal))
		_ = exec.Command("docker", "rm", "-f", name).Run()
	}
	systemdReason = strings.Join(failures, "\n")
	t.Logf("systemd in the container:\n%s", systemdReason)
	args := append(append([]string{}, common...), image, "/bin/sleep", "infinity")
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	return name, systemdReason
}

// waitSystemd waits until systemctl is-system-running says the boot is over
// (running, or degraded when some unit failed) and returns that state.
func waitSystemd(ct string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var state string
	for time.Now().Before(deadline) {
		out, _ := dockerExec(ct, "systemctl", "is-system-running")
		state = strings.TrimSpace(out)
		switch state {
		case "running", "degraded":
			return state, nil
		}
		if running, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", ct).Output(); strings.TrimSpace(string(running)) != "true" {
			return state, fmt.Errorf("the container exited")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return state, fmt.Errorf("not booted after %s", timeout)
}

// startAgent starts grid agent in the container, logging to a file.
// startAgent starts the agent in the container, enrolling with the
// controller's CA and join token (copied in).
// extra are more agent flags (each one word).
func startAgent(t *testing.T, ct, natsURL, caFile, tokenFile string, extra ...string) {
	t.Helper()
	// --allow '*' enables the dangerous actions (apt remove, systemd stop)
	// the test exercises; the container is disposable.
	for src, dst := range map[string]string{caFile: "/etc/grid-ca.pem", tokenFile: "/etc/grid-join-token"} {
		if out, err := exec.Command("docker", "cp", src, ct+":"+dst).CombinedOutput(); err != nil {
			t.Fatalf("copy %s into the container: %v: %s", src, err, out)
		}
	}
	cmd := fmt.Sprintf("exec /usr/local/bin/grid agent --name %s --groups hosttest --allow '*' --nats %s --data-dir /var/lib/grid-agent"+
		" --ca-file /etc/grid-ca.pem --join-token-file /etc/grid-join-token %s >/var/log/grid-agent.log 2>&1",
		node, natsURL, strings.Join(extra, " "))
	if out, err := exec.Command("docker", "exec", "-d", ct, "/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("start the agent: %v: %s", err, out)
	}
}

func agentLog(ct string) string {
	out, _ := dockerExec(ct, "cat", "/var/log/grid-agent.log")
	return out
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
