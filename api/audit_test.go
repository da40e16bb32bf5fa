package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// chainOf builds n linked records.
func chainOf(t *testing.T, n int) []AuditRecord {
	t.Helper()
	var out []AuditRecord
	prev := ""
	for i := range n {
		r := AuditRecord{Seq: uint64(i + 1), Time: time.Date(2026, 1, 2, 3, 4, i, 0, time.UTC), Actor: "alice", Action: AuditJobSubmit,
			Params: json.RawMessage(`{"b": 1,  "a": "<x>"}`), PrevHash: prev}
		h, err := r.ComputeHash()
		if err != nil {
			t.Fatal(err)
		}
		r.Hash, prev = h, h
		out = append(out, r)
	}
	return out
}

// AuditChain names the first broken link, whatever the edit; a record read
// back from JSON (as GET /audit and an export give it) keeps its hash.
func TestAuditChain(t *testing.T) {
	for _, c := range []struct {
		name   string
		edit   func([]AuditRecord) []AuditRecord
		broken uint64
		reason string
	}{
		{"intact", func(rs []AuditRecord) []AuditRecord { return rs }, 0, ""},
		{"field edited", func(rs []AuditRecord) []AuditRecord { rs[2].Outcome = 200; return rs }, 3, "edited"},
		{"params edited", func(rs []AuditRecord) []AuditRecord { rs[1].Params = json.RawMessage(`{"b":2}`); return rs }, 2, "edited"},
		{"rehashed", func(rs []AuditRecord) []AuditRecord {
			rs[2].Actor = "mallory"
			rs[2].Hash, _ = rs[2].ComputeHash()
			return rs
		}, 4, "replaced"},
		{"removed", func(rs []AuditRecord) []AuditRecord { return append(rs[:2], rs[3:]...) }, 4, "missing"},
		{"repeated", func(rs []AuditRecord) []AuditRecord { return append(rs[:3], rs[2:]...) }, 3, "slipped in"},
		{"older ones expired", func(rs []AuditRecord) []AuditRecord { return rs[2:] }, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := c.edit(chainOf(t, 5))
			var ch AuditChain
			var err error
			for _, r := range recs {
				b, merr := json.MarshalIndent(r, "", "  ")
				if merr != nil {
					t.Fatal(merr)
				}
				var back AuditRecord
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				if err = ch.Next(back); err != nil {
					break
				}
			}
			if c.broken == 0 {
				if err != nil {
					t.Fatalf("want intact, got %v", err)
				}
				return
			}
			br, ok := err.(*AuditBreak)
			if !ok || br.Seq != c.broken || !strings.Contains(br.Reason, c.reason) {
				t.Fatalf("got %v, want broken at %d (%s)", err, c.broken, c.reason)
			}
		})
	}
}

func TestAuditQueryValues(t *testing.T) {
	q := AuditQuery{Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Actor: "terraform", Job: "job-1", After: 42, Limit: 10}
	if got := q.Values().Encode(); got != "actor=terraform&cursor=42&job=job-1&limit=10&since=2026-01-02T02%3A04%3A05Z" {
		t.Fatalf("got %s", got)
	}
	if got := (AuditQuery{}).Values().Encode(); got != "" {
		t.Fatalf("empty query: %q", got)
	}
}
