package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// BucketJoinTokens holds the scoped join tokens keyed by name (SHA-256 of
// the token, groups, expiry, uses). Only controllers may read or write it.
const BucketJoinTokens = "join_tokens"

// JoinTokenPrefix starts every scoped join token: "gridjoin_<name>.<secret>".
// The name lets a controller find the record at once; the secret is what
// proves the holder (only its SHA-256 is stored).
const JoinTokenPrefix = "gridjoin_"

// JoinTokenName returns the name a scoped join token carries, or false
// when tok is not shaped like one (the data dir's unscoped token is not).
func JoinTokenName(tok string) (string, bool) {
	rest, ok := strings.CutPrefix(tok, JoinTokenPrefix)
	if !ok {
		return "", false
	}
	name, secret, ok := strings.Cut(rest, ".")
	if !ok || secret == "" || !ValidToken(name) {
		return "", false
	}
	return name, true
}

// JoinTokenInfo describes a scoped join token; the token itself is shown
// only once, when it is made.
type JoinTokenInfo struct {
	Name string `json:"name"`
	// Groups the token may enroll agents into, each with its sub-groups
	// ("web" allows web and web.prod); none: any group.
	Groups []string `json:"groups,omitempty"`
	// Site, when set, is the only site the token enrolls through (its
	// relay); empty: any, the hub included.
	Site      string     `json:"site,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
	Uses      int        `json:"uses"`
	Used      int        `json:"used"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
}

// GroupAllowed reports whether a token scoped to scope may enroll into
// group g: g is one of them or a sub-group of one; an empty scope allows
// any group.
func GroupAllowed(scope []string, g string) bool {
	if len(scope) == 0 {
		return true
	}
	for _, s := range scope {
		if g == s || strings.HasPrefix(g, s+".") {
			return true
		}
	}
	return false
}

// JoinTokenRequest asks POST /join-token for a new scoped join token.
type JoinTokenRequest struct {
	// Name is optional: the controller picks one when empty.
	Name   string   `json:"name,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Site limits the token to enrollments through that site's relay.
	Site string   `json:"site,omitempty"`
	TTL  Duration `json:"ttl"`
	Uses int      `json:"uses"`
}

// NewJoinToken answers POST /join-token: the only time the token is shown.
type NewJoinToken struct {
	JoinTokenInfo
	Token string `json:"token"`
}

// CreateJoinToken makes a scoped join token (admin role).
func (c *Client) CreateJoinToken(ctx context.Context, req JoinTokenRequest) (*NewJoinToken, error) {
	var out NewJoinToken
	if err := c.do(ctx, http.MethodPost, "/join-token", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListJoinTokens lists the scoped join tokens, revoked and expired ones
// included (admin role).
func (c *Client) ListJoinTokens(ctx context.Context) ([]JoinTokenInfo, error) {
	var out []JoinTokenInfo
	return out, c.do(ctx, http.MethodGet, "/join-tokens", nil, &out)
}

// RevokeJoinToken revokes a scoped join token by name (admin role).
func (c *Client) RevokeJoinToken(ctx context.Context, name string) (*JoinTokenInfo, error) {
	var out JoinTokenInfo
	if err := c.do(ctx, http.MethodDelete, "/join-token/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
