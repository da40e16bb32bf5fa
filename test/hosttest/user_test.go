package hosttest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// TestUserAndConfigInContainer runs the user, config and file edit
// actions against the real shadow-utils and files of a Debian container:
// a group and a user made, changed and removed, a key written with the
// modes sshd wants, and keys of config files set — each a change once and
// no change the second time.
func TestUserAndConfigInContainer(t *testing.T) {
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("host test: set GRID_HOST_TESTS=1 (or run make host-test) to run the user and config backends in a Docker container")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("host test: the docker command is not installed")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("host test: no Docker engine reachable (docker info: %v): %s", err, lastLines(out, 5))
	}
	ensureImage(t)

	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	grid := buildGrid(t, work)
	repo := filepath.Join(work, "repo") // no packages here: apt is not used
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	f := fleettest.Start(t, fleet.Options{Agents: 0, Controller: func(c *controller.Config) {
		c.NATSAddr = "127.0.0.1:0"
		c.NodeOfflineAfter = config.Duration(30 * time.Second)
	}})
	natsURL := f.NATSURL()
	if u, err := url.Parse(natsURL); err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("NATS URL %q: want one on 127.0.0.1, which the container shares", natsURL)
	}
	ct, _ := startContainer(t, work, grid, repo)
	cfg := filepath.Join(work, "agent.yaml")
	if err := os.WriteFile(cfg, []byte("backends:\n  file_allowed_prefixes: [/etc/myapp]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "cp", cfg, ct+":/etc/grid-agent.yaml").CombinedOutput(); err != nil {
		t.Fatalf("copy the agent config: %v: %s", err, out)
	}
	startAgent(t, ct, natsURL, f.CAFile(), f.JoinTokenFile(), "--config", "/etc/grid-agent.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.WaitOnline(ctx, node); err != nil {
		t.Fatalf("agent %s in the container did not come online: %v\nagent log:\n%s", node, err, agentLog(ct))
	}
	c := f.Client()
	sh := func(args ...string) string {
		t.Helper()
		out, err := dockerExec(ct, args...)
		if err != nil {
			t.Errorf("%v in the container: %v: %s", args, err, out)
		}
		return strings.TrimSpace(out)
	}

	t.Run("user", func(t *testing.T) {
		run(t, c, "user", "group_present", api.Params{"name": "ops", "gid": "2500"}, true)
		run(t, c, "user", "group_present", api.Params{"name": "ops", "gid": "2500"}, false)
		if got := sh("getent", "group", "ops"); !strings.HasPrefix(got, "ops:x:2500:") {
			t.Errorf("getent group ops = %q", got)
		}
		user := api.Params{"name": "deploy", "uid": "2001", "groups": "ops", "shell": "/bin/bash", "comment": "Deploy user"}
		run(t, c, "user", "present", user, true)
		r := run(t, c, "user", "present", user, false)
		if r.Facts["home"] != "/home/deploy" || r.Facts["uid"] != float64(2001) {
			t.Errorf("facts %v", r.Facts)
		}
		if got := sh("getent", "passwd", "deploy"); got != "deploy:x:2001:2001:Deploy user:/home/deploy:/bin/bash" {
			t.Errorf("getent passwd deploy = %q", got)
		}
		if got := sh("id", "-Gn", "deploy"); got != "deploy ops" {
			t.Errorf("id -Gn deploy = %q", got)
		}
		// Only what differs changes; the primary group named among groups
		// is no difference.
		user["shell"], user["groups"] = "/bin/sh", "deploy,ops"
		r = run(t, c, "user", "present", user, true)
		if !strings.Contains(r.Output, "shell") || strings.Contains(r.Output, "comment") || strings.Contains(r.Output, "groups") {
			t.Errorf("output %q: want only the shell changed", r.Output)
		}
		run(t, c, "user", "present", user, false)

		k1, k2 := pubKey(t, "ci@grid"), pubKey(t, "admin@grid")
		run(t, c, "user", "authorized_key", api.Params{"user": "deploy", "key": k1}, true)
		run(t, c, "user", "authorized_key", api.Params{"user": "deploy", "key": k1}, false)
		if got := sh("stat", "-c", "%a %U %G", "/home/deploy/.ssh", "/home/deploy/.ssh/authorized_keys"); got != "700 deploy deploy\n600 deploy deploy" {
			t.Errorf("modes and owners = %q", got)
		}
		run(t, c, "user", "authorized_key", api.Params{"user": "deploy", "key": k2}, true)
		run(t, c, "user", "authorized_key", api.Params{"user": "deploy", "key": k2, "state": "exclusive"}, true)
		if got := sh("cat", "/home/deploy/.ssh/authorized_keys"); got != k2 {
			t.Errorf("authorized_keys after exclusive = %q", got)
		}
		run(t, c, "user", "authorized_key", api.Params{"user": "deploy", "key": k2, "state": "exclusive"}, false)

		// Check mode changes nothing.
		spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: node}, CheckMode: true,
			Tasks: []api.Phase{{Backend: "user", Action: "absent", Params: api.Params{"name": "deploy"}}}}
		sub, err := c.SubmitJob(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if j, err := c.WaitJob(ctx, sub.ID); err != nil || j.Status != api.JobCompleted {
			t.Fatalf("check-mode absent: %v %v", j, err)
		}
		sh("getent", "passwd", "deploy")

		run(t, c, "user", "absent", api.Params{"name": "deploy", "remove_home": "true"}, true)
		run(t, c, "user", "absent", api.Params{"name": "deploy", "remove_home": "true"}, false)
		if out, err := dockerExec(ct, "getent", "passwd", "deploy"); err == nil {
			t.Errorf("deploy still exists: %s", out)
		}
		if out, err := dockerExec(ct, "test", "-e", "/home/deploy"); err == nil {
			t.Errorf("/home/deploy still exists %s", out)
		}
		run(t, c, "user", "group_absent", api.Params{"name": "ops"}, true)
		run(t, c, "user", "group_absent", api.Params{"name": "ops"}, false)
	})

	t.Run("config and file", func(t *testing.T) {
		// The allowed prefix is the operator's to make; file works beneath it.
		sh("mkdir", "-p", "/etc/myapp")
		run(t, c, "file", "mkdir", api.Params{"path": "/etc/myapp/conf.d"}, true)
		run(t, c, "file", "write", api.Params{"path": "/etc/myapp/app.yaml", "content": "# app\nserver:\n  port: 80 # default\n"}, true)
		set := api.Params{"path": "/etc/myapp/app.yaml", "key": "server.port", "value": "8080", "type": "int"}
		run(t, c, "config", "set", set, true)
		run(t, c, "config", "set", set, false)
		if got := sh("cat", "/etc/myapp/app.yaml"); got != "# app\nserver:\n  port: 8080 # default" {
			t.Errorf("app.yaml = %q", got)
		}
		r := run(t, c, "config", "get", api.Params{"path": "/etc/myapp/app.yaml", "key": "server.port"}, false)
		if r.Facts["value"] != "8080" {
			t.Errorf("get: %v", r.Facts)
		}
		ini := api.Params{"path": "/etc/myapp/app.ini", "key": "log.level", "value": "debug", "create": "true"}
		run(t, c, "config", "set", ini, true)
		run(t, c, "config", "set", ini, false)
		line := api.Params{"path": "/etc/myapp/app.ini", "line": "# managed by grid", "insert_after": `^\[log\]`}
		run(t, c, "file", "line", line, true)
		run(t, c, "file", "line", line, false)
		r = run(t, c, "file", "read", api.Params{"path": "/etc/myapp/app.ini"}, false)
		if r.Output != "[log]\n# managed by grid\nlevel = debug\n" {
			t.Errorf("read = %q", r.Output)
		}
		// Outside the prefixes: refused.
		spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: node},
			Tasks: []api.Phase{{Backend: "config", Action: "get", Params: api.Params{"path": "/etc/passwd", "key": "root", "format": "ini"}}}}
		sub, err := c.SubmitJob(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.WaitJob(ctx, sub.ID)
		if err != nil || j.Status == api.JobCompleted {
			t.Errorf("config get of /etc/passwd: job %v %v, want it failed", j.Status, err)
		}
	})
}

func pubKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}
