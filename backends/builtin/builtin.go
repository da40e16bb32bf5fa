// Package builtin assembles the registry of backends a GRID agent ships with.
package builtin

import (
	"fmt"
	"path/filepath"

	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/apt"
	"github.com/gridfleet/terraform-provider-grid/backends/cert"
	"github.com/gridfleet/terraform-provider-grid/backends/config"
	"github.com/gridfleet/terraform-provider-grid/backends/dns"
	execbackend "github.com/gridfleet/terraform-provider-grid/backends/exec"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
	"github.com/gridfleet/terraform-provider-grid/backends/firewall"
	"github.com/gridfleet/terraform-provider-grid/backends/health"
	"github.com/gridfleet/terraform-provider-grid/backends/journald"
	netbackend "github.com/gridfleet/terraform-provider-grid/backends/net"
	"github.com/gridfleet/terraform-provider-grid/backends/ping"
	"github.com/gridfleet/terraform-provider-grid/backends/pkg"
	procbackend "github.com/gridfleet/terraform-provider-grid/backends/proc"
	"github.com/gridfleet/terraform-provider-grid/backends/rke2"
	"github.com/gridfleet/terraform-provider-grid/backends/sysinfo"
	"github.com/gridfleet/terraform-provider-grid/backends/systemd"
	"github.com/gridfleet/terraform-provider-grid/backends/testbackend"
	"github.com/gridfleet/terraform-provider-grid/backends/user"
)

// ProgramSpec registers a program for the exec backend.
type ProgramSpec = execbackend.ProgramSpec

// Options configure the built-in backends that touch the host.
type Options struct {
	// Sandbox, when set, confines file-touching backends to this directory
	// (grid dev and tests): file works only under it (FileAllowedPrefixes
	// is ignored) and net's resolver file is <Sandbox>/resolv.conf unless
	// ResolvConfPath names one, and rke2 unpacks releases under
	// <Sandbox>/rke2. apt, package and systemd are not sandboxed (nor
	// rke2's systemctl calls); limit them with the allowlist or check_only.
	Sandbox string
	// FileAllowedPrefixes are the directories the file backend may touch.
	// None (and no Sandbox): the file backend refuses every path.
	FileAllowedPrefixes []string
	// FileDeniedPaths are paths file and config never touch, even under an
	// allowed prefix or the sandbox: the agent's data directory and
	// secrets.
	FileDeniedPaths []string
	// ResolvConfPath is the file net.dns_get reads and net.dns_set writes;
	// default /etc/resolv.conf.
	ResolvConfPath string
	// Programs are what the exec backend may run, by name. None: the exec
	// backend is not offered.
	Programs map[string]ProgramSpec
	// MaxOutputBytes is the agent's max_output_bytes: the most file.read
	// returns. 0: the file backend's default.
	MaxOutputBytes int
	// Binary paths, for hosts where they are not on PATH (and tests);
	// empty means look up the usual name, except PingPath: empty, net.ping
	// sends ICMP echo requests itself and needs no ping binary.
	SystemctlPath, AptGetPath, DpkgQueryPath, PingPath string
	// PackageManager forces the package backend's driver ("apt", "dnf");
	// empty detects it from the programs on the host.
	PackageManager string
	// RKE2ArtifactURL is the mirror the rke2 backend installs releases
	// from (none: rke2.install refuses); RKE2InstallRoot is where it
	// unpacks them, default /usr/local (always <Sandbox>/rke2 in a sandbox).
	RKE2ArtifactURL, RKE2InstallRoot string
}

// New returns a registry holding every built-in backend.
func New(opts Options) (*backends.Registry, error) {
	prefixes := opts.FileAllowedPrefixes
	resolv := opts.ResolvConfPath
	if opts.Sandbox != "" {
		sb, err := filepath.Abs(opts.Sandbox)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		prefixes = []string{sb}
		if resolv == "" {
			resolv = filepath.Join(sb, "resolv.conf")
		}
		opts.RKE2InstallRoot = filepath.Join(sb, "rke2")
	}
	f, err := file.New(file.Options{AllowedPrefixes: prefixes, DeniedPrefixes: opts.FileDeniedPaths, MaxReadBytes: opts.MaxOutputBytes})
	if err != nil {
		return nil, err
	}
	list := []backends.Backend{
		ping.New(),
		testbackend.New(),
		sysinfo.New(),
		f,
		apt.New(apt.Options{AptGetPath: opts.AptGetPath, DpkgQueryPath: opts.DpkgQueryPath}),
		systemd.New(systemd.Options{SystemctlPath: opts.SystemctlPath}),
		netbackend.New(netbackend.Options{PingPath: opts.PingPath, ResolvConfPath: resolv}),
		health.New(health.Options{SystemctlPath: opts.SystemctlPath}),
		cert.New(),
		procbackend.New(procbackend.Options{}),
		dns.New(),
		journald.New(journald.Options{}),
		pkg.New(pkg.Options{Manager: opts.PackageManager, AptGetPath: opts.AptGetPath, DpkgQueryPath: opts.DpkgQueryPath}),
		rke2.New(rke2.Options{ArtifactURL: opts.RKE2ArtifactURL, InstallRoot: opts.RKE2InstallRoot, SystemctlPath: opts.SystemctlPath}),
	}
	// config edits files through file, so it is confined to the same
	// prefixes (or sandbox).
	list = append(list, config.New(f), user.New(user.Options{}), firewall.New(firewall.Options{}))
	// An exec backend without programs could run nothing; leaving it out
	// keeps it off the node's advertised schemas.
	if len(opts.Programs) > 0 {
		x, err := execbackend.New(execbackend.Options{Programs: opts.Programs})
		if err != nil {
			return nil, err
		}
		list = append(list, x)
	}
	r := backends.NewRegistry()
	for _, b := range list {
		if err := r.Register(b); err != nil {
			return nil, err
		}
	}
	return r, nil
}
