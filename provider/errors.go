package provider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// addClientError turns an api.Client error into a diagnostic whose summary
// names the act. An unreachable controller gets a detail saying where the
// provider looked and how to point it elsewhere.
func addClientError(diags *diag.Diagnostics, summary string, err error) {
	var te *api.TLSError
	if errors.As(err, &te) {
		diags.AddError(summary, fmt.Sprintf("Cannot verify the GRID controller's HTTPS certificate at %s: %v.\n\n"+
			"Set the provider's ca_file (or GRID_CACERT) to the controller's DATA_DIR/ca.pem, or ca_pem to its "+
			"contents (or the CA of the certificate it serves with api_tls_cert).", te.Address, te.Err))
		return
	}
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		diags.AddError(summary, fmt.Sprintf("Cannot reach the GRID controller at %s: %v.\n\n"+
			"Check that the controller is running (for a local fleet: grid dev), or set the provider's "+
			"address (or GRID_ADDR) to where it listens.", ue.Address, ue.Err))
		return
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		hint := ""
		switch ae.StatusCode {
		case 401:
			hint = "\n\nThe controller refused the token: set the provider's token (or GRID_TOKEN) to a live token " +
				"of this controller (the first admin token is in its data dir, file admin-token; grid token create makes more)."
		case 403:
			hint = "\n\nThe token's role is too weak: grid_job needs a token with role operator (admin for " +
				"dangerous actions); data sources need read."
		case 429:
			hint = "\n\nThe controller's queue is full; wait for running jobs to finish and apply again."
		}
		diags.AddError(summary, fmt.Sprintf("The controller answered %d: %s%s", ae.StatusCode, ae.Message, hint))
		return
	}
	diags.AddError(summary, err.Error())
}

// fieldPath is the one parser of the fields api validation names
// ("tasks[1].tasks[0].params.x", "target.value"): it turns one into an
// attribute path under root (path.Empty() for the resource's own
// attributes). A field may start at an index ("[1].tasks[0].action") when
// root is the list attribute it is relative to.
func fieldPath(root path.Path, field string) path.Path {
	p := root
	first := true
	parts := strings.Split(field, ".")
	for i := 0; i < len(parts); i++ {
		part := parts[i]
		if part == "" {
			continue
		}
		name, idx := part, -1
		if o := strings.IndexByte(part, '['); o >= 0 && strings.HasSuffix(part, "]") {
			if n, err := strconv.Atoi(part[o+1 : len(part)-1]); err == nil {
				name, idx = part[:o], n
			}
		}
		switch {
		case name == "" && first && !root.Equal(path.Empty()):
			// "[1]...": an index into root itself.
		case first && root.Equal(path.Empty()):
			p = path.Root(name)
		default:
			p = p.AtName(name)
		}
		first = false
		if idx >= 0 {
			p = p.AtListIndex(idx)
		}
		if name == "params" && i+1 < len(parts) {
			// Parameter names are tokens: the rest is the key.
			p = p.AtMapKey(strings.Join(parts[i+1:], "."))
			break
		}
	}
	return p
}
