package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// ListJobsOptions narrows GET /jobs.
type ListJobsOptions struct {
	// Status keeps only jobs in this state ("" keeps all).
	Status JobStatus
	// Limit bounds how many jobs come back (0: the controller's default).
	Limit int
}

// ListJobsWith lists jobs, newest first, filtered by status and bounded by
// limit. It sends the query parameters GET /jobs pages with (status,
// limit) and also applies both itself, so it holds against a controller
// that answers with every job, as a bare array or as a page object.
func (c *Client) ListJobsWith(ctx context.Context, o ListJobsOptions) ([]Job, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	path := "/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, path, nil, &raw); err != nil {
		return nil, err
	}
	var jobs []Job
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		var page struct {
			Jobs []Job `json:"jobs"`
		}
		if err := json.Unmarshal(t, &page); err != nil {
			return nil, fmt.Errorf("decode jobs page: %w", err)
		}
		jobs = page.Jobs
	} else if err := json.Unmarshal(t, &jobs); err != nil {
		return nil, fmt.Errorf("decode jobs: %w", err)
	}
	out := jobs[:0]
	for _, j := range jobs {
		if o.Status == "" || j.Status == o.Status {
			out = append(out, j)
		}
	}
	if o.Limit > 0 && len(out) > o.Limit {
		out = out[:o.Limit]
	}
	return out, nil
}

// RetryJob submits a new job with the spec of a finished one, linked by
// retry_of; failedOnly narrows it to the nodes that did not succeed.
func (c *Client) RetryJob(ctx context.Context, id string, failedOnly bool) (*Job, error) {
	var j Job
	if err := c.do(ctx, http.MethodPost, "/job/"+url.PathEscape(id)+"/retry", RetryRequest{FailedOnly: failedOnly}, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// DeleteJob removes a finished job; a pending or running one is a 409.
func (c *Client) DeleteJob(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/job/"+url.PathEscape(id), nil, nil)
}

// DeadLetters lists the job requests in the dead-letter stream.
func (c *Client) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	var out []DeadLetter
	return out, c.do(ctx, http.MethodGet, "/dlq", nil, &out)
}

// ReplayDeadLetter queues a dead-lettered job's request again.
func (c *Client) ReplayDeadLetter(ctx context.Context, jobID string) error {
	return c.do(ctx, http.MethodPost, "/dlq/"+url.PathEscape(jobID)+"/replay", nil, nil)
}

// DropDeadLetter removes a dead-lettered request for good.
func (c *Client) DropDeadLetter(ctx context.Context, jobID string) error {
	return c.do(ctx, http.MethodDelete, "/dlq/"+url.PathEscape(jobID), nil, nil)
}
