// Package testbackend is the "test" backend: actions that fail on purpose,
// for exercising strategies, conditions and retries.
package testbackend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Backend is the test backend.
type Backend struct{}

// New returns the test backend.
func New() *Backend { return &Backend{} }

// Schema declares succeed, fail and flaky.
func (*Backend) Schema() api.BackendSchema {
	return api.BackendSchema{
		Name:        "test",
		Description: "Failure injection for trying strategies, conditions and retries.",
		Actions: []api.ActionSchema{
			{Name: "succeed", Description: "Always succeed, replying with the message.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "message", Type: api.TypeString, Default: "succeeded on purpose", Description: "Output to report."}}},
			{Name: "fail", Description: "Always fail with the message.", ReadOnly: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "message", Type: api.TypeString, Default: "failed on purpose", Description: "Error to report."}}},
			{Name: "flaky", Description: "Fail with the given probability.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "rate", Type: api.TypeInt, Required: true, Pattern: `^(100|[1-9]?[0-9])$`, Description: "Failure probability in percent (0-100)."}}},
		},
	}
}

// Run executes succeed, fail or flaky.
func (*Backend) Run(_ context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "succeed":
		return &backends.Result{Output: req.Params["message"]}, nil
	case "fail":
		return nil, errors.New(req.Params["message"])
	case "flaky":
		rate, err := strconv.Atoi(req.Params["rate"])
		if err != nil {
			return nil, fmt.Errorf("rate: %w", err)
		}
		if rand.IntN(100) < rate { //nolint:gosec // failure injection, not security
			return &backends.Result{Output: "unlucky"}, fmt.Errorf("flaky failure (rate %d%%)", rate)
		}
		return &backends.Result{Output: "lucky"}, nil
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}
