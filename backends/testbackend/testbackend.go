// Package testbackend is the "test" backend: actions that fail on purpose,
// for exercising strategies, conditions and retries.
package testbackend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Backend is the test backend.
type Backend struct{}

// New returns the test backend.
func New() *Backend { return &Backend{} }

// Schema declares succeed, fail, flaky, secret and output.
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
			{Name: "secret", Description: "Report the sha256 of a sensitive value (and echo the value in the output and facts, where the agent hides it), for trying sensitive params.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "value", Type: api.TypeString, Required: true, Sensitive: true, Description: "A secret."}}},
			{Name: "output", Description: "Succeed with an output of the given size, for trying output limits.", ReadOnly: true, Idempotent: true, CheckMode: true,
				Params: []api.ParamSchema{{Name: "bytes", Type: api.TypeInt, Required: true, Pattern: `^[0-9]{1,8}$`, Description: "Output size in bytes (at most 99,999,999)."}}},
		},
	}
}

// Run executes succeed, fail, flaky, secret or output.
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
	case "secret":
		v := req.Params["value"]
		h := sha256.Sum256([]byte(v))
		sum := hex.EncodeToString(h[:])
		// The facts echo the value too, as a value, nested, and as a key:
		// the agent hides it everywhere in them as in the output.
		return &backends.Result{Output: "sha256 " + sum + " of " + v, Facts: map[string]any{
			"sha256": sum, "value": v, "echo": map[string]any{"list": []any{v, "the value is " + v}}, v: "the value as a key",
		}}, nil
	case "output":
		n, err := strconv.Atoi(req.Params["bytes"])
		if err != nil {
			return nil, fmt.Errorf("bytes: %w", err)
		}
		return &backends.Result{Output: strings.Repeat("x", n)}, nil
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}
