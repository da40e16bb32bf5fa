package health_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/health"
)

// health.http matches the body against body_pattern, which is an oracle:
// one regexp at a time, a job can read a body it never sees. Pointed at
// the cloud's instance metadata service, that reads the node's cloud
// credentials, which are the cloud's to guard, not the host's. Link-local
// addresses (169.254.169.254 and fe80::/10) and AWS's IPv6 metadata
// address are refused before any connection, by the address dialled, so
// a name that resolves there is refused too.
func TestHTTPRefusesTheMetadataService(t *testing.T) {
	reg := backends.NewRegistry().MustRegister(health.New(health.Options{}))
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/iam/security-credentials/",
		"http://169.254.1.1/",
		"http://[fe80::1]/",
		"http://[fd00:ec2::254]/latest/meta-data/",
	} {
		_, err := reg.Run(context.Background(), "health", &backends.Request{Action: "http",
			Params: api.Params{"url": u, "body_pattern": "^A", "timeout": "2s"}})
		if !errors.Is(err, health.ErrLinkLocal) {
			t.Errorf("GET %s: got %v, want %v", u, err, health.ErrLinkLocal)
		}
	}
}
