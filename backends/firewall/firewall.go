// Package firewall is the firewall backend: ports allowed or denied, by
// protocol and source, on nftables, in a table of GRID's own (inet grid,
// one input chain), so rules made elsewhere — by hand, by the
// distribution, by another tool — are never touched: every change names
// that table, and listing reads only it.
//
// nft is run with exec and an argv; changes go to nft on stdin as one
// transaction (nft -f -), built only from values the schema's patterns and
// a parse have checked, so a change is applied whole or not at all.
// Listing uses nft's JSON output (nft -j).
//
// Each rule carries a comment naming what it is (grid:allow:tcp:22:
// 10.0.0.0/8), which is how the backend finds it again; a rule in the
// table without one is left alone and counted as unmanaged.
//
// How nftables combines tables: every base chain on the input hook sees
// each packet, and a drop in any of them is final while an accept ends
// only that chain. So deny here drops whatever other tables say, while
// allow takes effect over the denies of this table only: allow rules go
// first in the chain (insert), deny rules after them (add), so "deny 22,
// allow 22 from 10.0.0.0/8" lets 10.0.0.0/8 in. A host whose own rules
// drop the port needs them changed where they are.
package firewall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Param patterns.
const (
	// PortPattern is a port or a range lo-hi.
	PortPattern = `^[0-9]{1,5}(-[0-9]{1,5})?$`
	// SourcePattern is an IPv4 or IPv6 address or prefix (checked again
	// by net/netip).
	SourcePattern = `^[0-9a-fA-F:.]+(/[0-9]{1,3})?$`
)

// Table and chain the backend owns.
const (
	Table = "grid"
	Chain = "input"
)

// Options configure the backend.
type Options struct {
	// NftCommand is the argv that runs nft; default ["nft"]. It may wrap
	// nft (["ip", "netns", "exec", "NS", "nft"] manages a network
	// namespace, which is how the tests run).
	NftCommand []string
	// UfwPath is ufw, which status asks whether it is active; default
	// "ufw" looked up on PATH (absent: not reported).
	UfwPath string
}

// Backend is the firewall backend.
type Backend struct {
	nft []string
	ufw string
}

// New returns the firewall backend.
func New(opts Options) *Backend {
	b := &Backend{nft: opts.NftCommand, ufw: opts.UfwPath}
	if b.ufw == "" {
		b.ufw = "ufw"
	}
	if len(b.nft) == 0 {
		b.nft = []string{"nft"}
	}
	return b
}

// Schema declares status, list, allow, deny and remove.
func (*Backend) Schema() api.BackendSchema {
	match := []api.ParamSchema{
		{Name: "port", Type: api.TypeString, Required: true, Pattern: PortPattern, Description: "Destination port (1-65535) or range (8000-8100)."},
		{Name: "proto", Type: api.TypeString, Enum: []string{"tcp", "udp"}, Default: "tcp", Description: "Protocol."},
		{Name: "source", Type: api.TypeString, Pattern: SourcePattern, Description: "Source address or CIDR prefix (IPv4 or IPv6); default: any."},
	}
	return api.BackendSchema{
		Name:        "firewall",
		Description: "Inbound port rules on nftables, in GRID's own table (inet grid); rules made elsewhere are untouched.",
		Actions: []api.ActionSchema{
			{Name: "status", Description: "Report the nft version, whether GRID's table exists and how many rules it holds, and whether ufw is active.",
				ReadOnly: true, Idempotent: true, CheckMode: true},
			{Name: "list", Description: "List the rules in GRID's table (verdict, protocol, port, source).",
				ReadOnly: true, Idempotent: true, CheckMode: true},
			{Name: "allow", Description: "Accept inbound traffic to a port (from a source), replacing a deny rule for the same match; no change when the rule exists.",
				Idempotent: true, CheckMode: true, Params: match},
			{Name: "deny", Description: "Drop inbound traffic to a port (from a source), replacing an allow rule for the same match; no change when the rule exists (dangerous: a drop on 22 locks out ssh, one on every port the agent's own link to the controller).",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: match},
			{Name: "remove", Description: "Remove the allow or deny rule for a port, protocol and source (dangerous: removing an allow can cut access where the host drops by default).",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: match},
		},
	}
}

// Rule is one managed rule.
type Rule struct {
	Verdict string `json:"verdict"` // allow or deny
	Proto   string `json:"proto"`
	Port    string `json:"port"`
	Source  string `json:"source"` // a prefix, or "any"
	Handle  int    `json:"handle"`
}

func (r Rule) comment() string {
	return strings.Join([]string{"grid", r.Verdict, r.Proto, r.Port, r.Source}, ":")
}

func (r Rule) String() string {
	s := fmt.Sprintf("%s %s/%s", r.Verdict, r.Port, r.Proto)
	if r.Source != "any" {
		s += " from " + r.Source
	}
	return s
}

// parseComment reads a rule back from its comment.
func parseComment(c string) (Rule, bool) {
	// The source may be IPv6, full of colons: split off the fixed fields.
	f := strings.SplitN(c, ":", 5)
	if len(f) != 5 || f[0] != "grid" || (f[1] != "allow" && f[1] != "deny") {
		return Rule{}, false
	}
	return Rule{Verdict: f[1], Proto: f[2], Port: f[3], Source: f[4]}, true
}

// wanted checks and normalises a request's match.
func wanted(p api.Params, verdict string) (Rule, error) {
	r := Rule{Verdict: verdict, Proto: p["proto"], Port: p["port"], Source: "any"}
	if r.Proto == "" {
		r.Proto = "tcp"
	}
	lo, hi, isRange := strings.Cut(p["port"], "-")
	l, err := strconv.Atoi(lo)
	if err != nil || l < 1 || l > 65535 {
		return r, fmt.Errorf("port %q: want 1-65535", p["port"])
	}
	r.Port = strconv.Itoa(l)
	if isRange {
		h, err := strconv.Atoi(hi)
		if err != nil || h < 1 || h > 65535 || h <= l {
			return r, fmt.Errorf("port range %q: want lo-hi with 1 <= lo < hi <= 65535", p["port"])
		}
		r.Port += "-" + strconv.Itoa(h)
	}
	if s := p["source"]; s != "" {
		var pfx netip.Prefix
		if strings.Contains(s, "/") {
			pfx, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return r, fmt.Errorf("source %q is not an IP address or prefix: %w", s, err)
		}
		if pfx.Addr().Is4In6() {
			return r, fmt.Errorf("source %q: write an IPv4-mapped address as plain IPv4", s)
		}
		r.Source = pfx.Masked().String()
	}
	return r, nil
}

// nftRule is the rule's text in nft's language; every part is a value
// wanted produced.
func (r Rule) nftRule() string {
	var b strings.Builder
	if r.Source != "any" {
		fam := "ip"
		if strings.Contains(r.Source, ":") {
			fam = "ip6"
		}
		fmt.Fprintf(&b, "%s saddr %s ", fam, r.Source)
	}
	verdict := "accept"
	if r.Verdict == "deny" {
		verdict = "drop"
	}
	fmt.Fprintf(&b, "%s dport %s %s comment %q", r.Proto, r.Port, verdict, r.comment())
	return b.String()
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "status":
		return b.status(ctx)
	case "list":
		rules, unmanaged, exists, err := b.list(ctx)
		if err != nil {
			return nil, err
		}
		var lines []string
		for _, r := range rules {
			lines = append(lines, r.String())
		}
		if rules == nil {
			rules = []Rule{}
		}
		out := strings.Join(lines, "\n")
		if len(lines) == 0 {
			out = "no rules in table inet " + Table
		}
		return &backends.Result{Output: out, Facts: map[string]any{"table": exists, "rules": rules, "unmanaged": unmanaged}}, nil
	case "allow", "deny":
		return b.ensure(ctx, req)
	case "remove":
		return b.remove(ctx, req)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// run runs nft with args, feeding stdin when given.
func (b *Backend) run(ctx context.Context, stdin string, args ...string) (string, error) {
	argv := append(slices.Clone(b.nft[1:]), args...)
	cmd := exec.CommandContext(ctx, b.nft[0], argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("nft: %w", context.Cause(ctx))
	}
	if err != nil {
		return "", &nftError{args: strings.Join(args, " "), err: err, stderr: strings.TrimSpace(errb.String())}
	}
	return out.String(), nil
}

type nftError struct {
	args, stderr string
	err          error
}

func (e *nftError) Error() string { return fmt.Sprintf("nft %s: %v: %s", e.args, e.err, e.stderr) }
func (e *nftError) Unwrap() error { return e.err }

// list returns the managed rules of GRID's chain in order, the number of
// rules without a GRID comment, and whether the table exists.
func (b *Backend) list(ctx context.Context) (rules []Rule, unmanaged int, exists bool, err error) {
	out, err := b.run(ctx, "", "-j", "list", "chain", "inet", Table, Chain)
	var ne *nftError
	if errors.As(err, &ne) && strings.Contains(ne.stderr, "No such file or directory") {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Handle  int    `json:"handle"`
				Comment string `json:"comment"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, 0, false, fmt.Errorf("nft -j list: %w", err)
	}
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		r, ok := parseComment(o.Rule.Comment)
		if !ok {
			unmanaged++
			continue
		}
		r.Handle = o.Rule.Handle
		rules = append(rules, r)
	}
	return rules, unmanaged, true, nil
}

func (b *Backend) status(ctx context.Context) (*backends.Result, error) {
	ver, err := b.run(ctx, "", "--version")
	if errors.Is(err, exec.ErrNotFound) {
		return nil, fmt.Errorf("nft is not installed on this host (Debian, Ubuntu: apt-get install nftables): %w", err)
	}
	if err != nil {
		return nil, err
	}
	rules, unmanaged, exists, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	facts := map[string]any{"manager": "nftables", "nft_version": strings.TrimSpace(ver), "table": exists, "rules": len(rules), "unmanaged": unmanaged}
	out := fmt.Sprintf("%s; table inet %s: ", strings.TrimSpace(ver), Table)
	if exists {
		out += fmt.Sprintf("%d rules", len(rules))
	} else {
		out += "not created yet"
	}
	// ufw is not driven, but an active ufw drops what it does not allow
	// whatever GRID's table says, which an operator must know.
	if ufw := b.ufwStatus(ctx); ufw != "" {
		facts["ufw"] = ufw
		if ufw == "active" {
			out += "; ufw is active on this host: its own rules still drop what it does not allow"
		}
	}
	return &backends.Result{Output: out, Facts: facts}, nil
}

// setup creates GRID's table and chain if missing (add is a no-op for
// ones that exist). The chain's policy is accept: it only ever adds
// decisions about the ports it is told of.
const setup = "add table inet " + Table + "\n" +
	"add chain inet " + Table + " " + Chain + " { type filter hook input priority filter ; policy accept ; }\n"

func (b *Backend) ensure(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	want, err := wanted(req.Params, req.Action)
	if err != nil {
		return nil, err
	}
	rules, _, _, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	var script strings.Builder
	script.WriteString(setup)
	var replaced []string
	for _, r := range rules {
		if r.Proto == want.Proto && r.Port == want.Port && r.Source == want.Source {
			if r.Verdict == want.Verdict {
				return &backends.Result{Output: want.String() + ": rule exists", Facts: map[string]any{"rule": want.comment()}}, nil
			}
			fmt.Fprintf(&script, "delete rule inet %s %s handle %d\n", Table, Chain, r.Handle)
			replaced = append(replaced, r.String())
		}
	}
	verb := "add"
	if want.Verdict == "allow" {
		verb = "insert"
	}
	fmt.Fprintf(&script, "%s rule inet %s %s %s\n", verb, Table, Chain, want.nftRule())
	facts := map[string]any{"rule": want.comment(), "replaced": replaced}
	msg := want.String()
	if len(replaced) > 0 {
		msg += " (replacing " + strings.Join(replaced, ", ") + ")"
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would add " + msg + "\n" + script.String(), Changed: true, Facts: facts}, nil
	}
	if _, err := b.run(ctx, script.String(), "-f", "-"); err != nil {
		return nil, err
	}
	return &backends.Result{Output: "added " + msg, Changed: true, Facts: facts}, nil
}

func (b *Backend) remove(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	want, err := wanted(req.Params, "allow")
	if err != nil {
		return nil, err
	}
	rules, _, _, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	var script strings.Builder
	var removed []string
	for _, r := range rules {
		if r.Proto == want.Proto && r.Port == want.Port && r.Source == want.Source {
			fmt.Fprintf(&script, "delete rule inet %s %s handle %d\n", Table, Chain, r.Handle)
			removed = append(removed, r.String())
		}
	}
	if len(removed) == 0 {
		return &backends.Result{Output: "no rule for " + strings.TrimPrefix(want.String(), "allow "), Facts: map[string]any{"removed": []string{}}}, nil
	}
	facts := map[string]any{"removed": removed}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would remove " + strings.Join(removed, ", "), Changed: true, Facts: facts}, nil
	}
	if _, err := b.run(ctx, script.String(), "-f", "-"); err != nil {
		return nil, err
	}
	return &backends.Result{Output: "removed " + strings.Join(removed, ", "), Changed: true, Facts: facts}, nil
}

// ufwStatus is "active" or "inactive" when ufw is installed, else "".
func (b *Backend) ufwStatus(ctx context.Context) string {
	path, err := exec.LookPath(b.ufw)
	if err != nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, path, "status").Output()
	if err != nil {
		return ""
	}
	if strings.Contains(string(out), "Status: active") {
		return "active"
	}
	return "inactive"
}
