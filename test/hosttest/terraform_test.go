package hosttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
	"github.com/gridfleet/terraform-provider-grid/provider"
)

// nftDebs are what nft needs beyond the image's minbase (bookworm).
var nftDebs = []string{"nftables", "libnftables1", "libnftnl11", "libjansson4", "libxtables12", "libedit2", "libmnl0", "libbsd0"}

// TestTerraformHostBaseline applies, with terraform and the provider, a
// deploy user with a key, a config key and an open port to two Debian
// containers, each with a network namespace of its own (Docker's bridge),
// so the firewall rules are each host's and the machine running the test
// keeps its own. A second run of the same job (a new trigger) reports no
// change on either host.
func TestTerraformHostBaseline(t *testing.T) {
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("host test: set GRID_HOST_TESTS=1 (or run make host-test) to apply a Terraform config to two Debian containers")
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("host test: terraform is not installed")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("host test: no Docker engine reachable (docker info: %v): %s", err, lastLines(out, 5))
	}
	gateway, err := bridgeGateway()
	if err != nil {
		t.Skipf("host test: no address for Docker's bridge network: %v", err)
	}
	ensureImage(t)

	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	grid := buildGrid(t, work)
	debs := filepath.Join(work, "debs")
	if err := os.Mkdir(debs, 0o755); err != nil {
		t.Fatal(err)
	}
	dl := exec.Command("apt-get", append([]string{"download"}, nftDebs...)...)
	dl.Dir = debs
	if out, err := dl.CombinedOutput(); err != nil {
		t.Skipf("host test: apt-get download of nftables for the containers: %v: %s", err, lastLines(out, 5))
	}
	_ = os.Chmod(debs, 0o755)

	// The containers reach the controller's NATS on the bridge's gateway,
	// which its certificate names.
	f := fleettest.Start(t, fleet.Options{Agents: 0, Controller: func(c *controller.Config) {
		c.NATSAddr = gateway + ":0"
		c.NodeOfflineAfter = config.Duration(30 * time.Second)
	}})
	if u, err := url.Parse(f.NATSURL()); err != nil || u.Hostname() != gateway {
		t.Fatalf("NATS URL %q: want one on the bridge gateway %s", f.NATSURL(), gateway)
	}
	cfg := filepath.Join(work, "agent.yaml")
	if err := os.WriteFile(cfg, []byte("backends:\n  file_allowed_prefixes: [/etc/myapp]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"tf-1", "tf-2"}
	cts := map[string]string{}
	for _, h := range hosts {
		ct := bridgeContainer(t, grid, debs)
		cts[h] = ct
		for _, args := range [][]string{
			{"sh", "-c", "dpkg -i /debs/*.deb"},
			{"mkdir", "-p", "/etc/myapp"},
		} {
			if out, err := dockerExec(ct, args...); err != nil {
				t.Fatalf("%s: %v: %v: %s", h, args, err, lastLines([]byte(out), 10))
			}
		}
		if out, err := exec.Command("docker", "cp", cfg, ct+":/etc/grid-agent.yaml").CombinedOutput(); err != nil {
			t.Fatalf("copy the agent config: %v: %s", err, out)
		}
		startAgent(t, ct, f.NATSURL(), f.CAFile(), f.JoinTokenFile(), "--config", "/etc/grid-agent.yaml", "--name", h, "--groups", "tfhosts")
	}
	for _, h := range hosts {
		ctx, cancel := testContext(2 * time.Minute)
		err := f.WaitOnline(ctx, h)
		cancel()
		if err != nil {
			t.Fatalf("agent %s did not come online: %v\nagent log:\n%s", h, err, agentLog(cts[h]))
		}
	}

	key := pubKey(t, "ci@grid")
	t.Setenv("TF_ACC", "1")
	t.Setenv("TF_CLI_CONFIG_FILE", "")
	cfgFor := func(run string) string {
		return fmt.Sprintf(`
provider "grid" {
  address = %q
  token   = %q
  ca_file = %q
}

resource "grid_job" "baseline" {
  target   = { scope = "group", value = "tfhosts" }
  triggers = { run = %q }
  tasks = [{
    tasks = [
      { backend = "user", action = "group_present", params = { name = "deploy" } },
      { backend = "user", action = "present", params = { name = "deploy", group = "deploy", shell = "/bin/bash", comment = "Deploy user" } },
      { backend = "user", action = "authorized_key", params = { user = "deploy", key = %q } },
      { backend = "config", action = "set", params = { path = "/etc/myapp/app.yaml", key = "server.port", value = "8080", type = "int", create = "true" } },
      { backend = "firewall", action = "allow", params = { port = "8080", source = "10.0.0.0/8" } },
    ]
  }]
}
`, f.APIURL(), f.AdminToken(), f.CAFile(), run, key)
	}
	// changed checks every step on every host reported changed == want.
	changed := func(want bool) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			rs := s.RootModule().Resources["grid_job.baseline"]
			if rs == nil {
				return fmt.Errorf("no grid_job.baseline in the state")
			}
			n := 0
			for k, v := range rs.Primary.Attributes {
				if !strings.HasPrefix(k, "results.") || !strings.HasSuffix(k, ".changed") {
					continue
				}
				n++
				if v != fmt.Sprint(want) {
					return fmt.Errorf("%s = %s, want %v", k, v, want)
				}
			}
			if n != 2*5 {
				return fmt.Errorf("%d results, want 5 steps on 2 hosts", n)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: map[string]func() (tfprotov6.ProviderServer, error){
			"grid": providerserver.NewProtocol6WithError(provider.New("test")()),
		},
		Steps: []resource.TestStep{
			{Config: cfgFor("1"), Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("grid_job.baseline", "status", "completed"), changed(true))},
			// The same config again: nothing to apply.
			{Config: cfgFor("1"), PlanOnly: true},
			// The job run again: every action finds its work done.
			{Config: cfgFor("2"), Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("grid_job.baseline", "status", "completed"), changed(false))},
		},
	})
	for _, h := range hosts {
		ct := cts[h]
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"getent", "passwd", "deploy"}, "Deploy user:/home/deploy:/bin/bash"},
			{[]string{"stat", "-c", "%a %U", "/home/deploy/.ssh/authorized_keys"}, "600 deploy"},
			{[]string{"cat", "/etc/myapp/app.yaml"}, "server:\n  port: 8080"},
			{[]string{"nft", "list", "table", "inet", "grid"}, "ip saddr 10.0.0.0/8 tcp dport 8080 accept"},
		} {
			out, err := dockerExec(ct, c.args...)
			if err != nil || !strings.Contains(out, c.want) {
				t.Errorf("%s: %v = %q (%v), want it to hold %q", h, c.args, out, err, c.want)
			}
		}
	}
}

// bridgeContainer starts a container from the image on Docker's bridge
// network (a network namespace of its own), with the grid binary and the
// nftables packages mounted, and NET_ADMIN for nft.
func bridgeContainer(t *testing.T, grid, debs string) string {
	t.Helper()
	name := "grid-hosttest-tf-" + randSuffix()
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	out, err := exec.Command("docker", "run", "-d", "--name", name, "--hostname", name, "--cap-add", "NET_ADMIN",
		"-v", grid+":/usr/local/bin/grid:ro", "-v", debs+":/debs:ro", image, "/bin/sleep", "infinity").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	return name
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testContext(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// bridgeGateway is the host's address on Docker's default bridge
// (docker0), which containers on it reach the host by.
func bridgeGateway() (string, error) {
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		return "", err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
	}
	return "", fmt.Errorf("docker0 has no IPv4 address")
}
