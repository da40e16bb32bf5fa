package firewall_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/firewall"
)

// deny can take a node out of service: a drop on 22 locks out ssh, and a
// drop on the whole port range drops the replies to the agent's own
// connection to the controller, so no later job can undo it. It is off
// unless a node allows it, like the other actions that can do that. The
// registry refuses it before nft would run (the nft path here does not
// exist, so nothing on this host is touched).
func TestDenyIsOffByDefault(t *testing.T) {
	reg := backends.NewRegistry().MustRegister(firewall.New(firewall.Options{NftCommand: []string{"/nonexistent/nft"}}))
	for _, port := range []string{"22", "1-65535"} {
		_, err := reg.Run(context.Background(), "firewall", &backends.Request{Action: "deny", Params: api.Params{"port": port}})
		if !errors.Is(err, backends.ErrNotAllowed) {
			t.Errorf("deny %s with the default allow list: got %v, want %v", port, err, backends.ErrNotAllowed)
		}
	}
	// allow cannot cut access (the chain's policy is accept): it stays on.
	_, err := reg.Run(context.Background(), "firewall", &backends.Request{Action: "allow", Params: api.Params{"port": "22"}})
	if errors.Is(err, backends.ErrNotAllowed) {
		t.Errorf("allow refused by the default allow list: %v", err)
	}
}
