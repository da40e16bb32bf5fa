package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// public marks a route that needs no token (health checks).
const public api.Role = ""

// route is one API endpoint and the weakest role that may call it.
type route struct {
	pattern string
	role    api.Role
	handler http.Handler
}

// principal is who made a request: the token's name and role.
type principal struct {
	Name string
	Role api.Role
	// Anonymous: the request had no token and the controller (insecure,
	// anonymous_role set) let it in as anonymousName. Its job answers use
	// the seed's view (seedview.go).
	Anonymous bool
}

// who names the principal in a message.
func (p principal) who() string {
	if p.Anonymous {
		return "a request without a token (anonymous_role)"
	}
	return fmt.Sprintf("token %q", p.Name)
}

// anonymousName is the principal of a request without a token on a lab
// controller with anonymous_role; submitted_by records it.
const anonymousName = "anonymous"

type principalKey struct{}

// principalFrom returns the caller of an authenticated request.
func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

// authorize wraps a route's handler with the token check: 401 when the
// token is missing, unknown or revoked, 403 when its role is too weak. Every
// call that is not a GET is logged with the token's name (never the token)
// and recorded in the audit trail before it is answered (audit.go); so are
// the refusals.
func (c *Controller) authorize(rt route) http.Handler {
	if rt.role == public {
		return rt.handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, code, msg := c.authenticate(r.Header.Get("Authorization"), r.Method+" "+r.URL.Path, rt.role)
		if code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="grid"`)
			}
			c.metrics.apiRefused.WithLabelValues(http.StatusText(code)).Inc()
			c.log.Warn("API call refused", "method", r.Method, "path", r.URL.Path, "by", p.Name,
				"remote", r.RemoteAddr, "status", code)
			c.recordRefusal(r, rt, p, code)
			writeError(w, code, msg)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		// The catch-all route only answers 404: a call that acts on
		// nothing is not recorded, or any token (metrics included) could
		// fill the audit stream with POSTs to paths that do not exist.
		if r.Method == http.MethodGet || r.Method == http.MethodHead || rt.pattern == "/" {
			rt.handler.ServeHTTP(w, r)
			return
		}
		// Logged and recorded in the audit trail, before the answer.
		c.auditedCall(w, r, rt, p)
	})
}

// authenticate checks an Authorization header against the tokens and the
// role a route needs. A non-zero code is the refusal, with a message saying
// what is wrong and what to do.
func (c *Controller) authenticate(header, what string, need api.Role) (principal, int, string) {
	if header == "" && c.cfg.Insecure && c.cfg.AnonymousRole != "" {
		// Validate refuses anonymous_role without insecure; the check here
		// keeps a secured controller closed whatever its config says.
		p := principal{Name: anonymousName, Role: c.cfg.AnonymousRole, Anonymous: true}
		if !p.Role.Includes(need) {
			return p, http.StatusForbidden, fmt.Sprintf("requests without a token have role %s on this controller (anonymous_role), "+
				"but %s needs role %s or higher; send \"Authorization: Bearer <token>\" with a token of that role", p.Role, what, need)
		}
		return p, 0, ""
	}
	if header == "" {
		return principal{}, http.StatusUnauthorized, fmt.Sprintf("missing API token: %s needs a token with role %s or higher. "+
			"Send \"Authorization: Bearer <token>\" (grid: --token or GRID_TOKEN; Terraform: the provider's token). "+
			"The first admin token is in the controller's data dir, file %s", what, need, AdminTokenFile)
	}
	scheme, tok, ok := strings.Cut(header, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, http.StatusUnauthorized, "malformed Authorization header: want \"Bearer <token>\""
	}
	rec, ok := c.tokens.lookup(tok)
	if !ok {
		return principal{}, http.StatusUnauthorized, "unknown API token: it is not a token of this GRID cluster. " +
			"Check --token or GRID_TOKEN, or ask an admin for one (grid token create)"
	}
	p := principal{Name: rec.Name, Role: rec.Role}
	if rec.RevokedAt != nil {
		return p, http.StatusUnauthorized, fmt.Sprintf("API token %q was revoked at %s; ask an admin for a new one (grid token create)",
			rec.Name, rec.RevokedAt.Format("2006-01-02 15:04:05 UTC"))
	}
	if !rec.Role.Includes(need) {
		return p, http.StatusForbidden, fmt.Sprintf("token %q has role %s, but %s needs role %s or higher; "+
			"ask an admin for a token with that role (grid token create --role %s)", rec.Name, rec.Role, what, need, need)
	}
	return p, 0, ""
}

// AdminToken is the admin token kept in the data dir (see AdminTokenFile),
// for the in-process fleet and tests.
func (c *Controller) AdminToken() string { return c.adminToken }

func (c *Controller) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req api.TokenRequest
	d := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "token request: "+err.Error())
		return
	}
	if !api.ValidToken(req.Name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q: use 1-128 letters, digits, '_' and '-'", req.Name))
		return
	}
	if reservedTokenName(req.Name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q: admin and admin-* name the controllers' own admin tokens; pick another", req.Name))
		return
	}
	if req.Name == anonymousName {
		// submitted_by "anonymous" means a request without a token.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q names requests without a token (anonymous_role); pick another", req.Name))
		return
	}
	role, err := api.ParseRole(string(req.Role))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	noteAudit(r, func(n *auditNote) { n.resource, n.params = req.Name, map[string]any{"role": role} })
	tok := newToken()
	info, err := c.tokens.create(r.Context(), req.Name, role, principalFrom(r.Context()).Name, tok)
	if errors.Is(err, errTokenExists) {
		writeError(w, http.StatusConflict, fmt.Sprintf("a token named %q exists; revoke it first or pick another name", req.Name))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, api.NewToken{TokenInfo: info, Token: tok})
}

func (c *Controller) handleListTokens(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.tokens.list())
}

func (c *Controller) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	info, err := c.tokens.revoke(r.Context(), name, principalFrom(r.Context()).Name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no token named %q (grid token list shows them)", name))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// checkPolicy applies the controller's own policy to a submission: every
// action must be in its allow list (when it has one), and a dangerous
// action needs a role of dangerous_roles unless the job runs in check mode,
// which changes nothing. The error names the step and the action.
func (c *Controller) checkPolicy(cat *api.Catalog, j *api.Job, p principal) error {
	for _, s := range api.Flatten(j.Tasks) {
		t := s.Task
		b, _ := cat.Backend(t.Backend)
		a, _ := b.Action(t.Action)
		if c.allow != nil && !c.allow.Allows(t.Backend, api.ActionSchema{Name: t.Action}) {
			return fmt.Errorf("%s: %s is not in this controller's allow list (allow: %s); an admin can add it to the controller's config",
				s.Path, t.Name(), strings.Join(c.cfg.Allow, ", "))
		}
		if a.Dangerous && !j.CheckMode && !slices.Contains(c.cfg.DangerousRoles, p.Role) {
			return fmt.Errorf("%s: %s is a dangerous action: only tokens with role %s may submit it, and %s has role %s. "+
				"Run it in check mode to preview it, or ask an admin", s.Path, t.Name(), joinRoles(c.cfg.DangerousRoles), p.who(), p.Role)
		}
	}
	return nil
}

// policyAtStart checks a job's policy again when it starts, against the
// schemas of the nodes it resolved to and its submitter's role now. At
// submit the check saw the nodes online then: a job whose target had no
// honest node online (a dangerous action declared not dangerous by a node
// that lies, or by none at all) must not run a dangerous action on the
// real nodes that come up later, nor run for a token revoked meanwhile
// with more than it may.
func (c *Controller) policyAtStart(j *api.Job) error {
	var sets [][]api.BackendSchema
	for _, nc := range c.reg.catalogsOf(j.Expected) {
		sets = append(sets, nc.cat.Backends)
	}
	cat := &api.Catalog{Backends: api.MergeSchemas(sets...)}
	return c.checkPolicy(cat, j, c.submitter(j.SubmittedBy))
}

// submitter is who a stored job was submitted as, with the role its token
// has now (none when it is gone or revoked).
func (c *Controller) submitter(name string) principal {
	if name == anonymousName && c.cfg.Insecure && c.cfg.AnonymousRole != "" {
		return principal{Name: name, Role: c.cfg.AnonymousRole, Anonymous: true}
	}
	te, ok := c.tokens.get(name)
	if !ok || te.rec.RevokedAt != nil {
		return principal{Name: name}
	}
	return principal{Name: te.rec.Name, Role: te.rec.Role}
}

func joinRoles(rs []api.Role) string {
	if len(rs) == 0 {
		return "(none: dangerous_roles is empty)"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// parseAllow reads the controller's allow list; none allows every action
// online nodes offer.
func parseAllow(entries []string) (*backends.Allowlist, error) {
	return backends.ParseAllowlist(entries)
}
