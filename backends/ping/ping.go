// Package ping is a harmless backend for trying a fleet and measuring it:
// echo a message back, or sleep.
package ping

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Backend is the ping backend.
type Backend struct{}

// New returns the ping backend.
func New() *Backend { return &Backend{} }

// Schema declares echo, sleep and hostname.
func (*Backend) Schema() api.BackendSchema {
	return api.BackendSchema{
		Name:        "ping",
		Description: "Liveness checks: echo a message, sleep for a while, report the host's name.",
		Actions: []api.ActionSchema{
			{Name: "echo", Description: "Reply with the message.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "message", Type: api.TypeString, Default: "pong", Description: "Text to send back."}}},
			{Name: "sleep", Description: "Sleep for a duration; stops early when cancelled.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "duration", Type: api.TypeDuration, Required: true, Description: "How long to sleep (e.g. 5s)."}}},
			{Name: "hostname", Description: "Reply with the host's name (also as the fact hostname).", ReadOnly: true, Idempotent: true, CheckMode: true},
		},
	}
}

// Run executes echo, sleep or hostname.
func (*Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "echo":
		return &backends.Result{Output: req.Params["message"]}, nil
	case "hostname":
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostname: %w", err)
		}
		return &backends.Result{Output: h, Facts: map[string]any{"hostname": h}}, nil
	case "sleep":
		d, err := time.ParseDuration(req.Params["duration"])
		if err != nil {
			return nil, fmt.Errorf("duration: %w", err)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return &backends.Result{Output: "slept " + d.String()}, nil
		case <-ctx.Done():
			return &backends.Result{Output: "interrupted"}, fmt.Errorf("sleep interrupted: %w", context.Cause(ctx))
		}
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}
