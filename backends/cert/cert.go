// Package cert is the cert backend: read the X.509 certificates of a PEM
// file or of a TLS endpoint, report their subject, names, issuer and
// validity, fail when one expires too soon, and verify a chain against a
// CA file. Everything is read-only; private keys in a PEM file are skipped
// unread.
//
// An endpoint is reached at the host:port the params name, and nowhere
// else; its certificates are read during the handshake without trusting
// them (inspect, expiry) or verified (verify).
package cert

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	stdnet "net"
	"strconv"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/regularfile"
)

// Patterns of the params.
const (
	PathPattern       = `^/[^\x00]*$`
	AddressPattern    = `^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`
	ServerNamePattern = `^[A-Za-z0-9*]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`
)

// MaxPEM is the largest PEM file read.
const MaxPEM = 1 << 20

// ErrExpiring is what expiry's error wraps when a certificate expires
// within the threshold (or has expired); ErrUntrusted is verify's.
var (
	ErrExpiring  = errors.New("certificate expiring")
	ErrUntrusted = errors.New("certificate not trusted")
)

// Backend is the cert backend.
type Backend struct {
	// now is the clock (tests).
	now func() time.Time
}

// New returns the cert backend.
func New() *Backend { return &Backend{now: time.Now} }

// Schema declares inspect, expiry and verify.
func (*Backend) Schema() api.BackendSchema {
	source := []api.ParamSchema{
		{Name: "path", Type: api.TypeString, Pattern: PathPattern, Description: "PEM file of one or more certificates (the first is the leaf). Give path or address."},
		{Name: "address", Type: api.TypeString, Pattern: AddressPattern, Description: "TLS endpoint, host:port. Give path or address."},
		{Name: "server_name", Type: api.TypeString, Pattern: ServerNamePattern, Description: "Name sent in SNI and verified against; default: address's host."},
		{Name: "timeout", Type: api.TypeDuration, Default: "10s", Description: "Time the connection and handshake may take."},
	}
	with := func(extra ...api.ParamSchema) []api.ParamSchema {
		return append(append([]api.ParamSchema{}, source...), extra...)
	}
	q := func(name, desc string, params []api.ParamSchema) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
	}
	return api.BackendSchema{
		Name:        "cert",
		Description: "Inspect X.509 certificates of PEM files and TLS endpoints: names, issuer, expiry, trust.",
		Actions: []api.ActionSchema{
			q("inspect", "Subject, SANs, issuer, validity and fingerprint of every certificate.", with()),
			q("expiry", "Fail when a certificate of the chain expires in fewer than min_days days.", with(
				api.ParamSchema{Name: "min_days", Type: api.TypeInt, Default: "30", Pattern: `^[0-9]{1,5}$`, Description: "Fewest days left for a pass."})),
			q("verify", "Verify the chain (and, for an endpoint or with server_name, the name) against ca_file or the system's roots.", with(
				api.ParamSchema{Name: "ca_file", Type: api.TypeString, Pattern: PathPattern, Description: "PEM file of trusted CA certificates; default: the system's roots."})),
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cert: %w", context.Cause(ctx))
	}
	switch req.Action {
	case "inspect", "expiry", "verify":
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	p := req.Params
	chain, source, host, err := load(ctx, p)
	if err != nil {
		return nil, err
	}
	now := b.now()
	facts := map[string]any{"source": source}
	certs := make([]any, len(chain))
	for i, c := range chain {
		certs[i] = certFacts(c, now)
	}
	facts["chain"] = certs
	for k, v := range certFacts(chain[0], now) {
		facts[k] = v
	}
	leaf := chain[0]
	line := fmt.Sprintf("%s: %s, issued by %s, expires %s (%d days)", source, leaf.Subject, leaf.Issuer,
		leaf.NotAfter.UTC().Format(time.DateOnly), daysLeft(leaf, now))
	res := &backends.Result{Output: line, Facts: facts}
	switch req.Action {
	case "expiry":
		min, _ := strconv.Atoi(p["min_days"])
		first := chain[0]
		for _, c := range chain[1:] {
			if c.NotAfter.Before(first.NotAfter) {
				first = c
			}
		}
		left := daysLeft(first, now)
		facts["min_days"], facts["min_days_left"], facts["expires_first"] = min, left, first.Subject.String()
		facts["ok"] = left >= min
		if left < min {
			return res, fmt.Errorf("%s: %s expires %s, in %d days (fewer than %d): %w", source, first.Subject,
				first.NotAfter.UTC().Format(time.RFC3339), left, min, ErrExpiring)
		}
	case "verify":
		opts := x509.VerifyOptions{CurrentTime: now, Intermediates: x509.NewCertPool(), DNSName: p["server_name"]}
		if opts.DNSName == "" {
			opts.DNSName = host
		}
		for _, c := range chain[1:] {
			opts.Intermediates.AddCert(c)
		}
		if ca := p["ca_file"]; ca != "" {
			roots, err := readPEM(ca)
			if err != nil {
				return nil, fmt.Errorf("ca_file: %w", err)
			}
			opts.Roots = x509.NewCertPool()
			for _, r := range roots {
				opts.Roots.AddCert(r)
			}
		}
		_, err := leaf.Verify(opts)
		facts["verified"] = err == nil
		facts["verified_name"] = opts.DNSName
		if err != nil {
			facts["verify_error"] = err.Error()
			return res, fmt.Errorf("%s: %w: %w", source, ErrUntrusted, err)
		}
		res.Output += ", verified"
	}
	return res, nil
}

// load reads the chain from path or address; host is address's host.
func load(ctx context.Context, p api.Params) (chain []*x509.Certificate, source, host string, err error) {
	path, addr := p["path"], p["address"]
	switch {
	case path != "" && addr != "":
		return nil, "", "", errors.New("give path or address, not both")
	case path != "":
		chain, err := readPEM(path)
		return chain, path, "", err
	case addr != "":
		chain, host, err := dial(ctx, addr, p)
		return chain, addr, host, err
	}
	return nil, "", "", errors.New("give path (a PEM file) or address (host:port of a TLS endpoint)")
}

func readPEM(path string) ([]*x509.Certificate, error) {
	// Only a regular file is opened: a device or FIFO would never end, or
	// act on the host when opened.
	data, err := regularfile.Read(path, MaxPEM)
	if err != nil {
		return nil, fmt.Errorf("read certificates: %w", err)
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		// Keys and other blocks are skipped unread.
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}

func dial(ctx context.Context, addr string, p api.Params) ([]*x509.Certificate, string, error) {
	host, port, err := stdnet.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("address %q: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, "", fmt.Errorf("address %q: port out of range", addr)
	}
	name := p["server_name"]
	if name == "" && stdnet.ParseIP(host) == nil {
		name = host
	}
	timeout, _ := time.ParseDuration(p["timeout"])
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{
		ServerName: name,
		// The chain is read here and judged by the action (verify runs
		// x509 verification itself, with the CA the params name).
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, context.Cause(ctx))
		}
		return nil, "", fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	defer conn.Close()
	chain := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return nil, "", fmt.Errorf("%s presented no certificate", addr)
	}
	return chain, host, nil
}

func daysLeft(c *x509.Certificate, now time.Time) int {
	d := c.NotAfter.Sub(now)
	days := int(d / (24 * time.Hour))
	// Expired: count whole days gone, negative.
	if d < 0 && d%(24*time.Hour) != 0 {
		days--
	}
	return days
}

func certFacts(c *x509.Certificate, now time.Time) map[string]any {
	ips := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		ips[i] = ip.String()
	}
	sans := append(append([]string{}, c.DNSNames...), ips...)
	sum := sha256.Sum256(c.Raw)
	return map[string]any{
		"subject":            c.Subject.String(),
		"common_name":        c.Subject.CommonName,
		"issuer":             c.Issuer.String(),
		"sans":               sans,
		"dns_names":          append([]string{}, c.DNSNames...),
		"ip_addresses":       ips,
		"serial":             c.SerialNumber.Text(16),
		"not_before":         c.NotBefore.UTC().Format(time.RFC3339),
		"not_after":          c.NotAfter.UTC().Format(time.RFC3339),
		"days_left":          daysLeft(c, now),
		"expired":            now.After(c.NotAfter),
		"is_ca":              c.IsCA,
		"self_signed":        strings.EqualFold(c.Subject.String(), c.Issuer.String()) && c.CheckSignatureFrom(c) == nil,
		"fingerprint_sha256": hex.EncodeToString(sum[:]),
	}
}
