package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	full := write("full.yaml", `
name: web-1
groups: [web.dev.us-east, db]
nats: [nats://a:4222, nats://b:4222]
data_dir: /var/lib/grid
heartbeat_interval: 5s
task_timeout: 10m
max_concurrent: 4
allow: [ping, systemd.restart]
shutdown_grace: 1m30s
`)
	c := DefaultConfig()
	if err := LoadConfig(full, &c); err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if c.Name != "web-1" || !slices.Equal(c.Groups, []string{"web.dev.us-east", "db"}) ||
		!slices.Equal(c.NATSURLs, []string{"nats://a:4222", "nats://b:4222"}) || c.DataDir != "/var/lib/grid" ||
		c.HeartbeatInterval.D() != 5*time.Second || c.TaskTimeout.D() != 10*time.Minute || c.MaxConcurrent != 4 ||
		!slices.Equal(c.Allow, []string{"ping", "systemd.restart"}) || c.ShutdownGrace.D() != 90*time.Second {
		t.Errorf("loaded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// Keys the file leaves out keep their defaults.
	partial := write("partial.yaml", "groups: [web]\n")
	c = DefaultConfig()
	if err := LoadConfig(partial, &c); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatInterval.D() != DefaultHeartbeatInterval || c.MaxConcurrent != DefaultMaxConcurrent || c.Name == "" {
		t.Errorf("defaults lost: %+v", c)
	}
	empty := write("empty.yaml", "")
	if err := LoadConfig(empty, &c); err != nil {
		t.Errorf("empty file: %v", err)
	}

	bad := []struct {
		name, body, want string
	}{
		{"unknown key", "name: a\nheartbeat: 5s\n", "heartbeat"},
		{"bad duration", "task_timeout: forever\n", "not a duration"},
		{"number duration", "heartbeat_interval: 10\n", "not a duration"},
		{"two documents", "name: a\n---\nname: b\n", "one YAML document"},
		{"wrong type", "max_concurrent: many\n", "many"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			c := DefaultConfig()
			err := LoadConfig(write(strings.ReplaceAll(b.name, " ", "_")+".yaml", b.body), &c)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("err = %v, want one naming %q", err, b.want)
			}
		})
	}
	if err := LoadConfig(filepath.Join(dir, "missing.yaml"), &c); err == nil {
		t.Error("missing file: no error")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty name", func(c *Config) { c.Name = "" }, "name is empty"},
		{"dotted name", func(c *Config) { c.Name = "web1.example.com" }, "no dots"},
		{"bad group", func(c *Config) { c.Groups = []string{"web", "web..dev"} }, "groups[1]"},
		{"no nats", func(c *Config) { c.NATSURLs = nil }, "nats"},
		{"zero heartbeat", func(c *Config) { c.HeartbeatInterval = 0 }, "heartbeat_interval"},
		{"zero task timeout", func(c *Config) { c.TaskTimeout = 0 }, "task_timeout"},
		{"no slots", func(c *Config) { c.MaxConcurrent = 0 }, "max_concurrent"},
		{"negative grace", func(c *Config) { c.ShutdownGrace = Duration(-time.Second) }, "shutdown_grace"},
		{"zero grace", func(c *Config) { c.ShutdownGrace = 0 }, ""},
		{"bad allow entry", func(c *Config) { c.Allow = []string{"ping", "rm -rf"} }, "allow"},
		{"allow all", func(c *Config) { c.Allow = []string{"*"} }, ""},
		{"bad debug_addr", func(c *Config) { c.DebugAddr = "6060" }, "debug_addr"},
		{"debug_addr", func(c *Config) { c.DebugAddr = "127.0.0.1:0" }, ""},
		{"negative gomaxprocs", func(c *Config) { c.GOMAXPROCS = -1 }, "gomaxprocs"},
		{"package manager", func(c *Config) { c.Backends.PackageManager = "dnf" }, ""},
		{"bad package manager", func(c *Config) { c.Backends.PackageManager = "yum" }, "backends.package_manager"},
		{"rke2 mirror", func(c *Config) { c.Backends.RKE2.ArtifactURL = "https://mirror.example.com/rke2" }, ""},
		{"bad rke2 mirror", func(c *Config) { c.Backends.RKE2.ArtifactURL = "mirror.example.com/rke2" }, "backends.rke2.artifact_url"},
		{"relative rke2 root", func(c *Config) { c.Backends.RKE2.InstallRoot = "usr/local" }, "backends.rke2.install_root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = "node-1"
			c.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("err = %v, want one naming %q", err, c.want)
			}
		})
	}

	// Validate reports every problem, not just the first.
	cfg := Config{Name: "a.b", MaxConcurrent: -1}
	err := cfg.Validate()
	for _, want := range []string{"name", "nats", "heartbeat_interval", "task_timeout", "max_concurrent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	a, err := New(Config{Name: "n1", Groups: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.HeartbeatInterval.D() != DefaultHeartbeatInterval || a.cfg.MaxConcurrent != DefaultMaxConcurrent ||
		!slices.Equal(a.cfg.NATSURLs, []string{DefaultNATSURL}) || a.cfg.ShutdownGrace.D() != DefaultShutdownGrace {
		t.Errorf("defaults not applied: %+v", a.cfg)
	}
	if a.ID() != "n1" || a.Info().SchemaDigest == "" || len(a.Info().Schemas) == 0 {
		t.Errorf("id %q info %+v", a.ID(), a.Info())
	}
	if _, err := New(Config{Name: "bad name"}); err == nil {
		t.Error("New accepted an invalid name")
	}
	if _, err := New(Config{Name: "n2", Allow: []string{"nothing.here.deep"}}); err == nil {
		t.Error("New accepted an invalid allow entry")
	}
}

func TestDefaultName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"web1":                   "web1",
		"web1.example.com":       "web1",
		"My Laptop":              "My-Laptop",
		"":                       "node",
		strings.Repeat("x", 300): strings.Repeat("x", 128),
	} {
		if got := DefaultName(in); got != want {
			t.Errorf("DefaultName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The backends section of the README's agent.yaml loads into the options
// the built-in backends get.
func TestLoadConfigBackendsSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	yaml := `name: web-01
groups: [web.prod]
backends:
  file_allowed_prefixes: [/etc/myapp, /srv/www]
  resolv_conf_path: /etc/resolv.conf
  programs:
    inventory: {path: /usr/local/libexec/inventory, mode: oneshot, timeout: 30s}
  package_manager: dnf
  rke2: {artifact_url: "https://mirror.example.com/rke2", install_root: /opt/rke2}
sandbox: /var/lib/grid/sandbox
max_output_bytes: 4096
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if err := LoadConfig(path, &cfg); err != nil {
		t.Fatal(err)
	}
	o := cfg.builtinOptions()
	// file.read returns at most what the agent passes on as output.
	if o.Sandbox != "/var/lib/grid/sandbox" || len(o.FileAllowedPrefixes) != 2 || o.ResolvConfPath != "/etc/resolv.conf" || o.MaxOutputBytes != 4096 {
		t.Fatalf("options %+v", o)
	}
	if o.PackageManager != "dnf" || o.RKE2ArtifactURL != "https://mirror.example.com/rke2" || o.RKE2InstallRoot != "/opt/rke2" {
		t.Fatalf("package/rke2 options %+v", o)
	}
	p := o.Programs["inventory"]
	if p.Path != "/usr/local/libexec/inventory" || p.Mode != "oneshot" || p.Timeout != 30*time.Second {
		t.Fatalf("program %+v", p)
	}
}
