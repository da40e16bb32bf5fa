package api

import (
	"bytes"
	"context"
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
	"time"
)

// DefaultAddress is where the CLI and provider look for a controller when
// neither a flag nor GRID_ADDR says otherwise.
const DefaultAddress = "http://127.0.0.1:8765"

// ClientConfig configures a Client.
type ClientConfig struct {
	// Address is the controller's base URL.
	Address string
	// Token is sent as a bearer token when set.
	Token string
	// Timeout bounds each request (long polls add their own wait).
	Timeout time.Duration
	// HTTPClient replaces the default transport.
	HTTPClient *http.Client
}

// DefaultClientConfig reads GRID_ADDR and GRID_TOKEN.
func DefaultClientConfig() ClientConfig {
	c := ClientConfig{Address: DefaultAddress, Timeout: 30 * time.Second}
	if v := os.Getenv("GRID_ADDR"); v != "" {
		c.Address = v
	}
	c.Token = os.Getenv("GRID_TOKEN")
	return c
}

// Validate checks the address.
func (c ClientConfig) Validate() error {
	if c.Address == "" {
		return errors.New("controller address is empty")
	}
	u, err := url.Parse(NormalizeAddress(c.Address))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("controller address %q is not an http(s) URL like %s", c.Address, DefaultAddress)
	}
	return nil
}

// NormalizeAddress adds http:// to a bare host:port.
func NormalizeAddress(a string) string {
	if !strings.Contains(a, "://") {
		return "http://" + a
	}
	return strings.TrimRight(a, "/")
}

// Client talks to a controller's HTTP API.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient builds a client; the config must be valid.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if cfg.Timeout > 0 && hc.Timeout == 0 {
		cp := *hc
		cp.Timeout = cfg.Timeout
		hc = &cp
	}
	return &Client{base: NormalizeAddress(cfg.Address), token: cfg.Token, hc: hc}, nil
}

// Address is the controller's base URL.
func (c *Client) Address() string { return c.base }

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

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne net.Error
		var oe *net.OpError
		if ctx.Err() == nil && (errors.As(err, &oe) || (errors.As(err, &ne) && !ne.Timeout())) {
			return &UnreachableError{Address: c.base, Err: err}
		}
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
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
	var j Job
	if err := c.do(ctx, http.MethodPost, "/job", spec, &j); err != nil {
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
	// Status and SubmittedBy filter.
	Status      JobStatus
	SubmittedBy string
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
	path := "/jobs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []Job
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// ListNodes lists registered nodes.
func (c *Client) ListNodes(ctx context.Context) ([]NodeInfo, error) {
	var out []NodeInfo
	return out, c.do(ctx, http.MethodGet, "/nodes", nil, &out)
}

// GetNode fetches one node with its schemas.
func (c *Client) GetNode(ctx context.Context, id string) (*NodeInfo, error) {
	var n NodeInfo
	if err := c.do(ctx, http.MethodGet, "/node/"+url.PathEscape(id), nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
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
