package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Role is what an API token may do. Roles are ordered: each includes what
// the ones below it may do.
type Role string

// API roles, weakest first.
const (
	// RoleMetrics may only scrape GET /metrics.
	RoleMetrics Role = "metrics"
	// RoleRead may call every GET route: jobs, nodes, status, backends.
	RoleRead Role = "read"
	// RoleOperator may also submit, cancel and retry jobs.
	RoleOperator Role = "operator"
	// RoleAdmin may also manage tokens and nodes, read the audit trail
	// (GET /audit), and submit dangerous actions (see the controller's
	// dangerous_roles).
	RoleAdmin Role = "admin"
)

// Roles lists every role, weakest first.
var Roles = []Role{RoleMetrics, RoleRead, RoleOperator, RoleAdmin}

func (r Role) rank() int {
	for i, x := range Roles {
		if x == r {
			return i + 1
		}
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Includes reports whether a token with role r may do what need allows.
func (r Role) Includes(need Role) bool { return r.Valid() && r.rank() >= need.rank() }

// ParseRole reads a role name and says which ones exist when it is none.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if !r.Valid() {
		names := make([]string, len(Roles))
		for i, x := range Roles {
			names[i] = string(x)
		}
		return "", fmt.Errorf("role %q: want one of %s", s, strings.Join(names, ", "))
	}
	return r, nil
}

// TokenInfo describes an API token; the token itself is never stored or
// shown after creation.
type TokenInfo struct {
	Name      string     `json:"name"`
	Role      Role       `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
}

// TokenRequest asks POST /token for a new token.
type TokenRequest struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
}

// NewToken is the answer to POST /token: the only time the token is shown.
type NewToken struct {
	TokenInfo
	Token string `json:"token"`
}

// CreateToken asks the controller for a new token (admin role).
func (c *Client) CreateToken(ctx context.Context, name string, role Role) (*NewToken, error) {
	var out NewToken
	if err := c.do(ctx, http.MethodPost, "/token", TokenRequest{Name: name, Role: role}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTokens lists every token, revoked ones included (admin role).
func (c *Client) ListTokens(ctx context.Context) ([]TokenInfo, error) {
	var out []TokenInfo
	return out, c.do(ctx, http.MethodGet, "/tokens", nil, &out)
}

// RevokeToken revokes a token by name on every controller (admin role).
func (c *Client) RevokeToken(ctx context.Context, name string) (*TokenInfo, error) {
	var out TokenInfo
	if err := c.do(ctx, http.MethodDelete, "/token/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
