package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultAddress is where the CLI and provider look for a controller when
// neither a flag nor GRID_ADDR says otherwise.
const DefaultAddress = "https://127.0.0.1:8765"

// ClientConfig configures a Client.
type ClientConfig struct {
	// Address is the controller's base URL, or several controllers' of a
	// cluster, comma-separated: a request that cannot reach one goes to
	// the next (see Client.do).
	Address string
	// Token is sent as a bearer token when set.
	Token string
	// Timeout bounds each request (long polls add their own wait).
	Timeout time.Duration
	// HTTPClient replaces the default client. Its transport, when an
	// *http.Transport, is copied with the TLS settings below (when any).
	HTTPClient *http.Client
	// CAFile and CAPEM are CA certificates (PEM) the controller's HTTPS
	// certificate must chain to, in addition to each other; with neither,
	// the system's roots. A controller's own CA is its DATA_DIR/ca.pem.
	CAFile string
	CAPEM  string
	// CertFile and KeyFile are a client certificate for a controller that
	// requires one (api_client_ca).
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any server certificate: for labs only,
	// since anyone on the path can then read the token.
	InsecureSkipVerify bool
}

// Environment variables clients read.
const (
	EnvAddr   = "GRID_ADDR"
	EnvToken  = "GRID_TOKEN"
	EnvCACert = "GRID_CACERT"
	// EnvClientCert and EnvClientKey are a client certificate for a
	// controller with api_client_ca.
	EnvClientCert = "GRID_CLIENT_CERT"
	EnvClientKey  = "GRID_CLIENT_KEY"
)

// DefaultClientConfig reads GRID_ADDR, GRID_TOKEN, GRID_CACERT,
// GRID_CLIENT_CERT and GRID_CLIENT_KEY.
func DefaultClientConfig() ClientConfig {
	c := ClientConfig{Address: DefaultAddress, Timeout: 30 * time.Second}
	if v := os.Getenv(EnvAddr); v != "" {
		c.Address = v
	}
	c.Token = os.Getenv(EnvToken)
	c.CAFile = os.Getenv(EnvCACert)
	c.CertFile, c.KeyFile = os.Getenv(EnvClientCert), os.Getenv(EnvClientKey)
	return c
}

// TLSConfig is the client TLS configuration the config asks for, or nil
// when it asks for nothing beyond the system's defaults.
func (c ClientConfig) TLSConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CAPEM == "" && c.CertFile == "" && c.KeyFile == "" && !c.InsecureSkipVerify {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // asked for, labs only
	if c.CAFile != "" || c.CAPEM != "" {
		pool := x509.NewCertPool()
		if c.CAFile != "" {
			b, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("controller CA file (GRID_CACERT / ca_file): %w", err)
			}
			if !pool.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("controller CA file %s (GRID_CACERT / ca_file): no PEM certificate in it", c.CAFile)
			}
		}
		if c.CAPEM != "" && !pool.AppendCertsFromPEM([]byte(c.CAPEM)) {
			return nil, errors.New("controller CA PEM (ca_pem): no PEM certificate in it")
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		if c.CertFile == "" || c.KeyFile == "" {
			return nil, errors.New("client certificate: set both the certificate and its key")
		}
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Validate checks the address (each one, when several are given).
func (c ClientConfig) Validate() error {
	if strings.TrimSpace(c.Address) == "" {
		return errors.New("controller address is empty")
	}
	for _, a := range strings.Split(c.Address, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return fmt.Errorf("controller address %q has an empty entry between its commas", c.Address)
		}
		u, err := url.Parse(NormalizeAddress(a))
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("controller address %q is not an http(s) URL like %s", a, DefaultAddress)
		}
	}
	return nil
}

// addresses are the normalized base URLs of a valid address list.
func addresses(a string) []string {
	var out []string
	for _, e := range strings.Split(a, ",") {
		out = append(out, NormalizeAddress(strings.TrimSpace(e)))
	}
	return out
}

// NormalizeAddress adds https:// to a bare host:port.
func NormalizeAddress(a string) string {
	if !strings.Contains(a, "://") {
		return "https://" + a
	}
	return strings.TrimRight(a, "/")
}

// Client talks to a controller's HTTP API, or to the first of several
// controllers of a cluster that answers.
type Client struct {
	bases []string
	// cur is the index in bases of the controller that answered last,
	// where the next request starts; shared by copies of the client.
	cur   *atomic.Int32
	token string
	hc    *http.Client
}

// NewClient builds a client; the config must be valid.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tc, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if tc != nil {
		// The TLS settings asked for replace the transport's own (an
		// *http.Transport sets a TLS config of its own once used).
		tr, ok := hc.Transport.(*http.Transport)
		if hc.Transport == nil {
			tr, ok = http.DefaultTransport.(*http.Transport), true
		}
		if ok {
			tr = tr.Clone()
			tr.TLSClientConfig = tc
			cp := *hc
			cp.Transport = tr
			hc = &cp
		}
	}
	if cfg.Timeout > 0 && hc.Timeout == 0 {
		cp := *hc
		cp.Timeout = cfg.Timeout
		hc = &cp
	}
	return &Client{bases: addresses(cfg.Address), cur: new(atomic.Int32), token: cfg.Token, hc: hc}, nil
}

// Address is the base URL of the controller that answered last (the first
// one before any request).
func (c *Client) Address() string { return c.bases[c.cur.Load()] }

// Error is an error answer from the controller.
type Error struct {
	StatusCode int
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("controller answered %d: %s", e.StatusCode, e.Message)
}

// IsStatus reports whether err is an API error with the given status code.
func IsStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == code
}

// UnreachableError wraps a failure to reach the controller at all.
type UnreachableError struct {
	Address string
	Err     error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the GRID controller at %s: %v (is it running? set the address with --addr or GRID_ADDR)", e.Address, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// TLSError is a failure to verify the controller's HTTPS certificate.
type TLSError struct {
	Address string
	Err     error
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("cannot verify the GRID controller's certificate at %s: %v (set GRID_CACERT, --cacert or the provider's ca_file to the controller's DATA_DIR/ca.pem)", e.Address, e.Err)
}

func (e *TLSError) Unwrap() error { return e.Err }

// tlsError is a *TLSError when err is a certificate verification failure,
// or a plain HTTPS-to-HTTP mismatch explained, else nil.
func tlsError(addr string, err error) error {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		return &TLSError{Address: addr, Err: err}
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("the GRID controller at %s answers plain HTTP (insecure: true): use an http:// address: %w", addr, err)
	}
	return nil
}

// do sends a request and decodes the answer. With several controllers it
// starts at the one that answered last and moves on to the next when one
// cannot be reached: on a refused or failed connection (nothing was sent)
// for every request, and on any transport error for a GET, which may be
// sent twice. A POST whose connection broke after it was sent is not sent
// again (the controller may have taken it): its error is returned.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		payload = b
	}
	start := int(c.cur.Load())
	var err error
	for i := range c.bases {
		n := (start + i) % len(c.bases)
		var resp *http.Response
		resp, err = c.send(ctx, c.bases[n], method, path, payload, in != nil) //nolint:bodyclose // c.read closes it
		if err == nil {
			c.cur.Store(int32(n))
			return c.read(resp, method, path, out)
		}
		if ctx.Err() != nil || !c.failover(method, err) {
			return err
		}
	}
	return err
}

// failover says whether a request that failed with err may go to the next
// controller: a GET after any unreachable error, anything else only when
// the connection was never made.
func (c *Client) failover(method string, err error) bool {
	var ue *UnreachableError
	if len(c.bases) < 2 || !errors.As(err, &ue) {
		return false
	}
	var oe *net.OpError
	return method == http.MethodGet || (errors.As(err, &oe) && oe.Op == "dial")
}

// send sends one request to the controller at base.
func (c *Client) send(ctx context.Context, base, method, path string, payload []byte, hasBody bool) (*http.Response, error) {
	var body io.Reader
	if hasBody {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if te := tlsError(base, err); te != nil {
			return nil, te
		}
		var ne net.Error
		var oe *net.OpError
		if ctx.Err() == nil && (errors.As(err, &oe) || (errors.As(err, &ne) && !ne.Timeout())) {
			return nil, &UnreachableError{Address: base, Err: err}
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// read decodes an answer: an *Error for a status of 400 or more, else the
// JSON body into out (when not nil).
func (c *Client) read(resp *http.Response, method, path string, out any) error {
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(data))
			if eb.Error == "" {
				eb.Error = http.StatusText(resp.StatusCode)
			}
		}
		if resp.StatusCode == http.StatusBadRequest && strings.Contains(eb.Error, "HTTP request to an HTTPS server") {
			eb.Error += " (the controller serves HTTPS: use an https:// address and trust its DATA_DIR/ca.pem with GRID_CACERT)"
		}
		return &Error{StatusCode: resp.StatusCode, Message: eb.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode response of %s %s: %w", method, path, err)
	}
	return nil
}

// SubmitJob submits a job and returns it as accepted (status pending).
func (c *Client) SubmitJob(ctx context.Context, spec *JobSpec) (*Job, error) {
	return c.SubmitJobWith(ctx, spec, SubmitOptions{})
}

// SubmitOptions change how a controller takes a submission.
type SubmitOptions struct {
	// AllowEmpty submits a job whose target matches no node, online or
	// offline (which is refused otherwise): it is stored and fails for
	// want of nodes, as one whose nodes are all offline does.
	AllowEmpty bool
}

// SubmitJobWith submits a job with options.
func (c *Client) SubmitJobWith(ctx context.Context, spec *JobSpec, o SubmitOptions) (*Job, error) {
	path := "/job"
	if o.AllowEmpty {
		path += "?allow_empty=true"
	}
	var j Job
	if err := c.do(ctx, http.MethodPost, path, spec, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// GetJob fetches a job with its results.
func (c *Client) GetJob(ctx context.Context, id string) (*Job, error) {
	var j Job
	if err := c.do(ctx, http.MethodGet, "/job/"+url.PathEscape(id), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// WaitJob blocks until the job is terminal or ctx ends, using the
// controller's long poll so the answer comes as soon as the job finishes.
func (c *Client) WaitJob(ctx context.Context, id string) (*Job, error) {
	const wait = 20 * time.Second
	for {
		var j Job
		path := fmt.Sprintf("/job/%s?wait=%s", url.PathEscape(id), wait)
		// The long poll outlives the client's per-request timeout.
		cc := *c
		hc := *c.hc
		hc.Timeout = wait + 30*time.Second
		cc.hc = &hc
		if err := cc.do(ctx, http.MethodGet, path, nil, &j); err != nil {
			return nil, err
		}
		if j.Status.Terminal() {
			return &j, nil
		}
		if err := ctx.Err(); err != nil {
			return &j, err
		}
	}
}

// CancelJob asks the controller to cancel a pending or running job.
func (c *Client) CancelJob(ctx context.Context, id string) (*Job, error) {
	var j Job
	if err := c.do(ctx, http.MethodPost, "/job/"+url.PathEscape(id)+"/cancel", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// ListJobs lists the first page of jobs (the controller's default limit,
// 100), newest first.
func (c *Client) ListJobs(ctx context.Context) ([]Job, error) {
	return c.ListJobsPage(ctx, JobQuery{})
}

// JobQuery selects a page of GET /jobs; zero fields are left to the
// controller (limit 100, no filter, from the newest job).
type JobQuery struct {
	// Limit is the page size (1..1000).
	Limit int
	// Cursor continues after a job: JobCursor of the last job of the
	// previous page.
	Cursor string
	// Status, SubmittedBy and ScheduleID filter.
	Status      JobStatus
	SubmittedBy string
	ScheduleID  string
}

// ListJobsPage lists one page of jobs, newest first. A page shorter than
// the limit is the last.
func (c *Client) ListJobsPage(ctx context.Context, q JobQuery) ([]Job, error) {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	if q.SubmittedBy != "" {
		v.Set("submitted_by", q.SubmittedBy)
	}
	if q.ScheduleID != "" {
		v.Set("schedule_id", q.ScheduleID)
	}
	path := "/jobs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []Job
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// ListNodes lists registered nodes.
func (c *Client) ListNodes(ctx context.Context) ([]NodeInfo, error) {
	return c.ListSiteNodes(ctx, "")
}

// ListSiteNodes lists the registered nodes of one site (GET
// /nodes?site=NAME; DefaultSite is the hub's own agents); an empty site
// lists every node.
func (c *Client) ListSiteNodes(ctx context.Context, site string) ([]NodeInfo, error) {
	path := "/nodes"
	if site != "" {
		path += "?" + url.Values{"site": {site}}.Encode()
	}
	var out []NodeInfo
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// GetNode fetches one node with its schemas.
func (c *Client) GetNode(ctx context.Context, id string) (*NodeInfo, error) {
	var n NodeInfo
	if err := c.do(ctx, http.MethodGet, "/node/"+url.PathEscape(id), nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// RemoveNode forgets an offline node's record; an online node is a 409.
// The node's enrollment is kept: an agent that comes back with its key
// registers again (revoke it to keep it out).
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/node/"+url.PathEscape(id), nil, nil)
}

// Status fetches the cluster status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodGet, "/status", nil, &s)
}

// Controllers lists registered controllers.
func (c *Client) Controllers(ctx context.Context) ([]ControllerInfo, error) {
	var out []ControllerInfo
	return out, c.do(ctx, http.MethodGet, "/controllers", nil, &out)
}

// Backends fetches the merged action schemas of online nodes.
func (c *Client) Backends(ctx context.Context) (*Catalog, error) {
	var cat Catalog
	return &cat, c.do(ctx, http.MethodGet, "/backends", nil, &cat)
}
