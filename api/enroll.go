package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// BucketEnrollments holds agent enrollments keyed by node id. Only
// controllers may read or write it.
const BucketEnrollments = "enrollments"

// SubjectEnrollAll is what controllers answer enrollment requests on.
const SubjectEnrollAll = "grid.enroll.*"

// EnrollSubject is where the holder of an NKey asks to be enrolled (or how
// its enrollment stands): grid.enroll.<public key>. The server lets a
// connection publish only on its own key's subject, so the subject names
// the sender.
func EnrollSubject(publicKey string) string { return "grid.enroll." + publicKey }

// EnrollKey is the public key an enrollment subject names.
func EnrollKey(subject string) string { return strings.TrimPrefix(subject, "grid.enroll.") }

// AgentInboxPrefix is the reply-subject prefix of an agent's connection:
// each agent may subscribe only to its own replies.
func AgentInboxPrefix(publicKey string) string { return "_INBOX." + publicKey }

// EnrollConnName starts the client name of an agent's enrollment
// connection.
const EnrollConnName = "grid-agent-enroll "

// Enrollment statuses.
const (
	EnrollPending  = "pending"
	EnrollAdmitted = "admitted"
	EnrollRevoked  = "revoked"
)

// Enrollment binds an agent's public NKey to its node id and groups.
type Enrollment struct {
	NodeID    string   `json:"node_id"`
	PublicKey string   `json:"public_key"`
	Groups    []string `json:"groups,omitempty"`
	Status    string   `json:"status"`
	// Site is the site the node enrolled through: a relay's site, or empty
	// for the hub's own agents (DefaultSite). A node id stays at its site:
	// enrolling it through another site is refused.
	Site string `json:"site,omitempty"`
	// RevokedKeys are earlier keys of this node id, refused for good.
	RevokedKeys []string  `json:"revoked_keys,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
}

// EnrollRequest is what an agent sends on its EnrollSubject.
type EnrollRequest struct {
	NodeID string   `json:"node_id"`
	Groups []string `json:"groups,omitempty"`
	// Token is the join token; an agent already admitted with the same
	// node id and groups needs none.
	Token string `json:"token,omitempty"`
}

// EnrollReply answers an EnrollRequest: the enrollment's status, or why it
// was refused.
type EnrollReply struct {
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// Site is the node's site (SiteOf), whose broadcasts the agent hears.
	Site string `json:"site,omitempty"`
}

// ListEnrollments returns agent enrollments; status filters ("" for all).
func (c *Client) ListEnrollments(ctx context.Context, status string) ([]Enrollment, error) {
	path := "/enrollments"
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	var out []Enrollment
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// ApproveNode admits a pending agent.
func (c *Client) ApproveNode(ctx context.Context, id string) (*Enrollment, error) {
	var out Enrollment
	if err := c.do(ctx, http.MethodPost, "/enrollments/"+url.PathEscape(id)+"/approve", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeNode refuses an agent from now on and disconnects it.
func (c *Client) RevokeNode(ctx context.Context, id string) (*Enrollment, error) {
	var out Enrollment
	if err := c.do(ctx, http.MethodPost, "/enrollments/"+url.PathEscape(id)+"/revoke", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
