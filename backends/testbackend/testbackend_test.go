package testbackend

import (
	"context"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

func TestConformance(t *testing.T) {
	b := New()
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{"flaky": {"rate": "0"}, "secret": {"value": "s"}, "output": {"bytes": "3"}},
		Literal: func(t *testing.T, action, param, value string) {
			res, err := b.Run(context.Background(), &backends.Request{Action: action, Params: api.Params{param: value}})
			switch action {
			case "succeed":
				if err != nil || res.Output != value {
					t.Errorf("succeed %q: got %+v, %v", value, res, err)
				}
			case "secret":
				if err != nil || !strings.HasSuffix(res.Output, " of "+value) {
					t.Errorf("secret %q: got %+v %v", value, res, err)
				}
			default:
				if err == nil || err.Error() != value {
					t.Errorf("fail %q: got %v", value, err)
				}
			}
		},
	})
}

func TestFlakyBounds(t *testing.T) {
	b := New()
	for _, tc := range []struct {
		rate    string
		wantErr bool
	}{{"0", false}, {"100", true}} {
		_, err := b.Run(context.Background(), &backends.Request{Action: "flaky", Params: api.Params{"rate": tc.rate}})
		if (err != nil) != tc.wantErr {
			t.Errorf("rate %s: err %v, want error %v", tc.rate, err, tc.wantErr)
		}
	}
}
