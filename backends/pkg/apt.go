package pkg

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/apt"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
)

// aptDriver is apt/dpkg: the apt backend for what it already does, and
// dpkg-query, apt-cache and apt-mark for the rest.
type aptDriver struct {
	apt                          *apt.Backend
	dpkgQuery, aptCache, aptMark string
}

var aptName = regexp.MustCompile(apt.PackagePattern)

func newApt(o Options) *aptDriver {
	d := &aptDriver{
		apt:       apt.New(apt.Options{AptGetPath: o.AptGetPath, DpkgQueryPath: o.DpkgQueryPath}),
		dpkgQuery: or(o.DpkgQueryPath, "dpkg-query"),
		aptCache:  or(o.AptCachePath, "apt-cache"),
		aptMark:   or(o.AptMarkPath, "apt-mark"),
	}
	return d
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (*aptDriver) name() string { return "apt" }

// check refuses a name Debian cannot have (upper case, _), which the
// package backend's wider pattern lets through for RPM's sake.
func (*aptDriver) check(name string) error {
	if name != "" && !aptName.MatchString(name) {
		return fmt.Errorf("%w: %q is not a Debian package name (%s)", backends.ErrInvalidParams, name, apt.PackagePattern)
	}
	return nil
}

func (d *aptDriver) installed(ctx context.Context, name string) (string, error) {
	if err := d.check(name); err != nil {
		return "", err
	}
	return d.apt.Installed(ctx, name)
}

// viaApt runs one apt backend action and renames its "package" fact.
func (d *aptDriver) viaApt(ctx context.Context, req *backends.Request, action string, p api.Params) (*backends.Result, error) {
	if err := d.check(p["package"]); err != nil {
		return nil, err
	}
	sub := *req
	sub.Action, sub.Params = action, p
	res, err := d.apt.Run(ctx, &sub)
	if res != nil && res.Facts != nil {
		if n, ok := res.Facts["package"]; ok {
			res.Facts["name"] = n
			delete(res.Facts, "package")
		}
	}
	return res, err
}

func (d *aptDriver) install(ctx context.Context, req *backends.Request, name, version string) (*backends.Result, error) {
	p := api.Params{"package": name}
	if version != "" {
		p["version"] = version
	}
	return d.viaApt(ctx, req, "install", p)
}

func (d *aptDriver) remove(ctx context.Context, req *backends.Request, name string) (*backends.Result, error) {
	return d.viaApt(ctx, req, "remove", api.Params{"package": name, "purge": "false"})
}

func (d *aptDriver) update(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	return d.viaApt(ctx, req, "update", api.Params{})
}

func (d *aptDriver) upgrade(ctx context.Context, req *backends.Request, name string) (*backends.Result, error) {
	if name == "" {
		return d.viaApt(ctx, req, "upgrade", api.Params{"dist": "false"})
	}
	before, err := d.installed(ctx, name)
	if err != nil {
		return nil, err
	}
	if before == "" {
		return nil, fmt.Errorf("package.upgrade %s: it is not installed", name)
	}
	// --only-upgrade: never install the package if it went away meanwhile.
	out, err := d.apt.AptGet(ctx, req.CheckMode, "install", []string{"--only-upgrade"}, name)
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr}, err
	}
	if req.CheckMode {
		sim := apt.ParseSimulation(out.Stdout)
		f := versionFacts(name, before)
		f["would_install"], f["would_remove"] = sim.Installs, sim.Removes
		return &backends.Result{Output: out.Stdout, Changed: sim.Changes() > 0, Facts: f}, nil
	}
	after, err := d.installed(ctx, name)
	if err != nil {
		return &backends.Result{Output: out.Stdout}, err
	}
	f := versionFacts(name, after)
	f["previous_version"] = before
	return &backends.Result{Output: out.Stdout, Changed: after != before, Facts: f}, nil
}

func (d *aptDriver) info(ctx context.Context, name string) (map[string]any, string, error) {
	v, err := d.installed(ctx, name)
	if err != nil {
		return nil, "", err
	}
	f := versionFacts(name, v)
	// apt-cache policy prints nothing (exit 0) for a package it does not
	// know; the candidate is then empty.
	out, err := proc.Run(ctx, proc.Cmd{Path: d.aptCache, Args: []string{"policy", "--", name}})
	if err != nil {
		return nil, out.Stdout, fmt.Errorf("apt-cache policy %s: %w", name, err)
	}
	f["candidate"] = ""
	sc := bufio.NewScanner(strings.NewReader(out.Stdout))
	for sc.Scan() {
		if c, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Candidate:"); ok {
			if c = strings.TrimSpace(c); c != "(none)" {
				f["candidate"] = c
			}
			break
		}
	}
	f["available"] = f["candidate"] != ""
	return f, out.Stdout, nil
}

func (d *aptDriver) list(ctx context.Context) ([]Installed, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: d.dpkgQuery, Args: []string{"-W", "-f", `${Status}\t${binary:Package}\t${Version}\n`}})
	if err != nil {
		return nil, fmt.Errorf("dpkg-query -W: %w", err)
	}
	var pkgs []Installed
	for _, line := range strings.Split(out.Stdout, "\n") {
		f := strings.Split(line, "\t")
		// Status is "want flag status": only "installed" counts.
		if len(f) == 3 && strings.HasSuffix(f[0], " installed") {
			pkgs = append(pkgs, Installed{Name: f[1], Version: f[2]})
		}
	}
	return pkgs, nil
}

func (d *aptDriver) search(ctx context.Context, query string) ([]Found, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: d.aptCache, Args: []string{"search", "--", query}})
	if err != nil {
		return nil, fmt.Errorf("apt-cache search %s: %w", query, err)
	}
	var hits []Found
	for _, line := range strings.Split(out.Stdout, "\n") {
		if n, s, ok := strings.Cut(line, " - "); ok {
			hits = append(hits, Found{Name: n, Summary: s})
		}
	}
	return hits, nil
}

// held reads dpkg's selections, where apt-mark keeps its holds: the same
// answer as apt-mark showhold without loading apt's cache (seconds on a
// busy host).
func (d *aptDriver) held(ctx context.Context) ([]string, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: d.dpkgQuery, Args: []string{"-W", "-f", `${Status}\t${Package}\n`}})
	if err != nil {
		return nil, fmt.Errorf("dpkg-query -W: %w", err)
	}
	var names []string
	for _, line := range strings.Split(out.Stdout, "\n") {
		// Status is "want flag status"; want "hold" is a hold.
		if st, name, ok := strings.Cut(line, "\t"); ok && strings.HasPrefix(st, "hold ") && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

func (d *aptDriver) hold(ctx context.Context, name string, on bool) (string, error) {
	if err := d.check(name); err != nil {
		return "", err
	}
	verb := "unhold"
	if on {
		verb = "hold"
	}
	out, err := proc.Run(ctx, proc.Cmd{Path: d.aptMark, Args: []string{verb, "--", name}})
	if err != nil {
		return out.Stdout + out.Stderr, fmt.Errorf("apt-mark %s %s: %w", verb, name, err)
	}
	return out.Stdout, nil
}
