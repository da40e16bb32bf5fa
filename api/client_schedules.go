package api

import (
	"context"
	"net/http"
	"net/url"
)

// CreateSchedule stores a new schedule (409 when the name is taken).
func (c *Client) CreateSchedule(ctx context.Context, spec *ScheduleSpec) (*Schedule, error) {
	var s Schedule
	if err := c.do(ctx, http.MethodPost, "/schedules", spec, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSchedules lists every schedule, by name.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	return out, c.do(ctx, http.MethodGet, "/schedules", nil, &out)
}

// GetSchedule fetches one schedule with its state.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodGet, "/schedule/"+url.PathEscape(id), nil)
}

// UpdateSchedule replaces a schedule's spec (its name must stay id's).
func (c *Client) UpdateSchedule(ctx context.Context, id string, spec *ScheduleSpec) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPut, "/schedule/"+url.PathEscape(id), spec)
}

// PauseSchedule stops a schedule firing until it is resumed.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/schedule/"+url.PathEscape(id)+"/pause", nil)
}

// ResumeSchedule makes a paused schedule fire again from its next tick.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/schedule/"+url.PathEscape(id)+"/resume", nil)
}

// DeleteSchedule removes a schedule; the jobs it submitted stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/schedule/"+url.PathEscape(id), nil, nil)
}

func (c *Client) scheduleCall(ctx context.Context, method, path string, in any) (*Schedule, error) {
	var s Schedule
	if err := c.do(ctx, method, path, in, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
