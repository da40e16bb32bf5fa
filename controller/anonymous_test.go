package controller_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// A secured controller will not start with anonymous_role: requests
// without a token are for labs only.
func TestAnonymousRoleRefusedWhenSecure(t *testing.T) {
	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = t.TempDir(), "127.0.0.1:-1", "127.0.0.1:0"
	cfg.AnonymousRole = api.RoleOperator
	_, err := controller.New(cfg)
	if err == nil {
		t.Fatal("a secured controller accepted anonymous_role")
	}
	if !strings.Contains(err.Error(), "anonymous_role") || !strings.Contains(err.Error(), "insecure: true") {
		t.Fatalf("error %q, want it to name anonymous_role and insecure: true", err)
	}
}

// On a lab controller with anonymous_role read, a request without a token
// may read but not submit, cancel or manage tokens; tokens work as before;
// no token may be named anonymous.
func TestAnonymousRoleInALab(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1, Controller: func(c *controller.Config) {
		c.Insecure = true
		c.AnonymousRole = api.RoleRead
	}})
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/jobs", http.StatusOK},
		{http.MethodGet, "/nodes", http.StatusOK},
		{http.MethodGet, "/job/job-nosuch", http.StatusNotFound},
		{http.MethodPost, "/job", http.StatusForbidden},
		{http.MethodPost, "/job/job-nosuch/cancel", http.StatusForbidden},
		{http.MethodGet, "/tokens", http.StatusForbidden},
	} {
		code, msg := rawCall(t, f.Controller, tc.method, tc.path, "", []byte("{}"))
		if code != tc.want {
			t.Errorf("%s %s without a token: %d %q, want %d", tc.method, tc.path, code, msg, tc.want)
		}
		if code == http.StatusForbidden && !strings.Contains(msg, "anonymous_role") {
			t.Errorf("%s %s: %q, want the refusal to name anonymous_role", tc.method, tc.path, msg)
		}
	}
	// A wrong token is still refused, not taken for anonymous.
	if code, _ := rawCall(t, f.Controller, http.MethodGet, "/jobs", "grid_not-a-real-token", nil); code != http.StatusUnauthorized {
		t.Errorf("unknown token: %d, want 401", code)
	}
	if code, msg := rawCall(t, f.Controller, http.MethodPost, "/token", f.AdminToken(), []byte(`{"name": "anonymous", "role": "read"}`)); code != http.StatusBadRequest {
		t.Errorf("token named anonymous: %d %q, want 400", code, msg)
	}
}
