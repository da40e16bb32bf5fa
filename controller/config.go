package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Config configures a controller. The yaml keys are those of the
// controller's config file.
type Config struct {
	// Name identifies the controller among its peers; defaults to an id kept
	// in the data dir so a restart keeps its identity.
	Name string `yaml:"name"`
	// APIAddr is where the HTTP API listens (host:port; port 0 picks one).
	APIAddr string `yaml:"api_addr"`
	// NATSAddr is where the embedded NATS server listens (port 0 or -1
	// picks one).
	NATSAddr string `yaml:"nats_addr"`
	// DataDir holds JetStream's file store and the controller id.
	DataDir string `yaml:"data_dir"`
	// NATSURLs, when set, connect to an existing NATS cluster instead of
	// embedding a server.
	NATSURLs []string `yaml:"nats_urls"`
	// NATSCreds and NATSCAFile authenticate to the NATS of nats_urls: a
	// credentials file (.creds with a user JWT, or an NKey seed) and the CA
	// that signed the servers' certificates.
	NATSCreds  string `yaml:"nats_creds"`
	NATSCAFile string `yaml:"nats_ca_file"`
	// Insecure turns the embedded server's TLS and authentication off:
	// anyone who reaches the NATS port controls the fleet. It also serves
	// the HTTP API as plain HTTP, so tokens cross the network in clear.
	// For labs only; the controller warns at every start.
	Insecure bool `yaml:"insecure"`
	// AnonymousRole, when set (read, operator or admin), lets a request
	// without an Authorization header in as the principal "anonymous"
	// with that role, so a client that knows no tokens (the seed's own
	// client) can use the API; its answers on the job routes use the seed's
	// status set (see DESIGN.md, "Anonymous access"). Only with insecure:
	// true; empty (the default) means every request needs a token.
	AnonymousRole api.Role `yaml:"anonymous_role"`
	// APITLSCert and APITLSKey are the HTTPS certificate and key of the API
	// (PEM files), e.g. from the operator's own CA. Unset, the API uses
	// the data dir's server certificate, issued by the controller's CA
	// (DATA_DIR/ca.pem is then what clients trust).
	APITLSCert string `yaml:"api_tls_cert"`
	APITLSKey  string `yaml:"api_tls_key"`
	// APIClientCA, when set, is a PEM file of CAs: the API then requires a
	// client certificate signed by one of them on every connection (mTLS),
	// in addition to the bearer token.
	APIClientCA string `yaml:"api_client_ca"`
	// AutoAdmit admits an agent that enrolls with a valid join token at
	// once; false keeps it pending until "grid node approve". Nil means
	// true.
	AutoAdmit *bool `yaml:"auto_admit"`
	// TLSHosts are extra names (DNS or IP) for the server certificate, when
	// agents or peers reach this controller by a name its listen addresses
	// and hostname do not give.
	TLSHosts []string `yaml:"tls_hosts"`
	// ClusterName, ClusterAddr and Routes join the embedded server to its
	// peers' (one NATS cluster, JetStream replicated across it).
	ClusterName string   `yaml:"cluster_name"`
	ClusterAddr string   `yaml:"cluster_addr"`
	Routes      []string `yaml:"routes"`
	// LeafAddr is where the embedded server accepts the leaf connections
	// of sites' relays (host:port; empty: no sites). Each relay proves its
	// site's key and gets the rights of its site's nodes only.
	LeafAddr string `yaml:"leaf_addr"`
	// LeafAdvertise is the URL a site's credential names for this
	// controller's leaf port (tls://host:port), when relays reach it by
	// another name than leaf_addr's host; default tls://<leaf_addr>, the
	// hostname for a wildcard address.
	LeafAdvertise string `yaml:"leaf_advertise"`
	// Replicas for streams and buckets. 0 (the default, also when the key
	// is absent) chooses: 1 on a single server or with nats_urls, and in a
	// cluster (cluster_name and routes set) min(3, servers), the servers
	// being this one and the distinct routes that are not its own
	// cluster_addr; existing streams are raised to it, never lowered. An
	// explicit 1 to 5 is used as given (raising or lowering existing
	// streams); 1 in a cluster is logged as a warning at every start.
	Replicas int `yaml:"replicas"`
	// MaxConcurrent bounds the jobs this controller runs at once.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxPending bounds jobs waiting to run; beyond it POST /job answers 429.
	MaxPending int `yaml:"max_pending"`
	// MaxDeliveries is how often a job's request may be delivered to a
	// scheduler without a claim finishing (a job that cannot be read, a
	// controller crashing on it) before it moves to the dead-letter stream.
	MaxDeliveries int `yaml:"max_deliveries"`
	// NodeOfflineAfter is how old a node's last heartbeat may get before the
	// node counts as offline.
	NodeOfflineAfter config.Duration `yaml:"node_offline_after"`
	// DefaultTaskTimeout bounds a task that sets no timeout of its own.
	DefaultTaskTimeout config.Duration `yaml:"default_task_timeout"`
	// ResultGrace is how long past a task's timeout the controller waits for
	// the agent's own timeout report before failing the node itself.
	ResultGrace config.Duration `yaml:"result_grace"`
	// RetryBackoff is the first retry delay; each further retry doubles it,
	// up to RetryBackoffMax.
	RetryBackoff    config.Duration `yaml:"retry_backoff"`
	RetryBackoffMax config.Duration `yaml:"retry_backoff_max"`
	// FlushInterval bounds how often a running job is written to KV.
	FlushInterval config.Duration `yaml:"flush_interval"`
	// HeartbeatInterval is how often the controller refreshes its own entry
	// and looks for orphaned jobs.
	HeartbeatInterval config.Duration `yaml:"heartbeat_interval"`
	// ControllerStaleAfter is how old a peer's heartbeat may get before its
	// running jobs are taken over.
	ControllerStaleAfter config.Duration `yaml:"controller_stale_after"`
	// JobRetention is how long a finished job is kept (GET /job answers
	// 404 after it): the jobs bucket holds running and pending jobs plus
	// this much history.
	JobRetention config.Duration `yaml:"job_retention"`
	// ScheduleGrace is how late a schedule's tick may fire. A tick later
	// than that (every controller was down) is missed, and the schedule's
	// catch_up says what happens: skip fires nothing for the missed ticks,
	// run_once fires one job for them all.
	ScheduleGrace config.Duration `yaml:"schedule_grace"`
	// MaxBodyBytes caps request bodies; larger ones get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Allow is the controller's own policy of submittable actions: entries
	// "backend", "backend.action" or "*". Empty accepts every action that
	// online nodes offer (each agent still applies its own allow list).
	// Anything else is refused with 403 naming the action.
	Allow []string `yaml:"allow"`
	// DangerousRoles are the token roles that may submit actions marked
	// dangerous (apt remove, systemd stop, ...) other than in check mode.
	// Default: admin. Empty: nobody.
	DangerousRoles []api.Role `yaml:"dangerous_roles"`
	// DebugAddr, when set, serves the Go profiler (/debug/pprof/) and the
	// runtime's memory classes (/debug/memory) on this host:port. Off by
	// default: profiles show the process's internals to whoever connects.
	DebugAddr string `yaml:"debug_addr"`
	// MemoryLimit is the Go runtime's soft memory limit for the controller's
	// process (runtime/debug.SetMemoryLimit), set by "grid controller" at
	// start. Near it the garbage collector runs more often, which shrinks
	// goroutine stacks (two per NATS client connection) and returns freed
	// memory to the OS, at a CPU cost; it is a target, not a cap (the
	// runtime lets the heap exceed it rather than collect all the time).
	// It holds while jobs run too, raised to the collector's own target
	// plus stacks and 64 MiB then (see effectiveMemoryLimit). 0 sets none. GOMEMLIMIT or GOGC in the environment take precedence:
	// with either set, the runtime's own settings are left alone.
	MemoryLimit ByteSize `yaml:"memory_limit"`
	// RequestsMaxBytes, CommandsMaxBytes, ResultsMaxBytes, DLQMaxBytes and
	// JobsMaxBytes cap what the requests, commands, results and dead-letter
	// streams and the jobs bucket hold; SmallBucketsMaxBytes caps each of
	// the other buckets (nodes, schemas, controllers, enrollments, tokens,
	// keys, job_secrets, rate_limits, schedules), 0 deriving it from
	// JobsMaxBytes (a sixteenth, at least 64 MiB). JetStream reserves each
	// cap on every server that holds a replica, so they must fit its
	// storage. Full, the jobs bucket makes POST /job answer 507 naming
	// jobs_max_bytes (an eighth of it is kept for running jobs' results),
	// and the requests and dead-letter streams and the buckets refuse new
	// writes; the commands and results streams drop their oldest messages.
	// An existing stream holding more than its new cap keeps its old cap
	// until it holds less (see DESIGN.md, "Streams and buckets").
	RequestsMaxBytes     ByteSize `yaml:"requests_max_bytes"`
	CommandsMaxBytes     ByteSize `yaml:"commands_max_bytes"`
	ResultsMaxBytes      ByteSize `yaml:"results_max_bytes"`
	DLQMaxBytes          ByteSize `yaml:"dlq_max_bytes"`
	JobsMaxBytes         ByteSize `yaml:"jobs_max_bytes"`
	SmallBucketsMaxBytes ByteSize `yaml:"small_buckets_max_bytes"`
	// AuditRetention is how long audit records are kept: by default 400
	// days, a year plus slack, so that an annual review still finds the
	// whole year it looks back on. AuditMaxBytes caps the audit stream
	// (default 1 GiB, some two million records). Full, the stream refuses
	// new records, and the API then refuses mutating calls with 503 (an
	// action is never done without its record): raise it, or shorten the
	// retention. See DESIGN.md, "Audit trail".
	AuditRetention config.Duration `yaml:"audit_retention"`
	AuditMaxBytes  ByteSize        `yaml:"audit_max_bytes"`
	// RateLimits bound how many tasks of an action start per window across
	// the cluster (see RateLimit); every controller of a cluster should
	// list the same ones. A job held back by a limit waits, never fails.
	RateLimits RateLimits `yaml:"rate_limits"`

	// Logger receives the controller's logs; nil logs nothing (as everywhere
	// in GRID: internal/config.Logger).
	Logger *slog.Logger `yaml:"-"`
	// TracerProvider makes the controller's spans; nil means the global
	// provider (a no-op unless the process set one up).
	TracerProvider trace.TracerProvider `yaml:"-"`
}

// DefaultConfig returns a controller config for one machine.
func DefaultConfig() Config {
	return Config{
		APIAddr:              "127.0.0.1:8765",
		NATSAddr:             "127.0.0.1:4222",
		DataDir:              "grid-data",
		MaxConcurrent:        256,
		MaxPending:           10000,
		MaxDeliveries:        5,
		NodeOfflineAfter:     config.Duration(30 * time.Second),
		DefaultTaskTimeout:   config.Duration(time.Hour),
		ResultGrace:          config.Duration(10 * time.Second),
		RetryBackoff:         config.Duration(500 * time.Millisecond),
		RetryBackoffMax:      config.Duration(30 * time.Second),
		FlushInterval:        config.Duration(100 * time.Millisecond),
		HeartbeatInterval:    config.Duration(5 * time.Second),
		ControllerStaleAfter: config.Duration(15 * time.Second),
		JobRetention:         config.Duration(7 * 24 * time.Hour),
		ScheduleGrace:        config.Duration(time.Minute),
		MaxBodyBytes:         api.MaxJobFileBytes,
		DangerousRoles:       []api.Role{api.RoleAdmin},
		MemoryLimit:          DefaultMemoryLimit,
		RequestsMaxBytes:     bus.DefaultRequestsMaxBytes,
		CommandsMaxBytes:     bus.DefaultCommandsMaxBytes,
		ResultsMaxBytes:      bus.DefaultResultsMaxBytes,
		DLQMaxBytes:          bus.DefaultDLQMaxBytes,
		JobsMaxBytes:         bus.DefaultJobsMaxBytes,
		AuditRetention:       config.Duration(bus.DefaultAuditRetention),
		AuditMaxBytes:        bus.DefaultAuditMaxBytes,
	}
}

// autoAdmit is AutoAdmit with its default.
func (c Config) autoAdmit() bool { return c.AutoAdmit == nil || *c.AutoAdmit }

// LoadConfig reads the YAML file at path into into, overriding only the keys
// the file sets (start from DefaultConfig). Unknown keys are errors. The
// result is not validated.
func LoadConfig(path string, into *Config) error {
	return config.Load(path, "config", into)
}

// Validate checks the config and says what to fix.
func (c Config) Validate() error {
	var errs []error
	if c.Name != "" && !api.ValidToken(c.Name) {
		errs = append(errs, fmt.Errorf("name %q: use letters, digits, '_' and '-'", c.Name))
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		errs = append(errs, fmt.Errorf("api_addr %q: want host:port", c.APIAddr))
	}
	if _, _, err := net.SplitHostPort(c.NATSAddr); err != nil {
		errs = append(errs, fmt.Errorf("nats_addr %q: want host:port", c.NATSAddr))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	if c.LeafAddr != "" {
		if _, _, err := net.SplitHostPort(c.LeafAddr); err != nil {
			errs = append(errs, fmt.Errorf("leaf_addr %q: want host:port", c.LeafAddr))
		}
		if c.Insecure || len(c.NATSURLs) > 0 {
			errs = append(errs, errors.New("leaf_addr: sites need the embedded server's TLS and authentication; drop insecure and nats_urls, or leaf_addr"))
		}
	}
	if c.LeafAdvertise != "" && c.LeafAddr == "" {
		errs = append(errs, errors.New("leaf_advertise needs leaf_addr"))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be between 1 and 5, or 0 to choose from the cluster's size, got %d", c.Replicas))
	} else if c.Replicas > 1 && c.ClusterName == "" && len(c.NATSURLs) == 0 {
		errs = append(errs, fmt.Errorf("replicas %d needs a cluster: set cluster_name and routes, or leave replicas unset (one server keeps one copy)", c.Replicas))
	}
	if len(c.NATSURLs) > 0 && !c.Insecure && c.NATSCreds == "" {
		errs = append(errs, errors.New("nats_urls: set nats_creds (and nats_ca_file) to authenticate to that NATS, or insecure: true for a lab"))
	}
	if len(c.NATSURLs) == 0 && (c.NATSCreds != "" || c.NATSCAFile != "") {
		errs = append(errs, errors.New("nats_creds and nats_ca_file are for nats_urls; the embedded server uses the files in data_dir"))
	}
	if (c.APITLSCert == "") != (c.APITLSKey == "") {
		errs = append(errs, errors.New("api_tls_cert and api_tls_key: set both (the certificate and its key) or neither"))
	}
	if c.Insecure && (c.APITLSCert != "" || c.APIClientCA != "") {
		errs = append(errs, errors.New("api_tls_cert, api_tls_key and api_client_ca need HTTPS; insecure: true serves the API as plain HTTP, so drop one or the other"))
	}
	if c.AnonymousRole != "" {
		switch {
		case c.AnonymousRole != api.RoleRead && c.AnonymousRole != api.RoleOperator && c.AnonymousRole != api.RoleAdmin:
			errs = append(errs, fmt.Errorf("anonymous_role %q: want read, operator or admin, or leave it empty for no anonymous access", c.AnonymousRole))
		case !c.Insecure:
			errs = append(errs, fmt.Errorf("anonymous_role %s lets requests without a token in, which only a lab may do: "+
				"it needs insecure: true (--insecure); on a secured controller leave it empty and give clients a token (grid token create)", c.AnonymousRole))
		}
	}
	if c.ClusterName != "" && len(c.NATSURLs) > 0 {
		errs = append(errs, errors.New("cluster_name joins the embedded server to a cluster; with nats_urls nothing is embedded, so set one or the other"))
	}
	if c.MaxConcurrent < 1 {
		errs = append(errs, fmt.Errorf("max_concurrent must be at least 1, got %d", c.MaxConcurrent))
	}
	if c.MaxPending < 1 {
		errs = append(errs, fmt.Errorf("max_pending must be at least 1, got %d", c.MaxPending))
	}
	if c.ScheduleGrace.D() < time.Second {
		errs = append(errs, fmt.Errorf("schedule_grace must be at least 1s, got %s", c.ScheduleGrace.D()))
	}
	if c.MaxDeliveries < 2 {
		errs = append(errs, fmt.Errorf("max_deliveries must be at least 2, got %d", c.MaxDeliveries))
	}
	for name, d := range map[string]config.Duration{
		"node_offline_after": c.NodeOfflineAfter, "default_task_timeout": c.DefaultTaskTimeout,
		"result_grace": c.ResultGrace, "retry_backoff": c.RetryBackoff, "retry_backoff_max": c.RetryBackoffMax,
		"flush_interval": c.FlushInterval, "heartbeat_interval": c.HeartbeatInterval,
		"controller_stale_after": c.ControllerStaleAfter, "job_retention": c.JobRetention,
		"audit_retention": c.AuditRetention,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.DebugAddr != "" {
		if _, _, err := net.SplitHostPort(c.DebugAddr); err != nil {
			errs = append(errs, fmt.Errorf("debug_addr %q: want host:port", c.DebugAddr))
		}
	}
	if c.MemoryLimit < 0 || (c.MemoryLimit > 0 && c.MemoryLimit < minMemoryLimit) {
		errs = append(errs, fmt.Errorf("memory_limit must be 0 (none) or at least %s, got %s", ByteSize(minMemoryLimit), c.MemoryLimit))
	}
	if _, err := parseAllow(c.Allow); err != nil {
		errs = append(errs, fmt.Errorf("allow: %w", err))
	}
	for i, r := range c.DangerousRoles {
		if !r.Valid() {
			_, err := api.ParseRole(string(r))
			errs = append(errs, fmt.Errorf("dangerous_roles[%d]: %w", i, err))
		}
	}
	if err := validateRateLimits(c.RateLimits); err != nil {
		errs = append(errs, err)
	}
	for _, b := range []struct {
		name string
		v    ByteSize
	}{{"requests_max_bytes", c.RequestsMaxBytes}, {"commands_max_bytes", c.CommandsMaxBytes}, {"results_max_bytes", c.ResultsMaxBytes},
		{"dlq_max_bytes", c.DLQMaxBytes}, {"jobs_max_bytes", c.JobsMaxBytes}, {"small_buckets_max_bytes", c.SmallBucketsMaxBytes},
		{"audit_max_bytes", c.AuditMaxBytes}} {
		if b.v < minStoreBytes && (b.v != 0 || b.name != "small_buckets_max_bytes") {
			hint := ""
			if b.name == "small_buckets_max_bytes" {
				hint = " (or 0 to derive it from jobs_max_bytes)"
			}
			errs = append(errs, fmt.Errorf("%s must be at least %s, the largest message the bus carries%s, got %s", b.name, ByteSize(minStoreBytes), hint, b.v))
		}
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("max_body_bytes must be at least 1024, got %d", c.MaxBodyBytes))
	}
	return errors.Join(errs...)
}

// minStoreBytes is the least cap a stream or bucket may have: one message
// of the embedded server's max_payload.
const minStoreBytes = bus.DefaultMaxPayload

// smallBucketsMaxBytes is SmallBucketsMaxBytes with its derived default.
func (c Config) smallBucketsMaxBytes() int64 {
	if c.SmallBucketsMaxBytes > 0 {
		return int64(c.SmallBucketsMaxBytes)
	}
	return bus.SmallBucketMaxBytes(int64(c.JobsMaxBytes))
}

// limits are the caps of the streams and buckets, per-message caps bounded
// by the bus's max_payload.
func (c Config) limits(maxPayload int64) map[string]bus.Limit {
	l := bus.Limits(maxPayload, int64(c.RequestsMaxBytes), int64(c.CommandsMaxBytes), int64(c.ResultsMaxBytes),
		int64(c.DLQMaxBytes), int64(c.JobsMaxBytes), c.smallBucketsMaxBytes())
	a := l[api.StreamAudit]
	a.MaxBytes = int64(c.AuditMaxBytes)
	l[api.StreamAudit] = a
	return l
}

func (c Config) logger() *slog.Logger { return config.Logger(c.Logger) }

// controllerID returns the configured name, or one kept in the data dir so
// that a restarted controller is the same controller.
func (c Config) controllerID() (string, error) {
	if c.Name != "" {
		return c.Name, nil
	}
	path := c.DataDir + "/controller-id"
	if b, err := os.ReadFile(path); err == nil && api.ValidToken(string(b)) {
		return string(b), nil
	}
	host, _ := os.Hostname()
	id := "ctl-" + randomID(6)
	if host != "" {
		if h := sanitizeToken(host); h != "" {
			id = h + "-" + randomID(4)
		}
	}
	if err := os.MkdirAll(c.DataDir, 0o750); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(id), 0o600); err != nil {
		return "", fmt.Errorf("write controller id: %w", err)
	}
	return id, nil
}

// replicas returns the replica count for streams and buckets and whether it
// was chosen rather than configured (see Replicas).
func (c Config) replicas() (n int, chosen bool) {
	if c.Replicas > 0 {
		return c.Replicas, false
	}
	if c.ClusterName == "" || len(c.NATSURLs) > 0 {
		return 1, true
	}
	return min(3, c.clusterServers()), true
}

// clusterServers counts the servers the config names: this one and each
// distinct route that is not its own cluster address (a shared routes list
// often names every server, itself included).
func (c Config) clusterServers() int {
	own := ""
	if h, p, err := net.SplitHostPort(c.ClusterAddr); err == nil {
		own = net.JoinHostPort(h, p)
	}
	seen := map[string]bool{}
	for _, r := range c.Routes {
		hp := r
		if u, err := url.Parse(r); err == nil && u.Host != "" {
			hp = u.Host
		}
		if hp == own {
			continue
		}
		seen[hp] = true
	}
	return len(seen) + 1
}
