package apt_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/apt"
	"github.com/gridfleet/terraform-provider-grid/backends/pkg"
)

// install is not dangerous, remove is; but apt-get -y install removes
// whatever conflicts with the new package, so installing sysvinit-core
// would remove systemd-sysv (the node's init) and everything depending on
// it. install must never remove a package. This runs the host's real
// apt-get in check mode (-s, a simulation: nothing changes) and only when
// the host's package state makes the attack real.
func TestInstallNeverRemovesPackages(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get is not installed")
	}
	const victim = "sysvinit-core"
	out, _ := exec.Command("apt-get", "-s", "-q", "install", "--", victim).CombinedOutput()
	if !strings.Contains(string(out), "\nRemv ") {
		t.Skipf("installing %s removes nothing on this host", victim)
	}
	reg := backends.NewRegistry().MustRegister(apt.New(apt.Options{}), pkg.New(pkg.Options{Manager: "apt"}))
	for _, tc := range []struct {
		backend string
		params  api.Params
	}{
		{"apt", api.Params{"package": victim}},
		{"package", api.Params{"name": victim}},
	} {
		res, err := reg.Run(context.Background(), tc.backend, &backends.Request{Action: "install", Params: tc.params, CheckMode: true})
		if err == nil {
			t.Errorf("%s.install %s: no error; would remove %v", tc.backend, victim, res.Facts["would_remove"])
		}
	}
}
