package user_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/user"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICq7qBMiNusqzAj0mB+AL6bgNVhCX5H3DS2PbS3oh5E/ ci@example"

// present and authorized_key are not dangerous, so an operator may run
// them; they must not hand out root. Keys on an account with uid 0 are a
// root login, its shell or home changed can lock root out, and writing
// ~/.ssh into a home the user does not own (daemon's is /usr/sbin; a
// user made with home=/root) would give that user a directory inside
// someone else's home (root's ~/.ssh/config runs commands as root).
// Everything runs in check mode against this host's real accounts
// (getent), so nothing is changed.
func TestNoRootThroughUserActions(t *testing.T) {
	if _, err := exec.LookPath("getent"); err != nil {
		t.Skip("getent is not installed")
	}
	reg := backends.NewRegistry().MustRegister(user.New(user.Options{}))
	for _, tc := range []struct {
		name   string
		action string
		params api.Params
		want   string
	}{
		{"keys for root", "authorized_key", api.Params{"user": "root", "key": testKey}, "uid 0"},
		{"root's shell", "present", api.Params{"name": "root", "shell": "/usr/sbin/nologin"}, "uid 0"},
		{"root's groups", "present", api.Params{"name": "root", "groups": "daemon", "append": "true"}, "uid 0"},
		{"a second uid 0", "present", api.Params{"name": "gridtestroot", "uid": "0"}, "uid 0"},
		{"into sudo", "present", api.Params{"name": "daemon", "groups": "sudo", "append": "true"}, "root"},
		{"primary group root", "present", api.Params{"name": "daemon", "group": "root"}, "root"},
		{"a new user in sudo", "present", api.Params{"name": "gridtestsudo", "groups": "sudo"}, "root"},
		{"keys in a home the user does not own", "authorized_key", api.Params{"user": "daemon", "key": testKey}, "not owned by"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := reg.Run(context.Background(), "user", &backends.Request{Action: tc.action, Params: tc.params, CheckMode: true})
			if err == nil {
				t.Fatalf("no error; check mode said: %s", res.Output)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
