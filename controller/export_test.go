package controller

import (
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// RouteRole is one API route and the role it needs, for tests.
type RouteRole struct {
	Pattern string
	Role    api.Role
}

// APIRoutes lists the API's routes with their roles, so the tests check
// every route, including ones added later.
func (c *Controller) APIRoutes() []RouteRole {
	var out []RouteRole
	for _, rt := range c.apiRoutes() {
		out = append(out, RouteRole{rt.pattern, rt.role})
	}
	return out
}

// OnScheduleClaim sets a function called after this controller claims a
// schedule's tick and before it submits the tick's job; when it returns
// true the controller stops there, as if it had crashed in between.
func (c *Controller) OnScheduleClaim(fn func(jobID string) bool) {
	c.scheduleClaimed.Store(&fn)
}

// RefusedReplies counts the requests this controller dropped because their
// reply subject was not their sender's own inbox.
func (c *Controller) RefusedReplies() int64 { return c.replies.refused.Load() }

// LookAtAuditNow makes the next mutating call read the audit stream's state
// again (as it does every auditRecheck), so that a test sees a change it
// made to the stream at once.
func (c *Controller) LookAtAuditNow() {
	c.audit.mu.Lock()
	c.audit.read = time.Time{}
	c.audit.mu.Unlock()
}

// Authorize wraps h as the route table wraps each route's handler (the
// token check and, for a mutating call, its audit record): for a test's
// own handler, such as one that fails in ways no real handler can be made
// to on purpose.
func (c *Controller) Authorize(pattern string, role api.Role, h http.Handler) http.Handler {
	return c.authorize(route{pattern: pattern, role: role, handler: h})
}

// LeafURL is the URL sites' credentials name for this controller's leaf
// port ("" without one).
func (c *Controller) LeafURL() string { return c.leafURL }

// SiteSend and SiteHear are the subjects that cross between the relays'
// account and the controllers'.
var SiteSend, SiteHear = siteSend, siteHear

// SitePermissions are the rights of a site's relay on this controller.
func (c *Controller) SitePermissions(site string) *server.Permissions {
	return c.sec.sitePermissions(site)
}
