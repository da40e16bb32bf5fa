package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Version is reported in NodeInfo; the build sets it.
var Version = "dev"

// Defaults of an agent's settings.
const (
	DefaultNATSURL           = "nats://127.0.0.1:4222"
	DefaultHeartbeatInterval = api.DefaultHeartbeatInterval
	DefaultTaskTimeout       = time.Hour
	DefaultMaxConcurrent     = 32
	DefaultShutdownGrace     = 30 * time.Second
	// DefaultMaxOutputBytes caps a task's output and its error each.
	DefaultMaxOutputBytes = 64 << 10
	// DefaultGOMAXPROCS is an agent process's GOMAXPROCS: an agent mostly
	// waits (on NATS, on the programs its backends run), and with one P a
	// command hands from goroutine to goroutine without waking other
	// threads. Measured with 100 agent processes on 2 cores: 0.82 ms of
	// CPU per command with 1, 1.14 ms with 2 (bench fanout --agent-procs).
	DefaultGOMAXPROCS = 1
	// MaxOutputBytesLimit is the most max_output_bytes may be: a final
	// result must stay well under the bus's 8 MiB payload limit.
	MaxOutputBytesLimit = 1 << 20
)

// Duration is a time.Duration written as "10s" in YAML.
type Duration = config.Duration

// Config configures an agent. The zero value of a field means its default
// (New fills them in), so programmatic callers set only what they need.
type Config struct {
	// Name is the node id; it defaults to the short hostname.
	Name string `yaml:"name"`
	// Groups are the dotted groups the node belongs to (web.dev.us-east).
	Groups []string `yaml:"groups"`
	// NATSURLs are the servers to connect to.
	NATSURLs []string `yaml:"nats"`
	// DataDir holds the agent's own state, its NKey (agent.nk) among it.
	DataDir string `yaml:"data_dir"`
	// CAFile is the CA that signed the controllers' certificates (a
	// controller's DATA_DIR/ca.pem). Set, the agent connects with TLS and
	// its NKey and enrolls; unset, it connects without either (a controller
	// started insecure).
	CAFile string `yaml:"ca_file"`
	// File is the config file the agent read (LoadConfig sets it), which
	// jobs may not read or rewrite.
	File string `yaml:"-"`
	// JoinToken (or the file JoinTokenFile names) is the controllers' join
	// token (DATA_DIR/join-token), needed for the first enrollment only.
	JoinToken     string `yaml:"join_token"`
	JoinTokenFile string `yaml:"join_token_file"`
	// Sandbox, when set, confines the file-touching built-in backends (file,
	// net's resolver file) to this directory; grid dev sets it.
	Sandbox string `yaml:"sandbox"`
	// Backends configures the built-in backends.
	Backends BackendsConfig `yaml:"backends"`
	// HeartbeatInterval is how often NodeInfo is re-put with a fresh
	// last_seen.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// TaskTimeout bounds a task whose command carries no timeout.
	TaskTimeout Duration `yaml:"task_timeout"`
	// MaxConcurrent bounds the tasks running at once; more wait their turn.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Allow enables backend actions (see backends.ParseAllowlist); empty
	// enables every action not marked dangerous. When set, it replaces the
	// allowlist of Registry, including a caller-supplied one.
	Allow []string `yaml:"allow"`
	// CheckOnly names actions (backend, backend.action or *) this node runs
	// only in check mode: they report what they would change and change
	// nothing, whatever the job asks. grid dev sets apt and systemd.
	CheckOnly []string `yaml:"check_only"`
	// ShutdownGrace is how long a graceful shutdown waits for running tasks
	// before interrupting them. Zero means the default, as for every
	// duration here.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// MaxOutputBytes caps a task's output and its error message each
	// (bytes); the result keeps the start and says it was truncated. Zero
	// means the default (64 KiB), at most 1 MiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`

	// Registry holds the backends to offer; nil means the built-in set.
	Registry *backends.Registry `yaml:"-"`
	// Logger receives the agent's logs; nil logs nothing (as everywhere in
	// GRID: internal/config.Logger).
	Logger *slog.Logger `yaml:"-"`
	// MetricsAddr, when set, is where the agent serves /metrics, /healthz
	// and /readyz (host:port; port 0 picks one).
	MetricsAddr string `yaml:"metrics_addr"`
	// GOMAXPROCS is how many threads an agent process runs Go code on at
	// once (ApplyProcessSettings); 0 means DefaultGOMAXPROCS. The GOMAXPROCS
	// environment variable wins over both.
	GOMAXPROCS int `yaml:"gomaxprocs"`
	// DebugAddr, when set, serves the Go profiler (/debug/pprof/) on this
	// host:port, a listener of its own; off when empty.
	DebugAddr string `yaml:"debug_addr"`
	// TracerProvider makes the agent's spans; nil means the global
	// provider (a no-op unless the process set one up).
	TracerProvider trace.TracerProvider `yaml:"-"`
}

// BackendsConfig configures the built-in backends that touch the host.
type BackendsConfig struct {
	// FileAllowedPrefixes are the directories the file backend may touch;
	// none means it refuses every path.
	FileAllowedPrefixes []string `yaml:"file_allowed_prefixes"`
	// ResolvConfPath is the resolver file net.dns_get and net.dns_set use.
	ResolvConfPath string `yaml:"resolv_conf_path"`
	// Programs are what the exec backend may run, by the name jobs use.
	Programs map[string]ProgramConfig `yaml:"programs"`
	// PackageManager forces the package backend's driver (apt or dnf);
	// empty detects it from the programs on the host.
	PackageManager string `yaml:"package_manager"`
	// RKE2 configures the rke2 backend.
	RKE2 RKE2Config `yaml:"rke2"`
}

// RKE2Config configures the rke2 backend.
type RKE2Config struct {
	// ArtifactURL is the http(s) base of a mirror of RKE2's release
	// artifacts (<url>/<version>/rke2.linux-<arch>.tar.gz and
	// sha256sum-<arch>.txt); none: rke2.install refuses.
	ArtifactURL string `yaml:"artifact_url"`
	// InstallRoot is where releases are unpacked; default /usr/local.
	InstallRoot string `yaml:"install_root"`
}

// ProgramConfig registers one program for the exec backend.
type ProgramConfig struct {
	Path    string   `yaml:"path"`
	Args    []string `yaml:"args"`
	Mode    string   `yaml:"mode"`
	Timeout Duration `yaml:"timeout"`
}

// builtinOptions turns the config into the built-in backends' options.
func (c Config) builtinOptions() builtin.Options {
	o := builtin.Options{Sandbox: c.Sandbox, FileAllowedPrefixes: c.Backends.FileAllowedPrefixes,
		ResolvConfPath: c.Backends.ResolvConfPath, PackageManager: c.Backends.PackageManager,
		RKE2ArtifactURL: c.Backends.RKE2.ArtifactURL, RKE2InstallRoot: c.Backends.RKE2.InstallRoot,
		MaxOutputBytes: c.MaxOutputBytes}
	// The agent's key and join token are never a job's to read or replace,
	// whatever file_allowed_prefixes says; nor its config (a job writing
	// allow: ["*"] there would have every dangerous action after the next
	// restart) or the CA it trusts the controllers by.
	for _, p := range []string{c.DataDir, c.JoinTokenFile, c.File, c.CAFile} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			o.FileDeniedPaths = append(o.FileDeniedPaths, abs)
		}
	}
	if len(c.Backends.Programs) > 0 {
		o.Programs = map[string]builtin.ProgramSpec{}
		for name, p := range c.Backends.Programs {
			o.Programs[name] = builtin.ProgramSpec{Path: p.Path, Args: p.Args, Mode: p.Mode, Timeout: p.Timeout.D()}
		}
	}
	return o
}

// DefaultConfig returns a config with every default filled in.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:              DefaultName(host),
		NATSURLs:          []string{DefaultNATSURL},
		HeartbeatInterval: Duration(DefaultHeartbeatInterval),
		TaskTimeout:       Duration(DefaultTaskTimeout),
		MaxConcurrent:     DefaultMaxConcurrent,
		ShutdownGrace:     Duration(DefaultShutdownGrace),
		MaxOutputBytes:    DefaultMaxOutputBytes,
	}
}

// DefaultName turns a hostname into a node id: the first label of the name
// (a node id is one NATS subject token, so it cannot hold dots), with any
// other character a token cannot hold replaced by '-'.
func DefaultName(hostname string) string {
	short, _, _ := strings.Cut(strings.TrimSpace(hostname), ".")
	b := []byte(short)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	if len(b) == 0 {
		return "node"
	}
	return string(b)
}

// withDefaults fills zero fields with their defaults. ShutdownGrace is only
// defaulted when zero, since a negative value is an error Validate reports.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Name == "" {
		c.Name = d.Name
	}
	if len(c.NATSURLs) == 0 {
		c.NATSURLs = d.NATSURLs
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = d.TaskTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = d.MaxConcurrent
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = d.ShutdownGrace
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = d.MaxOutputBytes
	}
	return c
}

// Validate reports every problem with the config at once, naming the YAML
// key of each.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("agent config: "+format, args...))
	}
	switch {
	case c.Name == "":
		bad("name is empty (leave it out to use the hostname)")
	case !api.ValidToken(c.Name):
		bad("name %q: want letters, digits, '-' or '_' (at most 128), no dots", c.Name)
	}
	for i, g := range c.Groups {
		if !api.ValidGroup(g) {
			bad("groups[%d] %q: want dot-separated names of letters, digits, '-' or '_' (e.g. web.dev.us-east)", i, g)
		}
	}
	if len(c.NATSURLs) == 0 {
		bad("nats: no server URL (e.g. %s)", DefaultNATSURL)
	}
	for i, u := range c.NATSURLs {
		if strings.TrimSpace(u) == "" {
			bad("nats[%d] is empty", i)
		}
	}
	if c.HeartbeatInterval <= 0 {
		bad("heartbeat_interval must be positive, got %s", c.HeartbeatInterval)
	}
	if c.TaskTimeout <= 0 {
		bad("task_timeout must be positive, got %s", c.TaskTimeout)
	}
	if c.MaxConcurrent < 1 {
		bad("max_concurrent must be at least 1, got %d", c.MaxConcurrent)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			bad("metrics_addr %q: want host:port (port 0 picks one)", c.MetricsAddr)
		}
	}
	if c.GOMAXPROCS < 0 {
		bad("gomaxprocs must not be negative, got %d", c.GOMAXPROCS)
	}
	if c.DebugAddr != "" {
		if _, _, err := net.SplitHostPort(c.DebugAddr); err != nil {
			bad("debug_addr %q: want host:port", c.DebugAddr)
		}
	}
	if (c.JoinToken != "" || c.JoinTokenFile != "") && c.CAFile == "" {
		bad("join_token needs ca_file (the controller's ca.pem): an enrollment travels over TLS only")
	}
	if c.JoinToken != "" && c.JoinTokenFile != "" {
		bad("join_token and join_token_file: set one")
	}
	if c.CAFile != "" && c.DataDir == "" {
		bad("data_dir is required with ca_file: the agent keeps its key there")
	}
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace must not be negative, got %s", c.ShutdownGrace)
	}
	if c.MaxOutputBytes < 0 || c.MaxOutputBytes > MaxOutputBytesLimit {
		bad("max_output_bytes must be between 1 and %d, got %d", MaxOutputBytesLimit, c.MaxOutputBytes)
	}
	if _, err := backends.ParseAllowlist(c.Allow); err != nil {
		bad("allow: %w", err)
	}
	if _, err := backends.ParseAllowlist(c.CheckOnly); err != nil {
		bad("check_only: %w", err)
	}
	if m := c.Backends.PackageManager; m != "" && m != "apt" && m != "dnf" {
		bad("backends.package_manager: want apt or dnf (or nothing, to detect it), got %q", m)
	}
	if u := c.Backends.RKE2.ArtifactURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			bad("backends.rke2.artifact_url: want an http(s) URL, got %q", u)
		}
	}
	if r := c.Backends.RKE2.InstallRoot; r != "" && !filepath.IsAbs(r) {
		bad("backends.rke2.install_root must be an absolute path, got %q", r)
	}
	return errors.Join(errs...)
}

// LoadConfig reads the YAML file at path into into, overriding only the keys
// the file sets (start from DefaultConfig). Unknown keys are errors, so a
// misspelt setting is not silently ignored. The result is not validated.
func LoadConfig(path string, into *Config) error {
	if err := config.Load(path, "agent config", into); err != nil {
		return err
	}
	into.File = path
	return nil
}
