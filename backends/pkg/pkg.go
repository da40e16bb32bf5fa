// Package pkg is the package backend: one set of actions (install, remove,
// update, upgrade, info, list, search, hold, unhold) over whichever package
// manager the host has — apt/dpkg or dnf/rpm — picked once when the agent
// starts. Every program runs with an argument vector, never a shell, and
// every name reaches it after "--" or in a position where it cannot be an
// option; the schema's patterns refuse a leading '-' besides.
//
// The apt driver hands install, remove, update and upgrade-all to the apt
// backend (backends/apt), so that apt.* and package.* on a Debian host
// behave the same and cannot drift apart.
package pkg

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Patterns for params. A package name covers Debian's (lower case, + . -,
// an optional :arch) and RPM's (mixed case, _ too); it starts with a letter
// or digit so it can never be read as an option. A version starts with a
// digit (an epoch is digits too) and holds what dpkg and rpm versions hold.
const (
	NamePattern    = `^[A-Za-z0-9][A-Za-z0-9_+.-]*(:[a-z0-9-]+)?$`
	VersionPattern = `^[0-9][A-Za-z0-9._+~^:-]*$`
	// FilterPattern is a list filter or search term: a plain word, no
	// wildcards (the backend matches substrings itself).
	FilterPattern = `^[A-Za-z0-9][A-Za-z0-9_+.-]*$`
)

// ErrUnsupported is an action the host's package manager cannot do.
var ErrUnsupported = errors.New("not supported on this host")

// ErrNoManager is a host with no package manager this backend drives.
var ErrNoManager = errors.New("no supported package manager (apt-get with dpkg-query, or dnf with rpm) found on this host")

// Options configure the backend.
type Options struct {
	// Manager forces a driver: "apt" or "dnf"; empty detects one from the
	// programs found (apt first, then dnf).
	Manager string
	// Program paths; empty means the usual name from PATH.
	AptGetPath, DpkgQueryPath, AptCachePath, AptMarkPath string
	DnfPath, RpmPath                                     string
	// DnfInstallRoot, when set, makes dnf and rpm work on the system image
	// under this directory instead of the host's (dnf --installroot, rpm
	// --root): a chroot being prepared, and tests.
	DnfInstallRoot string
	// DnfConfig is a dnf.conf to use instead of /etc/dnf/dnf.conf.
	DnfConfig string
}

// Backend is the package backend.
type Backend struct {
	d      driver
	detErr error
}

// New returns the backend with the driver the host calls for. A host with
// no package manager still gets the backend (its schema is fixed), and
// every action says why it cannot run.
func New(opts Options) *Backend {
	m := opts.Manager
	if m == "" {
		m = Detect(opts)
	}
	switch m {
	case "apt":
		return &Backend{d: newApt(opts)}
	case "dnf":
		return &Backend{d: newDnf(opts)}
	case "":
		return &Backend{detErr: ErrNoManager}
	}
	return &Backend{detErr: fmt.Errorf("package manager %q: want apt or dnf", m)}
}

// Detect names the host's package manager: "apt" when apt-get and
// dpkg-query are found, else "dnf" when dnf and rpm are, else "".
func Detect(opts Options) string {
	found := func(path, name string) bool {
		if path == "" {
			path = name
		}
		_, err := exec.LookPath(path)
		return err == nil
	}
	switch {
	case found(opts.AptGetPath, "apt-get") && found(opts.DpkgQueryPath, "dpkg-query"):
		return "apt"
	case found(opts.DnfPath, "dnf") && found(opts.RpmPath, "rpm"):
		return "dnf"
	}
	return ""
}

// Manager is the driver in use ("apt", "dnf"), or "" when there is none.
func (b *Backend) Manager() string {
	if b.d == nil {
		return ""
	}
	return b.d.name()
}

// Installed is one installed package.
type Installed struct {
	Name, Version string
}

// Found is one search hit.
type Found struct {
	Name, Summary string
}

// driver is one package manager. Mutating calls honour req.CheckMode.
type driver interface {
	name() string
	// installed returns the installed version of a package, "" when it
	// is not installed.
	installed(ctx context.Context, name string) (string, error)
	install(ctx context.Context, req *backends.Request, name, version string) (*backends.Result, error)
	remove(ctx context.Context, req *backends.Request, name string) (*backends.Result, error)
	update(ctx context.Context, req *backends.Request) (*backends.Result, error)
	// upgrade upgrades one package, or all when name is "".
	upgrade(ctx context.Context, req *backends.Request, name string) (*backends.Result, error)
	info(ctx context.Context, name string) (map[string]any, string, error)
	list(ctx context.Context) ([]Installed, error)
	search(ctx context.Context, query string) ([]Found, error)
	// held lists held packages; ErrUnsupported when the host has no hold.
	held(ctx context.Context) ([]string, error)
	hold(ctx context.Context, name string, on bool) (string, error)
}

// Schema declares the actions.
func (*Backend) Schema() api.BackendSchema {
	name := api.ParamSchema{Name: "name", Type: api.TypeString, Required: true, Pattern: NamePattern,
		Description: "Package name, e.g. nginx (apt: may carry :arch; dnf: may carry .arch)."}
	optName := name
	optName.Required = false
	optName.Description = "One package to upgrade; empty upgrades every installed package."
	return api.BackendSchema{
		Name:        "package",
		Description: "Packages with the host's package manager (apt/dpkg or dnf/rpm, detected when the agent starts).",
		Actions: []api.ActionSchema{
			{Name: "install", Description: "Install a package; no change when it is installed (at the version, if one is given).",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{name,
					{Name: "version", Type: api.TypeString, Pattern: VersionPattern,
						Description: "Exact version to install, downgrading if need be (apt: 1.2-3, dnf: 1.2 or 1.2-3); default: keep any installed version, else the newest."}}},
			{Name: "remove", Description: "Remove a package; no change when it is not installed.",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{name}},
			{Name: "update", Description: "Refresh the package index (apt-get update, dnf makecache).", Idempotent: true, CheckMode: true},
			{Name: "upgrade", Description: "Upgrade one package or all installed packages to the newest versions.",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{optName}},
			{Name: "info", Description: "Report a package: installed version (empty when not installed) and the manager's details.",
				ReadOnly: true, Idempotent: true, Params: []api.ParamSchema{name}},
			{Name: "list", Description: "List installed packages with their versions (facts: packages, name to version).", ReadOnly: true, Idempotent: true,
				Params: []api.ParamSchema{{Name: "filter", Type: api.TypeString, Pattern: FilterPattern,
					Description: "Only packages whose name contains this; default: all."}, limitParam}},
			{Name: "search", Description: "Search the available packages by name and summary (facts: packages, name to summary).", ReadOnly: true, Idempotent: true,
				Params: []api.ParamSchema{{Name: "query", Type: api.TypeString, Required: true, Pattern: FilterPattern,
					Description: "Word to look for."}, limitParam}},
			{Name: "hold", Description: "Hold an installed package at its version so upgrades leave it (apt-mark hold; dnf versionlock, when the plugin is installed).",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{name}},
			{Name: "unhold", Description: "Release a held package; no change when it is not held.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{name}},
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "install", "remove", "update", "upgrade", "info", "list", "search", "hold", "unhold":
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	if b.d == nil {
		return nil, fmt.Errorf("package.%s: %w", req.Action, b.detErr)
	}
	p := req.Params
	switch req.Action {
	case "install":
		return b.d.install(ctx, req, p["name"], p["version"])
	case "remove":
		return b.d.remove(ctx, req, p["name"])
	case "update":
		return b.d.update(ctx, req)
	case "upgrade":
		return b.d.upgrade(ctx, req, p["name"])
	case "info":
		f, out, err := b.d.info(ctx, p["name"])
		if f != nil {
			f["manager"] = b.d.name()
		}
		return &backends.Result{Output: out, Facts: f}, err
	case "list", "search":
		limit, err := strconv.Atoi(p["limit"])
		if err != nil || limit < 1 {
			// The schema's pattern makes this unreachable through a
			// Registry; a direct caller gets the default.
			limit = 500
		}
		if req.Action == "list" {
			return b.list(ctx, p["filter"], limit)
		}
		return b.search(ctx, p["query"], limit)
	}
	return b.hold(ctx, req, p["name"], req.Action == "hold")
}

// limitParam bounds what list and search return: a host has thousands of
// packages, and a task's output and facts are each cut at the agent's
// max_output_bytes (64 KiB by default), which would drop the facts whole.
var limitParam = api.ParamSchema{Name: "limit", Type: api.TypeInt, Default: "500", Pattern: `^[1-9][0-9]{0,4}$`,
	Description: "Return at most this many packages (1-99999; the facts say when more matched)."}

func (b *Backend) list(ctx context.Context, filter string, limit int) (*backends.Result, error) {
	all, err := b.d.list(ctx)
	if err != nil {
		return nil, err
	}
	var sb strings.Builder
	pkgs := map[string]any{}
	matched := 0
	for _, p := range all {
		if filter != "" && !strings.Contains(p.Name, filter) {
			continue
		}
		if matched++; matched > limit {
			continue
		}
		fmt.Fprintf(&sb, "%s %s\n", p.Name, p.Version)
		pkgs[p.Name] = p.Version
	}
	return &backends.Result{Output: sb.String(), Facts: map[string]any{"manager": b.d.name(), "packages": pkgs,
		"count": matched, "truncated": matched > limit}}, nil
}

func (b *Backend) search(ctx context.Context, query string, limit int) (*backends.Result, error) {
	hits, err := b.d.search(ctx, query)
	if err != nil {
		return nil, err
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].Name < hits[j].Name })
	var sb strings.Builder
	found := map[string]any{}
	for i, h := range hits {
		if i == limit {
			break
		}
		fmt.Fprintf(&sb, "%s - %s\n", h.Name, h.Summary)
		found[h.Name] = h.Summary
	}
	return &backends.Result{Output: sb.String(), Facts: map[string]any{"manager": b.d.name(), "packages": found,
		"count": len(hits), "truncated": len(hits) > limit}}, nil
}

// hold reads the held set first, so holding a held package (or releasing
// one that is not held) reports no change, and check mode needs no more.
func (b *Backend) hold(ctx context.Context, req *backends.Request, name string, on bool) (*backends.Result, error) {
	held, err := b.d.held(ctx)
	if err != nil {
		return nil, err
	}
	is := false
	for _, h := range held {
		if h == name {
			is = true
		}
	}
	verb := map[bool]string{true: "held", false: "not held"}
	facts := map[string]any{"name": name, "held": is, "manager": b.d.name()}
	if is == on {
		return &backends.Result{Output: fmt.Sprintf("%s is already %s", name, verb[on]), Facts: facts}, nil
	}
	if on {
		// Holding a package that is not installed would pin nothing (apt
		// marks it anyway; versionlock refuses); say so plainly.
		v, err := b.d.installed(ctx, name)
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, fmt.Errorf("package.hold %s: it is not installed", name)
		}
	}
	if req.CheckMode {
		facts["held"] = on
		return &backends.Result{Output: fmt.Sprintf("check mode: %s would be %s", name, verb[on]), Changed: true, Facts: facts}, nil
	}
	out, err := b.d.hold(ctx, name, on)
	if err != nil {
		return &backends.Result{Output: out}, err
	}
	facts["held"] = on
	return &backends.Result{Output: out, Changed: true, Facts: facts}, nil
}

func versionFacts(name, version string) map[string]any {
	return map[string]any{"name": name, "version": version, "installed": version != ""}
}
