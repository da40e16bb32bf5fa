package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The audit stream: one record per action, chained by hash (see DESIGN.md,
// "Audit trail"). Only controllers write it; agents have no JetStream
// rights at all.
const (
	StreamAudit = "audit"
	// SubjectAudit is the one subject of the audit stream: a single
	// subject keeps one order, so each record can name the one before it.
	SubjectAudit = "audit.record"
)

// Audit actions: stable names, so that filters and exports keep meaning
// across versions.
const (
	AuditJobSubmit       = "job.submit"
	AuditJobCancel       = "job.cancel"
	AuditJobRetry        = "job.retry"
	AuditJobDelete       = "job.delete"
	AuditJobStart        = "job.start"
	AuditJobEnd          = "job.end"
	AuditDLQReplay       = "dlq.replay"
	AuditDLQDrop         = "dlq.drop"
	AuditNodeRemove      = "node.remove"
	AuditNodeApprove     = "node.approve"
	AuditNodeRevoke      = "node.revoke"
	AuditNodeEnroll      = "node.enroll"
	AuditTokenCreate     = "token.create"
	AuditTokenRevoke     = "token.revoke"
	AuditJoinTokenCreate = "join_token.create"
	AuditJoinTokenRevoke = "join_token.revoke"
	AuditSiteCreate      = "site.create"
	AuditSiteRevoke      = "site.revoke"
	AuditScheduleCreate  = "schedule.create"
	AuditScheduleUpdate  = "schedule.update"
	AuditSchedulePause   = "schedule.pause"
	AuditScheduleResume  = "schedule.resume"
	AuditScheduleDelete  = "schedule.delete"
	AuditScheduleTick    = "schedule.tick"
	AuditScheduleSkip    = "schedule.tick_skipped"
	AuditAuthDenied      = "auth.denied"
	AuditAuthFailed      = "auth.failed"
)

// AuditRecord is one entry of the audit trail. The JSON field names are
// stable: exports (JSON lines) and GET /audit use them.
type AuditRecord struct {
	// Seq is the record's place in the chain: the audit stream's sequence.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Actor is the API token's name ("anonymous" for a lab's requests
	// without a token, "" for an unknown token), or "controller:<id>" for
	// what a controller does by itself (a schedule's tick, a job's end).
	Actor string `json:"actor"`
	Role  Role   `json:"role,omitempty"`
	// Action is one of the Audit* names.
	Action string `json:"action"`
	// Route is the API call ("POST /job/{id}/cancel"), empty for what a
	// controller does by itself.
	Route string `json:"route,omitempty"`
	// Resource is what the action touched: a job id, node id, schedule id
	// or token name.
	Resource string `json:"resource,omitempty"`
	// Job and Node repeat the resource when it is one, for filtering.
	Job  string `json:"job,omitempty"`
	Node string `json:"node,omitempty"`
	// Outcome is the HTTP status the API answered (0 for what a
	// controller does by itself).
	Outcome int `json:"outcome,omitempty"`
	// Params are the request's parameters, sensitive values redacted.
	Params json.RawMessage `json:"params,omitempty"`
	// Summary counts a finished job's nodes by outcome (job.end).
	Summary *JobSummary `json:"summary,omitempty"`
	// Detail is a short free text: a job's status, why a tick was
	// skipped, how many failed authentications were dropped.
	Detail string `json:"detail,omitempty"`
	// Remote is the address an API call came from.
	Remote string `json:"remote,omitempty"`
	// Controller is the controller that wrote the record.
	Controller string `json:"controller,omitempty"`
	// PrevHash is the Hash of the record before (Seq-1); empty for the
	// first record ever written.
	PrevHash string `json:"prev_hash"`
	// Hash is the SHA-256 (hex) of the record encoded with Hash empty.
	Hash string `json:"hash"`
}

// ComputeHash is the hash the record should carry: SHA-256 of its JSON
// encoding with Hash empty (Go's encoding of a struct is in field order,
// and Params are compacted, so the bytes are the same wherever computed).
func (r AuditRecord) ComputeHash() (string, error) {
	r.Hash = ""
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode audit record %d: %w", r.Seq, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// AuditBreak is the first broken link of a chain.
type AuditBreak struct {
	// Seq is the record where the chain breaks (or, for a gap, the first
	// record after it).
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

func (b *AuditBreak) Error() string {
	return fmt.Sprintf("audit chain broken at seq %d: %s", b.Seq, b.Reason)
}

// AuditChain checks records in order, one link at a time. The first record
// it sees is trusted as the chain's start (earlier ones may have expired
// after audit_retention); every later one must follow it without a gap,
// name its hash, and carry its own correct hash.
type AuditChain struct {
	// First and Last are the seqs seen; Count how many records.
	First, Last uint64
	LastHash    string
	Count       int
}

// Next checks one more record; the error is an *AuditBreak.
func (c *AuditChain) Next(r AuditRecord) error {
	h, err := r.ComputeHash()
	if err != nil {
		return &AuditBreak{Seq: r.Seq, Reason: err.Error()}
	}
	if h != r.Hash {
		return &AuditBreak{Seq: r.Seq, Reason: fmt.Sprintf("its hash %.12s… does not match its content (%.12s…): the record was edited", r.Hash, h)}
	}
	if c.Count > 0 {
		if r.Seq <= c.Last {
			return &AuditBreak{Seq: r.Seq, Reason: fmt.Sprintf("comes after seq %d: a record was slipped in, or the chain reordered", c.Last)}
		}
		if r.Seq != c.Last+1 {
			return &AuditBreak{Seq: r.Seq, Reason: fmt.Sprintf("follows seq %d: records %d to %d are missing", c.Last, c.Last+1, r.Seq-1)}
		}
		if r.PrevHash != c.LastHash {
			return &AuditBreak{Seq: r.Seq, Reason: fmt.Sprintf("its prev_hash %.12s… is not the hash of record %d (%.12s…): a record was replaced", r.PrevHash, c.Last, c.LastHash)}
		}
	} else {
		c.First = r.Seq
	}
	c.Last, c.LastHash = r.Seq, r.Hash
	c.Count++
	return nil
}

// AuditQuery filters GET /audit. Zero fields filter nothing.
type AuditQuery struct {
	Since, Until time.Time
	Actor        string
	Action       string
	Node         string
	Job          string
	// After is the cursor: records with a greater seq (the last seq of the
	// previous page).
	After uint64
	// Limit is the page size (the controller's default when 0).
	Limit int
}

// Values encodes the query for GET /audit.
func (q AuditQuery) Values() url.Values {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	for k, s := range map[string]string{"actor": q.Actor, "action": q.Action, "node": q.Node, "job": q.Job} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.After > 0 {
		v.Set("cursor", strconv.FormatUint(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// AuditPage is one answer of GET /audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// Next is the cursor of the next page; 0 when this is the last.
	Next uint64 `json:"next,omitempty"`
}

// ListAudit reads one page of the audit trail (admin role).
func (c *Client) ListAudit(ctx context.Context, q AuditQuery) (*AuditPage, error) {
	var out AuditPage
	if err := c.do(ctx, http.MethodGet, "/audit?"+q.Values().Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EachAudit calls fn for every record the query matches, page by page, in
// order, until fn returns an error.
func (c *Client) EachAudit(ctx context.Context, q AuditQuery, fn func(AuditRecord) error) error {
	for {
		p, err := c.ListAudit(ctx, q)
		if err != nil {
			return err
		}
		for _, r := range p.Records {
			if err := fn(r); err != nil {
				return err
			}
		}
		if p.Next == 0 {
			return nil
		}
		q.After = p.Next
	}
}
