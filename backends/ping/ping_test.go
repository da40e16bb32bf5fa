package ping

import (
	"context"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

func TestConformance(t *testing.T) {
	b := New()
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{"sleep": {"duration": "1ms"}},
		Blocking: func(*testing.T) *backends.Request {
			return &backends.Request{Action: "sleep", Params: api.Params{"duration": "1h"}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			res, err := b.Run(context.Background(), &backends.Request{Action: action, Params: api.Params{param: value}})
			if err != nil || res.Output != value {
				t.Errorf("echo %q: got %+v, %v", value, res, err)
			}
		},
	})
}
