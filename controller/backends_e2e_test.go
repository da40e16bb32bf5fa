package controller_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// One job through controller and agent writes a file, asks apt (check
// mode, this machine's real apt) about a package, and reads sysinfo; the
// changed flags and structured facts come back in GET /job/{id}.
func TestHostBackendsThroughTheSystem(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get is not installed on this machine; the apt step needs it")
	}
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	path := filepath.Join(f.DataDir(), "agents", "node-1", "sandbox", "motd")
	job := fmt.Sprintf(`
target: {scope: node, value: node-1}
tasks:
  - {backend: file, action: write, params: {path: %[1]q, content: "hello fleet\n", mode: "0640"}}
  - {backend: file, action: write, params: {path: %[1]q, content: "hello fleet\n", mode: "0640"}}
  - {backend: apt, action: install, params: {package: bash}}
  - {backend: sysinfo, action: status}
`, path)
	j := submitWait(t, f, job)
	if j.Status != api.JobCompleted {
		t.Fatalf("status %s: %s; results %+v", j.Status, j.Error, j.Results)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "hello fleet\n" {
		t.Fatalf("file content %q, %v", got, err)
	}
	first, second := j.Results.Node(0, "node-1"), j.Results.Node(1, "node-1")
	if !first.Changed || second.Changed {
		t.Fatalf("changed flags: first write %v, second write %v; want true then false", first.Changed, second.Changed)
	}
	if sum, _ := second.Facts["sha256"].(string); len(sum) != 64 {
		t.Fatalf("file facts %+v, want a sha256", second.Facts)
	}
	aptRes := j.Results.Node(2, "node-1")
	if aptRes.Changed || aptRes.Facts["installed"] != true || aptRes.Facts["version"] == "" {
		t.Fatalf("apt install of installed bash: %+v, want unchanged with its version", aptRes)
	}
	sys := j.Results.Node(3, "node-1")
	host, _ := os.Hostname()
	if !strings.Contains(fmt.Sprint(sys.Facts), host) || sys.Facts["memory"] == nil {
		t.Fatalf("sysinfo facts %+v, want hostname %s and memory", sys.Facts, host)
	}

	// Check mode: a write that would change the file reports so and leaves
	// it alone.
	spec, err := api.ParseJobSpec([]byte(fmt.Sprintf(`
target: {scope: node, value: node-1}
check_mode: true
tasks:
  - {backend: file, action: write, params: {path: %q, content: "changed\n"}}
`, path)))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := f.Client().SubmitJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	cj := wait(t, f, sub.ID)
	if cj.Status != api.JobCompleted || !cj.Results.Node(0, "node-1").Changed {
		t.Fatalf("check-mode write: %s %+v", cj.Status, cj.Results.Node(0, "node-1"))
	}
	if got, _ := os.ReadFile(path); string(got) != "hello fleet\n" {
		t.Fatalf("check mode changed the file to %q", got)
	}
}
