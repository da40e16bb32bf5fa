// Package health is the health backend: checks that fail when what they
// look at is unhealthy, so that a rollout step can gate the next one — an
// HTTP endpoint answers as expected, a TCP port accepts, a process runs,
// disk, memory and load stay under a threshold, a systemd unit is active.
// Every check is read-only; its facts carry what was measured, also when
// it fails.
//
// The http and tcp checks reach only the address the params name: no
// proxy from the environment, no redirects followed (a 3xx is the status
// checked), http and https URLs only.
package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/procfs"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/regularfile"
	"github.com/gridfleet/terraform-provider-grid/backends/sysinfo"
	"github.com/gridfleet/terraform-provider-grid/backends/systemd"
)

// Patterns of the params.
const (
	URLPattern     = `^https?://[^\s]+$`
	AddressPattern = `^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`
	// NamePattern is a process name: no path, no spaces, no leading dash
	// is needed since it is never an argument to anything.
	NamePattern    = `^[A-Za-z0-9._:@+-]{1,64}$`
	DecimalPattern = `^[0-9]{1,6}(\.[0-9]{1,3})?$`
	PctPattern     = `^([0-9]|[1-9][0-9]|100)$`
)

// ErrLinkLocal is an http check aimed at a link-local address or the
// cloud's instance metadata service.
var ErrLinkLocal = errors.New("link-local and instance metadata addresses are not checked")

// awsMetadataV6 is the instance metadata service's IPv6 address on AWS,
// which is not link-local.
var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

// refuseLinkLocal is the http check's dial Control: it sees the address
// actually dialled, after name resolution, so neither a literal nor a
// name (or a DNS answer) leading to the metadata service gets through.
// body_pattern is an oracle on the body, and the metadata service's body
// holds the node's cloud credentials.
func refuseLinkLocal(_, address string, _ syscall.RawConn) error {
	host, _, err := stdnet.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if ip.IsLinkLocalUnicast() || ip.WithZone("") == awsMetadataV6 {
		return fmt.Errorf("%s: %w", ip, ErrLinkLocal)
	}
	return nil
}

// MaxBody is how much of a response body the http check reads and matches.
const MaxBody = 1 << 20

// MaxCAFile is the largest ca_file the http check reads (a system's whole
// CA bundle is a few hundred KiB).
const MaxCAFile = 4 << 20

// ErrUnhealthy is what a failed check's error wraps.
var ErrUnhealthy = errors.New("unhealthy")

// Options configure the backend.
type Options struct {
	// SystemctlPath is the systemctl binary of the unit check; default
	// "systemctl" from PATH.
	SystemctlPath string
	// ProcRoot is where procfs is mounted; default /proc (tests).
	ProcRoot string
}

// Backend is the health backend.
type Backend struct {
	units    *systemd.Backend
	procRoot string
}

// New returns the health backend.
func New(opts Options) *Backend {
	b := &Backend{units: systemd.New(systemd.Options{SystemctlPath: opts.SystemctlPath}), procRoot: opts.ProcRoot}
	if b.procRoot == "" {
		b.procRoot = procfs.Root
	}
	return b
}

func check(name, desc string, params ...api.ParamSchema) api.ActionSchema {
	return api.ActionSchema{Name: name, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
}

// Schema declares the checks.
func (*Backend) Schema() api.BackendSchema {
	timeout := api.ParamSchema{Name: "timeout", Type: api.TypeDuration, Default: "5s", Description: "Time one attempt may take."}
	retries := api.ParamSchema{Name: "retries", Type: api.TypeInt, Default: "0", Pattern: `^([0-9]|[1-9][0-9])$`, Description: "Attempts after a failed one (0-99) before the check fails."}
	delay := api.ParamSchema{Name: "retry_delay", Type: api.TypeDuration, Default: "1s", Description: "Wait between attempts."}
	return api.BackendSchema{
		Name:        "health",
		Description: "Health checks that fail when unhealthy: HTTP, TCP, process, disk, memory, load, systemd unit.",
		Actions: []api.ActionSchema{
			check("http", "GET a URL; healthy when the status (and body pattern, if given) match. Redirects are not followed.",
				api.ParamSchema{Name: "url", Type: api.TypeString, Required: true, Pattern: URLPattern, Description: "http:// or https:// URL."},
				api.ParamSchema{Name: "status", Type: api.TypeInt, Default: "200", Pattern: `^[1-5][0-9][0-9]$`, Description: "Expected HTTP status."},
				api.ParamSchema{Name: "body_pattern", Type: api.TypeString, Description: "Regular expression (RE2) the first MiB of the body must match."},
				api.ParamSchema{Name: "ca_file", Type: api.TypeString, Pattern: `^/[^\x00]*$`, Description: "PEM file of CA certificates to verify https against, instead of the system's."},
				api.ParamSchema{Name: "insecure", Type: api.TypeBool, Default: "false", Description: "Skip TLS certificate verification."},
				timeout, retries, delay),
			check("tcp", "Connect to host:port; healthy when the connection is accepted.",
				api.ParamSchema{Name: "address", Type: api.TypeString, Required: true, Pattern: AddressPattern, Description: "host:port, [ipv6]:port."},
				timeout, retries, delay),
			check("process", "Healthy when at least min processes of this name run (short name or program base name).",
				api.ParamSchema{Name: "name", Type: api.TypeString, Required: true, Pattern: NamePattern, Description: "Process name, e.g. nginx."},
				api.ParamSchema{Name: "min", Type: api.TypeInt, Default: "1", Pattern: `^[0-9]{1,5}$`, Description: "Fewest processes for healthy."}),
			check("disk", "Healthy when the filesystem holding path is at most max_used_pct full.",
				api.ParamSchema{Name: "path", Type: api.TypeString, Default: "/", Pattern: `^/[^\x00]*$`, Description: "A path on the filesystem."},
				api.ParamSchema{Name: "max_used_pct", Type: api.TypeInt, Default: "90", Pattern: PctPattern, Description: "Highest used percentage for healthy (df's Use%)."}),
			check("memory", "Healthy when at most max_used_pct of memory is in use (not available).",
				api.ParamSchema{Name: "max_used_pct", Type: api.TypeInt, Default: "90", Pattern: PctPattern, Description: "Highest used percentage for healthy."}),
			check("load", "Healthy when the load average per CPU is at most max_per_cpu.",
				api.ParamSchema{Name: "max_per_cpu", Type: api.TypeString, Default: "2", Pattern: DecimalPattern, Description: "Highest load per CPU for healthy, e.g. 1.5."},
				api.ParamSchema{Name: "window", Type: api.TypeString, Default: "5", Enum: []string{"1", "5", "15"}, Description: "Load average over 1, 5 or 15 minutes."}),
			check("unit", "Healthy when the systemd unit is active (systemctl show).",
				api.ParamSchema{Name: "unit", Type: api.TypeString, Required: true, Pattern: systemd.UnitPattern, Description: "Unit name, e.g. nginx.service."}),
		},
	}
}

// Run runs one check.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("health: %w", context.Cause(ctx))
	}
	p := req.Params
	switch req.Action {
	case "http":
		// A bad pattern is the caller's error, not a failed attempt to
		// retry.
		var re *regexp.Regexp
		if pat := p["body_pattern"]; pat != "" {
			var err error
			if re, err = regexp.Compile(pat); err != nil {
				return nil, fmt.Errorf("body_pattern: %w", err)
			}
		}
		return retry(ctx, p, func(ctx context.Context) (map[string]any, string, error) { return httpCheck(ctx, p, re) })
	case "tcp":
		return retry(ctx, p, func(ctx context.Context) (map[string]any, string, error) { return tcpCheck(ctx, p["address"]) })
	case "process":
		return b.process(p)
	case "disk":
		return threshold(sysinfo.Disk(p["path"]))(p)
	case "memory":
		return threshold(sysinfo.Memory())(p)
	case "load":
		return load(p)
	case "unit":
		return b.unit(ctx, p["unit"])
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// retry runs one attempt, then as many more as retries allows while the
// check fails, retry_delay apart. The facts are the last attempt's.
func retry(ctx context.Context, p api.Params, attempt func(context.Context) (map[string]any, string, error)) (*backends.Result, error) {
	timeout, _ := time.ParseDuration(p["timeout"])
	delay, _ := time.ParseDuration(p["retry_delay"])
	retries, _ := strconv.Atoi(p["retries"])
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		facts, line, err := attempt(actx)
		cancel()
		facts["attempts"] = n
		facts["latency_ms"] = time.Since(start).Milliseconds()
		facts["healthy"] = err == nil
		res := &backends.Result{Output: line, Facts: facts}
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w (after %d attempts)", errors.Join(err, context.Cause(ctx)), n)
		}
		if n > retries {
			return res, fmt.Errorf("%w (after %d attempts)", err, n)
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%w (after %d attempts)", errors.Join(err, context.Cause(ctx)), n)
		case <-time.After(delay):
		}
	}
}

func httpCheck(ctx context.Context, p api.Params, re *regexp.Regexp) (map[string]any, string, error) {
	raw := p["url"]
	facts := map[string]any{"url": raw}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return facts, "", fmt.Errorf("url %q: want an http:// or https:// URL with a host", raw)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if p["insecure"] == "true" {
		tlsConf.InsecureSkipVerify = true
	} else if p["ca_file"] != "" {
		// Only a regular file, and only so much of it: /dev/zero read
		// whole would exhaust the agent's memory.
		pem, err := regularfile.Read(p["ca_file"], MaxCAFile)
		if err != nil {
			return facts, "", fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return facts, "", fmt.Errorf("ca_file %s holds no PEM certificate", p["ca_file"])
		}
		tlsConf.RootCAs = pool
	}
	client := &http.Client{
		// No Proxy: the check reaches the URL itself, not whatever the
		// agent's environment points at.
		Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true,
			DialContext: (&stdnet.Dialer{Control: refuseLinkLocal}).DialContext},
		// A redirect is the answer checked, not a hop to another address.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return facts, "", fmt.Errorf("url %q: %w", raw, err)
	}
	req.Header.Set("User-Agent", "grid-health")
	resp, err := client.Do(req)
	if err != nil {
		return facts, "", fmt.Errorf("GET %s: %w: %w", raw, ErrUnhealthy, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return facts, "", fmt.Errorf("GET %s: reading the body: %w: %w", raw, ErrUnhealthy, err)
	}
	want, _ := strconv.Atoi(p["status"])
	facts["status"] = resp.StatusCode
	facts["body_bytes"] = len(body)
	line := fmt.Sprintf("GET %s: %d", raw, resp.StatusCode)
	if resp.StatusCode != want {
		return facts, line, fmt.Errorf("GET %s: status %d, want %d: %w", raw, resp.StatusCode, want, ErrUnhealthy)
	}
	if re != nil {
		match := re.Match(body)
		facts["body_match"] = match
		if !match {
			return facts, line, fmt.Errorf("GET %s: body does not match %q: %w", raw, re, ErrUnhealthy)
		}
		line += ", body matches"
	}
	return facts, line, nil
}

func tcpCheck(ctx context.Context, address string) (map[string]any, string, error) {
	facts := map[string]any{"address": address}
	if _, port, err := stdnet.SplitHostPort(address); err != nil {
		return facts, "", fmt.Errorf("address %q: %w", address, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return facts, "", fmt.Errorf("address %q: port out of range", address)
	}
	var d stdnet.Dialer
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return facts, "", fmt.Errorf("connect %s: %w: %w", address, ErrUnhealthy, err)
	}
	facts["remote"] = conn.RemoteAddr().String()
	conn.Close()
	return facts, "connected to " + address, nil
}

func (b *Backend) process(p api.Params) (*backends.Result, error) {
	name := p["name"]
	min, _ := strconv.Atoi(p["min"])
	procs, err := procfs.List(b.procRoot)
	if err != nil {
		return nil, err
	}
	pids := []int{}
	for _, pr := range procs {
		if pr.Matches(name) {
			pids = append(pids, pr.PID)
		}
	}
	res := &backends.Result{
		Output: fmt.Sprintf("%d processes named %s", len(pids), name),
		Facts:  map[string]any{"name": name, "count": len(pids), "pids": pids, "min": min, "healthy": len(pids) >= min},
	}
	if len(pids) < min {
		return res, fmt.Errorf("%d processes named %s, want at least %d: %w", len(pids), name, min, ErrUnhealthy)
	}
	return res, nil
}

// threshold judges sysinfo's used_pct against max_used_pct.
func threshold(facts map[string]any, line string, err error) func(api.Params) (*backends.Result, error) {
	return func(p api.Params) (*backends.Result, error) {
		if err != nil {
			return nil, err
		}
		max, _ := strconv.Atoi(p["max_used_pct"])
		used, _ := facts["used_pct"].(float64)
		ok := used <= float64(max)
		facts["max_used_pct"] = max
		facts["healthy"] = ok
		res := &backends.Result{Output: line, Facts: facts}
		if !ok {
			return res, fmt.Errorf("%s: %.1f%% used, over %d%%: %w", line, used, max, ErrUnhealthy)
		}
		return res, nil
	}
}

func load(p api.Params) (*backends.Result, error) {
	facts, line, err := sysinfo.Load()
	if err != nil {
		return nil, err
	}
	max, err := strconv.ParseFloat(p["max_per_cpu"], 64)
	if err != nil {
		return nil, fmt.Errorf("max_per_cpu: %w", err)
	}
	cpus := runtime.NumCPU()
	avg, _ := facts["load"+p["window"]].(float64)
	perCPU := avg / float64(cpus)
	ok := perCPU <= max
	facts["cpus"], facts["per_cpu"], facts["max_per_cpu"], facts["healthy"] = cpus, perCPU, max, ok
	res := &backends.Result{Output: fmt.Sprintf("%s on %d CPUs", line, cpus), Facts: facts}
	if !ok {
		return res, fmt.Errorf("%s-minute load %.2f is %.2f per CPU, over %s: %w", p["window"], avg, perCPU, p["max_per_cpu"], ErrUnhealthy)
	}
	return res, nil
}

func (b *Backend) unit(ctx context.Context, unit string) (*backends.Result, error) {
	st, err := b.units.State(ctx, unit)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	ok := st.Active == "active"
	res := &backends.Result{
		Output: fmt.Sprintf("%s: %s (%s)", unit, st.Active, st.Sub),
		Facts: map[string]any{"unit": unit, "active_state": st.Active, "sub_state": st.Sub,
			"load_state": st.Load, "enabled": st.UnitFile, "healthy": ok},
	}
	if !ok {
		return res, fmt.Errorf("unit %s is %s (%s), not active: %w", unit, st.Active, st.Sub, ErrUnhealthy)
	}
	return res, nil
}
