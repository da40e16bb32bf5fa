package api

import (
	"context"
	"net/http"
	"net/url"
)

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
