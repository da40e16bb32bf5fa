// Package dns is the dns backend: look up a name's records, reverse-look
// up an address, and check that a name resolves to the expected
// addresses — with Go's own resolver (no dig, no host program), through
// the node's resolver configuration or a server the params name.
//
// Go's resolver reads /etc/hosts before asking a server, as the C library
// does; a name listed there resolves to its entry.
package dns

import (
	"context"
	"errors"
	"fmt"
	stdnet "net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Patterns of the params.
const (
	NamePattern   = `^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})?)*\.?$`
	ServerPattern = `^([0-9.]+|\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+)(:[0-9]{1,5})?$`
	IPPattern     = `^([0-9.]+|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+)$`
)

// ErrMismatch is what check's error wraps when the name does not resolve
// to the expected addresses.
var ErrMismatch = errors.New("unexpected resolution")

// Backend is the dns backend.
type Backend struct{}

// New returns the dns backend.
func New() *Backend { return &Backend{} }

// Schema declares lookup, reverse and check.
func (*Backend) Schema() api.BackendSchema {
	server := api.ParamSchema{Name: "server", Type: api.TypeString, Pattern: ServerPattern, Description: "DNS server address, IP or IP:port (port 53 when omitted); default: the node's resolver configuration."}
	timeout := api.ParamSchema{Name: "timeout", Type: api.TypeDuration, Default: "5s", Description: "Time the lookup may take."}
	name := api.ParamSchema{Name: "name", Type: api.TypeString, Required: true, Pattern: NamePattern, Description: "Name to look up."}
	q := func(n, desc string, params ...api.ParamSchema) api.ActionSchema {
		return api.ActionSchema{Name: n, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
	}
	return api.BackendSchema{
		Name:        "dns",
		Description: "DNS lookups with Go's resolver: records, reverse lookups, expected addresses.",
		Actions: []api.ActionSchema{
			q("lookup", "Records of one type for a name; fails when there are none.", name,
				api.ParamSchema{Name: "type", Type: api.TypeString, Default: "A", Enum: []string{"A", "AAAA", "CNAME", "MX", "TXT", "SRV", "NS"}, Description: "Record type."},
				server, timeout),
			q("reverse", "Names of an IP address (PTR records).",
				api.ParamSchema{Name: "address", Type: api.TypeString, Required: true, Pattern: IPPattern, Description: "IPv4 or IPv6 address."},
				server, timeout),
			q("check", "Fail unless name resolves (A and AAAA) to every expected address.", name,
				api.ParamSchema{Name: "expect", Type: api.TypeList, Required: true, Pattern: IPPattern, Description: "Addresses the name must resolve to."},
				api.ParamSchema{Name: "exact", Type: api.TypeBool, Default: "false", Description: "Also fail when the name resolves to other addresses."},
				server, timeout),
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dns: %w", context.Cause(ctx))
	}
	switch req.Action {
	case "lookup", "reverse", "check":
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	p := req.Params
	r, server, err := resolver(p["server"])
	if err != nil {
		return nil, err
	}
	timeout, _ := time.ParseDuration(p["timeout"])
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	facts := map[string]any{"server": server}
	wrap := func(what string, err error) error {
		if ctx.Err() != nil {
			err = errors.Join(err, context.Cause(ctx))
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	switch req.Action {
	case "lookup":
		name, typ := p["name"], p["type"]
		facts["name"], facts["type"] = name, typ
		records, lines, err := lookup(lctx, r, name, typ)
		if err != nil {
			return &backends.Result{Facts: facts}, wrap(fmt.Sprintf("lookup %s %s", typ, name), err)
		}
		facts["records"] = records
		return &backends.Result{Output: fmt.Sprintf("%s %s: %s", name, typ, strings.Join(lines, ", ")), Facts: facts}, nil
	case "reverse":
		addr := p["address"]
		if _, err := netip.ParseAddr(addr); err != nil {
			return nil, fmt.Errorf("address %q: %w", addr, err)
		}
		facts["address"] = addr
		names, err := r.LookupAddr(lctx, addr)
		if err != nil {
			return &backends.Result{Facts: facts}, wrap("reverse lookup "+addr, err)
		}
		facts["names"] = names
		return &backends.Result{Output: fmt.Sprintf("%s: %s", addr, strings.Join(names, ", ")), Facts: facts}, nil
	}
	// check
	name := p["name"]
	var want []netip.Addr
	for _, e := range strings.Split(p["expect"], ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("expect %q: %w", e, err)
		}
		want = append(want, a.Unmap())
	}
	facts["name"] = name
	ips, err := r.LookupNetIP(lctx, "ip", name)
	if err != nil {
		return &backends.Result{Facts: facts}, wrap("resolve "+name, err)
	}
	got := make([]string, 0, len(ips))
	have := map[netip.Addr]bool{}
	for _, ip := range ips {
		have[ip.Unmap()] = true
		got = append(got, ip.Unmap().String())
	}
	sort.Strings(got)
	var missing, extra []string
	for _, w := range want {
		if !have[w] {
			missing = append(missing, w.String())
		}
		delete(have, w)
	}
	for a := range have {
		extra = append(extra, a.String())
	}
	sort.Strings(extra)
	exact := p["exact"] == "true"
	ok := len(missing) == 0 && (!exact || len(extra) == 0)
	facts["addresses"], facts["missing"], facts["unexpected"], facts["ok"] = got, orEmpty(missing), orEmpty(extra), ok
	res := &backends.Result{Output: fmt.Sprintf("%s: %s", name, strings.Join(got, ", ")), Facts: facts}
	switch {
	case len(missing) > 0:
		return res, fmt.Errorf("%s resolves to %s, missing %s: %w", name, strings.Join(got, ", "), strings.Join(missing, ", "), ErrMismatch)
	case exact && len(extra) > 0:
		return res, fmt.Errorf("%s resolves to %s, also %s: %w", name, strings.Join(got, ", "), strings.Join(extra, ", "), ErrMismatch)
	}
	return res, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// resolver is Go's resolver, sending every query to server when one is
// named (the address the configuration would have used is ignored).
func resolver(server string) (*stdnet.Resolver, string, error) {
	if server == "" {
		return &stdnet.Resolver{PreferGo: true}, "system", nil
	}
	var addr string
	if ap, err := netip.ParseAddrPort(server); err == nil && ap.Port() != 0 {
		addr = ap.String()
	} else if a, err := netip.ParseAddr(strings.Trim(server, "[]")); err == nil {
		addr = netip.AddrPortFrom(a, 53).String()
	} else {
		return nil, "", fmt.Errorf("server %q: want an IP address, with an optional port from 1 to 65535", server)
	}
	var d stdnet.Dialer
	return &stdnet.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (stdnet.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}, addr, nil
}

// lookup returns the records as facts (strings, or maps for MX and SRV)
// and as lines.
func lookup(ctx context.Context, r *stdnet.Resolver, name, typ string) ([]any, []string, error) {
	var recs []any
	var lines []string
	str := func(ss ...string) {
		for _, s := range ss {
			recs = append(recs, s)
			lines = append(lines, s)
		}
	}
	switch typ {
	case "A", "AAAA":
		network := map[string]string{"A": "ip4", "AAAA": "ip6"}[typ]
		ips, err := r.LookupNetIP(ctx, network, name)
		if err != nil {
			return nil, nil, err
		}
		ss := make([]string, len(ips))
		for i, ip := range ips {
			ss[i] = ip.Unmap().String()
		}
		slices.Sort(ss)
		str(ss...)
	case "CNAME":
		c, err := r.LookupCNAME(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		str(c)
	case "MX":
		mxs, err := r.LookupMX(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range mxs {
			recs = append(recs, map[string]any{"host": m.Host, "pref": int(m.Pref)})
			lines = append(lines, fmt.Sprintf("%d %s", m.Pref, m.Host))
		}
	case "TXT":
		txts, err := r.LookupTXT(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		str(txts...)
	case "SRV":
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range srvs {
			recs = append(recs, map[string]any{"target": s.Target, "port": int(s.Port), "priority": int(s.Priority), "weight": int(s.Weight)})
			lines = append(lines, fmt.Sprintf("%d %d %d %s", s.Priority, s.Weight, s.Port, s.Target))
		}
	case "NS":
		nss, err := r.LookupNS(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range nss {
			str(n.Host)
		}
	default:
		return nil, nil, fmt.Errorf("record type %q not supported", typ)
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("no %s records", typ)
	}
	return recs, lines, nil
}
