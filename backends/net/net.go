// Package net is the net backend: ping a host with ICMP sockets of the
// agent's own (no ping program), and read or set the DNS resolver
// configuration in a resolv.conf file, written atomically.
package net

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	stdnet "net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/atomicfile"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/procfs"
)

// Patterns. A host is a DNS name (labels of letters, digits and inner
// dashes) or an IP address; neither can start with a dash.
const (
	HostPattern   = `^(([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+)$`
	IPPattern     = `^([0-9.]+|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+)$`
	DomainPattern = `^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`
)

// MaxNameservers is how many nameserver lines the resolver reads (MAXNS).
const MaxNameservers = 3

// DefaultResolvConf is the resolver configuration file.
const DefaultResolvConf = "/etc/resolv.conf"

// Options configure the backend.
type Options struct {
	// PingPath, when set, is a ping binary that ping runs (argv, never a
	// shell) instead of sending ICMP echo requests itself.
	PingPath string
	// ResolvConfPath is the file dns_get reads and dns_set writes.
	ResolvConfPath string
	// ProcRoot is where procfs is mounted; default /proc.
	ProcRoot string
}

// Backend is the net backend.
type Backend struct {
	ping, resolvConf, procRoot string
}

// New returns the net backend.
func New(opts Options) *Backend {
	b := &Backend{ping: opts.PingPath, resolvConf: opts.ResolvConfPath, procRoot: opts.ProcRoot}
	if b.resolvConf == "" {
		b.resolvConf = DefaultResolvConf
	}
	if b.procRoot == "" {
		b.procRoot = procfs.Root
	}
	return b
}

// Schema declares ping, port, interfaces, dns_get and dns_set.
func (*Backend) Schema() api.BackendSchema {
	return api.BackendSchema{
		Name:        "net",
		Description: "Network checks and resolver configuration.",
		Actions: []api.ActionSchema{
			{Name: "ping", Description: "Send ICMP echo requests from the agent (an unprivileged ICMP socket, else a raw one); fails when no reply comes back.",
				ReadOnly: true, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{
					{Name: "host", Type: api.TypeString, Required: true, Pattern: HostPattern, Description: "Host name or IP address."},
					{Name: "count", Type: api.TypeInt, Default: "3", Pattern: `^([1-9]|10)$`, Description: "Echo requests to send (1-10)."},
				}},
			{Name: "port", Description: "Sockets listening (TCP) or bound (UDP) on the node, with their process, from /proc/net; with port, fails when nothing listens on it.",
				ReadOnly: true, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{
					{Name: "port", Type: api.TypeInt, Pattern: `^([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$`, Description: "Port (1-65535); every listener when omitted."},
					{Name: "protocol", Type: api.TypeString, Default: "tcp", Enum: []string{"tcp", "udp"}, Description: "tcp or udp."},
				}},
			{Name: "interfaces", Description: "Network interfaces: addresses, MTU, MAC, flags and operational state.",
				ReadOnly: true, Idempotent: true, CheckMode: true},
			{Name: "dns_get", Description: "Read the resolver configuration: nameservers, search domains, options.",
				ReadOnly: true, Idempotent: true, CheckMode: true},
			{Name: "dns_set", Description: "Set nameservers and search domains (the file then holds exactly these; options lines are kept). No change when they already match.",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{
					{Name: "servers", Type: api.TypeList, Required: true, Pattern: IPPattern, Description: "Nameserver IP addresses, in order (at most 3)."},
					{Name: "search", Type: api.TypeList, Pattern: DomainPattern, Description: "Search domains, in order; none when omitted."},
				}},
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "ping":
		return b.pingHost(ctx, req.Params["host"], req.Params["count"])
	case "port":
		return b.ports(req.Params["protocol"], req.Params["port"])
	case "interfaces":
		return interfaces()
	case "dns_get":
		conf, err := ReadResolvConf(b.resolvConf)
		if err != nil {
			return nil, err
		}
		return &backends.Result{Output: conf.summary(), Facts: conf.facts(b.resolvConf)}, nil
	case "dns_set":
		return b.dnsSet(req)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

var (
	pingSummaryRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTTRE     = regexp.MustCompile(`= ([\d.]+)/([\d.]+)/([\d.]+)`)
)

func (b *Backend) pingHost(ctx context.Context, host, count string) (*backends.Result, error) {
	if strings.Contains(host, ":") && stdnet.ParseIP(host) == nil {
		return nil, fmt.Errorf("ping: %q is not an IP address", host)
	}
	if n, err := strconv.Atoi(count); err != nil || n < 1 || n > 10 {
		return nil, fmt.Errorf("ping: count %q is not between 1 and 10", count)
	}
	n, _ := strconv.Atoi(count)
	if b.ping == "" {
		return icmpPing(ctx, host, n)
	}
	bin := b.ping
	// -n: no reverse lookups, which can take longer than the pings.
	// -W 2: wait at most two seconds for each reply.
	out, err := proc.Run(ctx, proc.Cmd{Path: bin, Args: []string{"-n", "-c", count, "-W", "2", "--", host}})
	facts := map[string]any{"host": host}
	if m := pingSummaryRE.FindStringSubmatch(out.Stdout); m != nil {
		tx, _ := strconv.Atoi(m[1])
		rx, _ := strconv.Atoi(m[2])
		facts["transmitted"], facts["received"] = tx, rx
		if tx > 0 {
			facts["loss_pct"] = float64(tx-rx) * 100 / float64(tx)
		}
	}
	if m := pingRTTRE.FindStringSubmatch(out.Stdout); m != nil {
		for i, k := range []string{"rtt_min_ms", "rtt_avg_ms", "rtt_max_ms"} {
			facts[k], _ = strconv.ParseFloat(m[i+1], 64)
		}
	}
	res := &backends.Result{Output: lastLines(out.Stdout, 2), Facts: facts}
	if err != nil {
		var ee *proc.ExitError
		if errors.As(err, &ee) && ee.ExitCode == 1 {
			return res, fmt.Errorf("ping %s: no reply", host)
		}
		return res, fmt.Errorf("ping %s: %w", host, err)
	}
	return res, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ResolvConf is the part of resolv.conf(5) the backend manages.
type ResolvConf struct {
	Servers, Search, Options []string
}

// ReadResolvConf parses path; a missing file is an empty configuration.
func ReadResolvConf(path string) (ResolvConf, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ResolvConf{Servers: []string{}, Search: []string{}, Options: []string{}}, nil
	}
	if err != nil {
		return ResolvConf{}, fmt.Errorf("read %s: %w", path, err)
	}
	return ParseResolvConf(b), nil
}

// ParseResolvConf reads nameserver, search, domain and options lines. As
// in the resolver, the last search or domain line wins.
func ParseResolvConf(b []byte) ResolvConf {
	c := ResolvConf{Servers: []string{}, Search: []string{}, Options: []string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				c.Servers = append(c.Servers, f[1])
			}
		case "search", "domain":
			c.Search = append([]string{}, f[1:]...)
		case "options":
			c.Options = append(c.Options, f[1:]...)
		}
	}
	return c
}

// Render writes the configuration as resolv.conf text.
func (c ResolvConf) Render() []byte {
	var b bytes.Buffer
	b.WriteString("# Managed by grid (net.dns_set); local changes are overwritten.\n")
	for _, s := range c.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(c.Search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(c.Search, " "))
	}
	if len(c.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(c.Options, " "))
	}
	return b.Bytes()
}

func (c ResolvConf) facts(path string) map[string]any {
	return map[string]any{"path": path, "servers": c.Servers, "search": c.Search, "options": c.Options}
}

func (c ResolvConf) summary() string {
	s := "nameservers " + orNone(c.Servers)
	return s + "; search " + orNone(c.Search)
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, " ")
}

func (b *Backend) dnsSet(req *backends.Request) (*backends.Result, error) {
	servers := api.SplitList(req.Params["servers"])
	search := api.SplitList(req.Params["search"])
	if search == nil {
		search = []string{}
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("dns_set: servers is empty")
	}
	if len(servers) > MaxNameservers {
		return nil, fmt.Errorf("dns_set: %d servers given, the resolver reads only the first %d", len(servers), MaxNameservers)
	}
	for _, s := range servers {
		if stdnet.ParseIP(s) == nil {
			return nil, fmt.Errorf("dns_set: server %q is not an IP address", s)
		}
	}
	// Write through a symlink to its target rather than replacing the
	// link (resolv.conf is often one).
	path := b.resolvConf
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	cur, err := ReadResolvConf(path)
	if err != nil {
		return nil, err
	}
	want := ResolvConf{Servers: servers, Search: search, Options: cur.Options}
	_, statErr := os.Stat(path)
	if statErr == nil && slices.Equal(cur.Servers, want.Servers) && slices.Equal(cur.Search, want.Search) {
		return &backends.Result{Output: "resolver already set: " + cur.summary(), Facts: cur.facts(b.resolvConf)}, nil
	}
	if req.CheckMode {
		return &backends.Result{Output: fmt.Sprintf("check mode: would change %s to %s (now %s)", b.resolvConf, want.summary(), cur.summary()),
			Changed: true, Facts: want.facts(b.resolvConf)}, nil
	}
	if err := atomicfile.Write(path, want.Render(), 0o644, -1, -1); err != nil {
		return nil, fmt.Errorf("write %s: %w", b.resolvConf, err)
	}
	return &backends.Result{Output: "resolver set: " + want.summary(), Changed: true, Facts: want.facts(b.resolvConf)}, nil
}
