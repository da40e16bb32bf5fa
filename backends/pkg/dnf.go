package pkg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
)

// dnfDriver is dnf/rpm: rpm answers what is installed (fast, no repository
// metadata), dnf changes things and reads the repositories.
type dnfDriver struct {
	dnf, rpm     string
	root, config string
}

func newDnf(o Options) *dnfDriver {
	return &dnfDriver{dnf: or(o.DnfPath, "dnf"), rpm: or(o.RpmPath, "rpm"), root: o.DnfInstallRoot, config: o.DnfConfig}
}

func (*dnfDriver) name() string { return "dnf" }

// rpmEVR prints a package's version as dpkg would: [epoch:]version-release,
// the epoch left out when there is none.
const rpmEVR = `%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}`

func (d *dnfDriver) rpmRun(ctx context.Context, args ...string) (proc.Output, error) {
	if d.root != "" {
		args = append([]string{"--root", d.root}, args...)
	}
	return proc.Run(ctx, proc.Cmd{Path: d.rpm, Args: args})
}

// dnfRun runs dnf non-interactively: -y answers its questions, so a check
// mode never reaches here with a mutating command.
func (d *dnfDriver) dnfRun(ctx context.Context, args ...string) (proc.Output, error) {
	base := []string{"-y", "-q"}
	if d.config != "" {
		base = append(base, "--config", d.config)
	}
	if d.root != "" {
		base = append(base, "--installroot", d.root)
	}
	out, err := proc.Run(ctx, proc.Cmd{Path: d.dnf, Args: append(base, args...)})
	if err != nil {
		return out, fmt.Errorf("dnf %s: %w", args[0], err)
	}
	return out, nil
}

func (d *dnfDriver) installed(ctx context.Context, name string) (string, error) {
	out, err := d.rpmRun(ctx, "-q", "--qf", rpmEVR+`\n`, "--", name)
	if err != nil {
		// rpm -q exits 1 and says so on stdout for a package it lacks.
		if ee := (*proc.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode == 1 && strings.Contains(out.Stdout, "is not installed") {
			return "", nil
		}
		return "", fmt.Errorf("rpm -q %s: %w", name, err)
	}
	// Several lines for a package installed for several architectures
	// (or kernels): the last is the newest installed.
	lines := strings.Fields(out.Stdout)
	if len(lines) == 0 {
		return "", nil
	}
	return lines[len(lines)-1], nil
}

// matches says whether an installed [e:]v-r satisfies a pinned version,
// which may leave out the epoch and the release.
func matches(installed, want string) bool {
	if installed == want {
		return true
	}
	noEpoch := installed
	if _, rest, ok := strings.Cut(installed, ":"); ok {
		noEpoch = rest
	}
	if noEpoch == want {
		return true
	}
	v, _, _ := strings.Cut(noEpoch, "-")
	return v == want
}

// candidate asks the repositories for the newest version of spec (a name,
// or name-version); "" when none has it.
func (d *dnfDriver) candidate(ctx context.Context, spec string) (string, error) {
	out, err := d.dnfRun(ctx, "repoquery", "--latest-limit=1", "--qf", "%{epoch}:%{version}-%{release}", "--", spec)
	if err != nil {
		return "", err
	}
	f := strings.Fields(out.Stdout)
	if len(f) == 0 {
		return "", nil
	}
	return strings.TrimPrefix(f[len(f)-1], "0:"), nil
}

func (d *dnfDriver) install(ctx context.Context, req *backends.Request, name, version string) (*backends.Result, error) {
	before, err := d.installed(ctx, name)
	if err != nil {
		return nil, err
	}
	if before != "" && (version == "" || matches(before, version)) {
		return &backends.Result{Output: fmt.Sprintf("%s %s is already installed", name, before), Facts: versionFacts(name, before)}, nil
	}
	spec := name
	if version != "" {
		spec = name + "-" + version
	}
	if req.CheckMode {
		c, err := d.candidate(ctx, spec)
		if err != nil {
			return nil, err
		}
		if c == "" {
			return nil, fmt.Errorf("package.install %s: no repository has it", spec)
		}
		f := versionFacts(name, before)
		f["would_install"] = []string{name + "-" + c}
		return &backends.Result{Output: fmt.Sprintf("check mode: would install %s-%s", name, c), Changed: true, Facts: f}, nil
	}
	req.Progress(0, "dnf install "+spec)
	// dnf install of an older version than the installed one downgrades,
	// which is what a pin asks for.
	out, err := d.dnfRun(ctx, "install", "--", spec)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	after, err := d.installed(ctx, name)
	if err != nil {
		return &backends.Result{Output: out.Stdout, Changed: true}, err
	}
	if after == "" || (version != "" && !matches(after, version)) {
		return &backends.Result{Output: out.Stdout, Changed: after != before},
			fmt.Errorf("dnf install %s succeeded but rpm reports %q installed", spec, after)
	}
	return &backends.Result{Output: out.Stdout, Changed: true, Facts: versionFacts(name, after)}, nil
}

func (d *dnfDriver) remove(ctx context.Context, req *backends.Request, name string) (*backends.Result, error) {
	before, err := d.installed(ctx, name)
	if err != nil {
		return nil, err
	}
	if before == "" {
		return &backends.Result{Output: name + " is not installed", Facts: versionFacts(name, "")}, nil
	}
	if req.CheckMode {
		f := versionFacts(name, before)
		f["would_remove"] = []string{name}
		return &backends.Result{Output: fmt.Sprintf("check mode: would remove %s %s and the packages that need it", name, before),
			Changed: true, Facts: f}, nil
	}
	out, err := d.dnfRun(ctx, "remove", "--", name)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	return &backends.Result{Output: out.Stdout, Changed: true, Facts: versionFacts(name, "")}, nil
}

func (d *dnfDriver) update(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would refresh the package metadata", Changed: true}, nil
	}
	out, err := d.dnfRun(ctx, "makecache")
	return &backends.Result{Output: out.Stdout + out.Stderr, Changed: err == nil}, err
}

// snapshot maps every installed package to its version.
func (d *dnfDriver) snapshot(ctx context.Context) (map[string]string, error) {
	pkgs, err := d.list(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		m[p.Name] = p.Version
	}
	return m, nil
}

func (d *dnfDriver) upgrade(ctx context.Context, req *backends.Request, name string) (*backends.Result, error) {
	if name != "" {
		v, err := d.installed(ctx, name)
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, fmt.Errorf("package.upgrade %s: it is not installed", name)
		}
	}
	args := []string{"upgrade"}
	if name != "" {
		args = append(args, "--", name)
	}
	if req.CheckMode {
		// check-update exits 100 when there are updates, listing them as
		// "name.arch version repo".
		cargs := []string{"check-update"}
		if name != "" {
			cargs = append(cargs, "--", name)
		}
		out, err := d.dnfRun(ctx, cargs...)
		var ee *proc.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode == 100) {
			return &backends.Result{Output: out.Stdout + out.Stderr}, err
		}
		would := []string{}
		for _, line := range strings.Split(out.Stdout, "\n") {
			if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(line, " ") {
				would = append(would, stripArch(f[0])+"-"+f[1])
			}
		}
		return &backends.Result{Output: out.Stdout, Changed: len(would) > 0, Facts: map[string]any{"would_install": would, "would_remove": []string{}}}, nil
	}
	before, err := d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out, err := d.dnfRun(ctx, args...)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	after, err := d.snapshot(ctx)
	if err != nil {
		return &backends.Result{Output: out.Stdout}, err
	}
	var changed []string
	for n, v := range after {
		if before[n] != v {
			changed = append(changed, n+"-"+v)
		}
	}
	slices.Sort(changed)
	return &backends.Result{Output: out.Stdout, Changed: !maps.Equal(before, after),
		Facts: map[string]any{"upgraded": len(changed), "packages": changed}}, nil
}

// stripArch drops the .arch suffix dnf puts on names.
func stripArch(s string) string {
	if i := strings.LastIndexByte(s, '.'); i > 0 {
		return s[:i]
	}
	return s
}

func (d *dnfDriver) info(ctx context.Context, name string) (map[string]any, string, error) {
	v, err := d.installed(ctx, name)
	if err != nil {
		return nil, "", err
	}
	c, err := d.candidate(ctx, name)
	if err != nil {
		return nil, "", err
	}
	f := versionFacts(name, v)
	f["candidate"], f["available"] = c, c != ""
	var out string
	if v != "" {
		o, err := d.rpmRun(ctx, "-qi", "--", name)
		if err != nil {
			return nil, o.Stdout, fmt.Errorf("rpm -qi %s: %w", name, err)
		}
		out = o.Stdout
	}
	return f, out, nil
}

func (d *dnfDriver) list(ctx context.Context) ([]Installed, error) {
	out, err := d.rpmRun(ctx, "-qa", "--qf", `%{NAME}\t`+rpmEVR+`\n`)
	if err != nil {
		return nil, fmt.Errorf("rpm -qa: %w", err)
	}
	var pkgs []Installed
	for _, line := range strings.Split(out.Stdout, "\n") {
		if n, v, ok := strings.Cut(line, "\t"); ok && n != "gpg-pubkey" {
			pkgs = append(pkgs, Installed{Name: n, Version: v})
		}
	}
	slices.SortFunc(pkgs, func(a, b Installed) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, nil
}

func (d *dnfDriver) search(ctx context.Context, query string) ([]Found, error) {
	out, err := d.dnfRun(ctx, "search", "--", query)
	if err != nil {
		return nil, err
	}
	var hits []Found
	for _, line := range strings.Split(out.Stdout, "\n") {
		if n, s, ok := strings.Cut(line, " : "); ok && !strings.HasPrefix(line, "=") {
			hits = append(hits, Found{Name: stripArch(strings.TrimSpace(n)), Summary: strings.TrimSpace(s)})
		}
	}
	return hits, nil
}

// lockRE reads a versionlock entry, name-[epoch:]version-release.arch
// (the arch may be "*").
var lockRE = regexp.MustCompile(`^(.+)-(?:[0-9]+:)?[^-]+-[^-]+$`)

// versionlock runs a versionlock subcommand; a dnf without the plugin says
// "No such command", which becomes ErrUnsupported.
func (d *dnfDriver) versionlock(ctx context.Context, args ...string) (proc.Output, error) {
	out, err := d.dnfRun(ctx, append([]string{"versionlock"}, args...)...)
	if err != nil && strings.Contains(out.Stderr+out.Stdout, "No such command") {
		return out, fmt.Errorf("hold: %w (dnf has no versionlock command: install the versionlock plugin, dnf-plugins-core / python3-dnf-plugin-versionlock)", ErrUnsupported)
	}
	return out, err
}

func (d *dnfDriver) held(ctx context.Context) ([]string, error) {
	out, err := d.versionlock(ctx, "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Fields(out.Stdout) {
		if strings.HasPrefix(line, "!") || strings.HasPrefix(line, "#") {
			continue // an exclude, not a hold
		}
		if m := lockRE.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	return names, nil
}

func (d *dnfDriver) hold(ctx context.Context, name string, on bool) (string, error) {
	verb := "delete"
	if on {
		verb = "add"
	}
	out, err := d.versionlock(ctx, verb, "--", name)
	return out.Stdout, err
}
