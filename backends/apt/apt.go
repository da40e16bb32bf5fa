// Package apt is the apt backend: update package lists, install, remove and
// upgrade packages with apt-get, and read installed versions with
// dpkg-query — both run with argument vectors, never a shell. Install and
// remove look at dpkg's state first, so that an installed package reports
// no change; check mode asks apt-get to simulate (-s).
package apt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
)

// Patterns for params. A Debian package name is lower-case alphanumerics
// and + . -, at least two characters, starting with an alphanumeric (so it
// can never be read as an option); an architecture qualifier may follow.
// A version is [epoch:]upstream[-revision], starting with a digit.
const (
	PackagePattern = `^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$`
	VersionPattern = `^[0-9][A-Za-z0-9.+~:-]*$`
)

// Options configure the backend.
type Options struct {
	// AptGetPath and DpkgQueryPath default to apt-get and dpkg-query from
	// PATH.
	AptGetPath, DpkgQueryPath string
}

// Backend is the apt backend.
type Backend struct {
	aptGet, dpkgQuery string
}

// New returns the apt backend.
func New(opts Options) *Backend {
	b := &Backend{aptGet: opts.AptGetPath, dpkgQuery: opts.DpkgQueryPath}
	if b.aptGet == "" {
		b.aptGet = "apt-get"
	}
	if b.dpkgQuery == "" {
		b.dpkgQuery = "dpkg-query"
	}
	return b
}

// Schema declares update, install, remove and upgrade.
func (*Backend) Schema() api.BackendSchema {
	pkg := api.ParamSchema{Name: "package", Type: api.TypeString, Required: true, Pattern: PackagePattern,
		Description: "Debian package name, e.g. nginx or libc6:amd64."}
	return api.BackendSchema{
		Name:        "apt",
		Description: "Debian/Ubuntu packages with apt-get and dpkg.",
		Actions: []api.ActionSchema{
			{Name: "update", Description: "Refresh the package lists (apt-get update).", Idempotent: true, CheckMode: true},
			{Name: "install", Description: "Install a package; no change when it is installed (at the version, if one is given).",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{pkg,
					{Name: "version", Type: api.TypeString, Pattern: VersionPattern,
						Description: "Exact version to install (downgrades allowed); default: keep any installed version, else the candidate."}}},
			{Name: "remove", Description: "Remove a package; no change when it is not installed.",
				Idempotent: true, Dangerous: true, CheckMode: true, Params: []api.ParamSchema{pkg,
					{Name: "purge", Type: api.TypeBool, Default: "false", Description: "Also remove configuration files."}}},
			{Name: "upgrade", Description: "Upgrade installed packages.", Idempotent: true, CheckMode: true, Dangerous: true,
				Params: []api.ParamSchema{{Name: "dist", Type: api.TypeBool, Default: "false",
					Description: "dist-upgrade: also install or remove packages to satisfy new dependencies."}}},
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "update":
		return b.update(ctx, req)
	case "install":
		return b.install(ctx, req)
	case "remove":
		return b.remove(ctx, req)
	case "upgrade":
		return b.upgrade(ctx, req)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// common are the apt-get options every call gets: quiet, assume yes, keep
// existing configuration files on upgrade rather than prompting, and wait
// for the dpkg lock instead of failing at once when another apt runs.
var common = []string{"-q", "-y",
	"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
	"-o", "DPkg::Lock::Timeout=120"}

// AptGet runs apt-get with the common options, -s when simulate, extra
// options, the verb and, after "--", the packages. The package backend's
// apt driver runs its apt-get calls through it too.
func (b *Backend) AptGet(ctx context.Context, simulate bool, verb string, extra []string, pkgs ...string) (proc.Output, error) {
	args := append([]string{}, common...)
	if simulate {
		args = append(args, "-s")
	}
	args = append(args, extra...)
	args = append(args, verb)
	if len(pkgs) > 0 {
		args = append(args, "--")
		args = append(args, pkgs...)
	}
	out, err := proc.Run(ctx, proc.Cmd{Path: b.aptGet, Args: args, Env: []string{"DEBIAN_FRONTEND=noninteractive"}})
	if err != nil {
		return out, fmt.Errorf("apt-get %s: %w", verb, err)
	}
	return out, nil
}

func (b *Backend) update(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	// apt-get update cannot simulate; refreshing lists changes no package.
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would refresh the package lists", Changed: true}, nil
	}
	out, err := b.AptGet(ctx, false, "update", nil)
	return &backends.Result{Output: out.Stdout + out.Stderr, Changed: err == nil}, err
}

func (b *Backend) install(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	pkg, want := req.Params["package"], req.Params["version"]
	before, err := b.Installed(ctx, pkg)
	if err != nil {
		return nil, err
	}
	if before != "" && (want == "" || want == before) {
		return &backends.Result{Output: fmt.Sprintf("%s %s is already installed", pkg, before),
			Facts: facts(pkg, before)}, nil
	}
	// --no-remove: apt-get -y would otherwise remove whatever conflicts
	// with the package (installing sysvinit-core removes systemd-sysv),
	// and remove is the dangerous action, install is not. Such an install
	// fails and says what it would remove.
	target, extra := pkg, []string{"--no-remove"}
	if want != "" {
		target, extra = pkg+"="+want, append(extra, "--allow-downgrades")
	}
	if req.CheckMode {
		out, err := b.AptGet(ctx, true, "install", extra, target)
		if err != nil {
			return &backends.Result{Output: out.Stdout + out.Stderr}, err
		}
		sim := ParseSimulation(out.Stdout)
		f := facts(pkg, before)
		f["would_install"], f["would_remove"] = sim.Installs, sim.Removes
		return &backends.Result{Output: out.Stdout, Changed: sim.Changes() > 0, Facts: f}, nil
	}
	req.Progress(0, "apt-get install "+target)
	out, err := b.AptGet(ctx, false, "install", extra, target)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	after, err := b.Installed(ctx, pkg)
	if err != nil {
		return &backends.Result{Output: out.Stdout, Changed: true}, err
	}
	if after == "" {
		return &backends.Result{Output: out.Stdout, Changed: true}, fmt.Errorf("apt-get install %s succeeded but dpkg does not list it as installed", target)
	}
	return &backends.Result{Output: out.Stdout, Changed: true, Facts: facts(pkg, after)}, nil
}

func (b *Backend) remove(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	pkg := req.Params["package"]
	verb := "remove"
	if purge, _ := strconv.ParseBool(req.Params["purge"]); purge {
		verb = "purge"
	}
	before, err := b.Installed(ctx, pkg)
	if err != nil {
		return nil, err
	}
	if before == "" {
		return &backends.Result{Output: pkg + " is not installed", Facts: facts(pkg, "")}, nil
	}
	out, err := b.AptGet(ctx, req.CheckMode, verb, nil, pkg)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	if req.CheckMode {
		sim := ParseSimulation(out.Stdout)
		f := facts(pkg, before)
		f["would_install"], f["would_remove"] = sim.Installs, sim.Removes
		return &backends.Result{Output: out.Stdout, Changed: sim.Changes() > 0, Facts: f}, nil
	}
	return &backends.Result{Output: out.Stdout, Changed: true, Facts: facts(pkg, "")}, nil
}

func (b *Backend) upgrade(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	verb := "upgrade"
	if dist, _ := strconv.ParseBool(req.Params["dist"]); dist {
		verb = "dist-upgrade"
	}
	out, err := b.AptGet(ctx, req.CheckMode, verb, nil)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	sum := parseSummary(out.Stdout)
	f := map[string]any{"upgraded": sum[0], "newly_installed": sum[1], "removed": sum[2], "not_upgraded": sum[3]}
	if req.CheckMode {
		sim := ParseSimulation(out.Stdout)
		f["would_install"], f["would_remove"] = sim.Installs, sim.Removes
	}
	return &backends.Result{Output: out.Stdout, Changed: sum[0]+sum[1]+sum[2] > 0, Facts: f}, nil
}

// Installed returns the installed version of pkg, or "" when dpkg does not
// have it installed (unknown, removed, or only config files left).
func (b *Backend) Installed(ctx context.Context, pkg string) (string, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: b.dpkgQuery, Args: []string{"-W", "-f", `${Status} ${Version}\n`, "--", pkg}})
	if err != nil {
		// dpkg-query exits 1 for a package it has never heard of.
		if ee := (*proc.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode == 1 && strings.Contains(out.Stderr, "no packages found") {
			return "", nil
		}
		return "", fmt.Errorf("dpkg-query %s: %w", pkg, err)
	}
	return parseStatus(out.Stdout), nil
}

// parseStatus reads "want flag status version" lines (one per architecture)
// and returns the version of the first installed one.
func parseStatus(s string) string {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "installed" {
			return f[3]
		}
	}
	return ""
}

// Simulation is what apt-get -s would do.
type Simulation struct{ Installs, Removes []string }

// Changes counts the packages the simulation installs or removes.
func (s Simulation) Changes() int { return len(s.Installs) + len(s.Removes) }

// ParseSimulation reads apt-get -s output: "Inst pkg [old] (new …)" and
// "Remv pkg [old]" lines; "Conf" lines repeat the Inst ones.
func ParseSimulation(s string) Simulation {
	var sim Simulation
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Inst":
			sim.Installs = append(sim.Installs, f[1])
		case "Remv", "Purg":
			sim.Removes = append(sim.Removes, f[1])
		}
	}
	if sim.Installs == nil {
		sim.Installs = []string{}
	}
	if sim.Removes == nil {
		sim.Removes = []string{}
	}
	return sim
}

var summaryRE = regexp.MustCompile(`(\d+) upgraded, (\d+) newly installed, (\d+) to remove and (\d+) not upgraded`)

// parseSummary reads apt-get's "N upgraded, N newly installed, N to remove
// and N not upgraded" line; zeros when absent.
func parseSummary(s string) [4]int {
	var n [4]int
	if m := summaryRE.FindStringSubmatch(s); m != nil {
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1])
		}
	}
	return n
}

func facts(pkg, version string) map[string]any {
	return map[string]any{"package": pkg, "version": version, "installed": version != ""}
}
