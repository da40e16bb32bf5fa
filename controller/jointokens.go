package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Scoped join tokens (grid join-token create): each may enroll agents into
// some groups only, until it expires, a number of times. They live in the
// join_tokens bucket, hashed like API tokens; a use is counted by
// compare-and-swap on the record, so concurrent enrollments through any
// controllers never exceed its uses. The data dir's join-token file stays
// the unscoped token of the simple case.

// joinTokenRecord is a scoped join token as stored, keyed by name.
type joinTokenRecord struct {
	api.JoinTokenInfo
	// SHA256 is the hex SHA-256 of the whole token (see hashToken).
	SHA256 string `json:"sha256"`
}

// Bounds of a scoped join token.
const (
	joinTokenMaxTTL  = 366 * 24 * time.Hour
	joinTokenMaxUses = 100000
	// joinTokenKeep is how long a token that can no longer enroll anyone
	// (expired, used up, revoked) stays listed before a create prunes it.
	joinTokenKeep = 7 * 24 * time.Hour
)

// Refusals of a scoped join token. The holder of a genuine token learns
// which; nothing here says anything about node ids.
var (
	errJoinTokenRevoked = errors.New("the join token was revoked")
	errJoinTokenExpired = errors.New("the join token expired")
	errJoinTokenUsedUp  = errors.New("the join token is used up")
	errJoinTokenScope   = errors.New("the join token may not enroll into these groups")
	errJoinTokenGone    = errors.New("the join token no longer exists")
)

// joinTokens keeps the hashes of the scoped join tokens in memory (a watch
// on the bucket), so that telling a genuine token from a made-up one costs
// no bucket read; every decision that matters reads the record itself.
type joinTokens struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu     sync.RWMutex
	byName map[string]knownJoinToken
}

// knownJoinToken is what is kept in memory of a scoped token: its hash,
// and whether it may still enroll anyone (as last written).
type knownJoinToken struct {
	hash    [sha256.Size]byte
	expires time.Time
	dead    bool // revoked or used up
}

func openJoinTokens(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue, log *slog.Logger) (*joinTokens, error) {
	j := &joinTokens{kv: kv, log: log, byName: map[string]knownJoinToken{}}
	if err := followLoaded(ctx, wg, kv, log, "join tokens", j.apply); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *joinTokens) apply(e jetstream.KeyValueEntry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(j.byName, e.Key())
		return
	}
	var rec joinTokenRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		j.log.Warn("unreadable join token record ignored", "name", e.Key(), "err", err)
		return
	}
	raw, err := hex.DecodeString(rec.SHA256)
	if err != nil || len(raw) != sha256.Size {
		j.log.Warn("join token record without a valid hash ignored", "name", e.Key())
		return
	}
	j.byName[e.Key()] = knownJoinToken{hash: [sha256.Size]byte(raw), expires: rec.ExpiresAt,
		dead: rec.RevokedAt != nil || rec.Used >= rec.Uses}
}

// genuine reports whether tok is a scoped join token this cluster made
// (revoked, expired or used up or not), by its name and hash in memory.
func (j *joinTokens) genuine(tok string) (string, bool) {
	if j == nil {
		return "", false
	}
	name, ok := api.JoinTokenName(tok)
	if !ok {
		return "", false
	}
	h := hashToken(tok)
	j.mu.RLock()
	want, ok := j.byName[name]
	j.mu.RUnlock()
	return name, ok && subtle.ConstantTimeCompare(want.hash[:], h[:]) == 1
}

// live reports whether tok is a genuine scoped token that may still enroll
// someone as far as this controller knows (not revoked, expired or used
// up): only such a token vouches for a request (enroll_limit.go).
func (j *joinTokens) live(tok string, now time.Time) bool {
	name, ok := j.genuine(tok)
	if !ok {
		return false
	}
	j.mu.RLock()
	k := j.byName[name]
	j.mu.RUnlock()
	return !k.dead && now.Before(k.expires)
}

func newJoinToken(name string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return api.JoinTokenPrefix + name + "." + base64.RawURLEncoding.EncodeToString(b[:])
}

// usable says why a record cannot enroll into groups at now, or nil.
func (r *joinTokenRecord) usable(groups []string, site string, now time.Time) error {
	switch {
	case r.RevokedAt != nil:
		return errJoinTokenRevoked
	case !now.Before(r.ExpiresAt):
		return errJoinTokenExpired
	case r.Used >= r.Uses:
		return errJoinTokenUsedUp
	}
	if r.Site != "" && r.Site != site {
		return fmt.Errorf("%w: it enrolls through site %s only, not %s", errJoinTokenScope, r.Site, api.SiteOf(site))
	}
	for _, g := range groups {
		if !api.GroupAllowed(r.Groups, g) {
			return fmt.Errorf("%w: %s is outside %s (a token's groups include their sub-groups)", errJoinTokenScope, g, strings.Join(r.Groups, ", "))
		}
	}
	return nil
}

// read returns the stored record of a genuine token and its revision.
func (j *joinTokens) read(ctx context.Context, name, tok string) (*joinTokenRecord, uint64, error) {
	e, err := j.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errJoinTokenGone
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read join token: %w", err)
	}
	var rec joinTokenRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("stored join token %s: %w", name, err)
	}
	h := hashToken(tok)
	if subtle.ConstantTimeCompare([]byte(rec.SHA256), []byte(hex.EncodeToString(h[:]))) != 1 {
		return nil, 0, errJoinTokenGone // replaced by a token of the same name
	}
	return &rec, e.Revision(), nil
}

// check says whether the token may enroll into groups now, without using it.
func (j *joinTokens) check(ctx context.Context, name, tok string, groups []string, site string, now time.Time) error {
	rec, _, err := j.read(ctx, name, tok)
	if err != nil {
		return err
	}
	return rec.usable(groups, site, now)
}

// use counts one use of the token by compare-and-swap: of concurrent
// enrollments (through any controllers) at most uses succeed.
func (j *joinTokens) use(ctx context.Context, name, tok string, groups []string, site string, now time.Time) error {
	return j.update(ctx, name, tok, func(rec *joinTokenRecord) error {
		if err := rec.usable(groups, site, now); err != nil {
			return err
		}
		rec.Used++
		return nil
	})
}

// giveBack returns a use whose enrollment was not stored after all.
func (j *joinTokens) giveBack(ctx context.Context, name, tok string) {
	err := j.update(ctx, name, tok, func(rec *joinTokenRecord) error {
		if rec.Used > 0 {
			rec.Used--
		}
		return nil
	})
	if err != nil {
		j.log.Warn("could not give back a join token's use", "name", name, "err", err)
	}
}

func (j *joinTokens) update(ctx context.Context, name, tok string, change func(*joinTokenRecord) error) error {
	for range 20 {
		rec, rev, err := j.read(ctx, name, tok)
		if err != nil {
			return err
		}
		if err := change(rec); err != nil {
			return err
		}
		b, _ := json.Marshal(rec)
		if _, err = j.kv.Update(ctx, name, b, rev); err == nil {
			return nil
		}
		if !isRevisionConflict(err) {
			return fmt.Errorf("store join token: %w", err)
		}
		// Another enrollment used it meanwhile: read again.
	}
	return errEnrollConflict
}

// create stores a new token; a name in use is refused unless its token can
// no longer enroll anyone.
func (j *joinTokens) create(ctx context.Context, req api.JoinTokenRequest, by string, now time.Time) (*api.NewJoinToken, error) {
	j.prune(ctx, now)
	name := req.Name
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "join-" + hex.EncodeToString(b[:])
	}
	groups := slices.Clone(req.Groups)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	tok := newJoinToken(name)
	h := hashToken(tok)
	rec := joinTokenRecord{JoinTokenInfo: api.JoinTokenInfo{Name: name, Groups: groups, Site: req.Site, ExpiresAt: now.Add(time.Duration(req.TTL)),
		Uses: req.Uses, CreatedAt: now, CreatedBy: by}, SHA256: hex.EncodeToString(h[:])}
	b, _ := json.Marshal(rec)
	_, err := j.kv.Create(ctx, name, b)
	if isRevisionConflict(err) {
		cur, gerr := j.kv.Get(ctx, name)
		if gerr != nil {
			return nil, fmt.Errorf("read join token %s: %w", name, gerr)
		}
		var old joinTokenRecord
		if json.Unmarshal(cur.Value(), &old) == nil && old.usable(nil, old.Site, now) == nil {
			return nil, fmt.Errorf("%w: %s", errTokenExists, name)
		}
		_, err = j.kv.Update(ctx, name, b, cur.Revision())
	}
	if err != nil {
		return nil, fmt.Errorf("store join token %s: %w", name, err)
	}
	j.apply(putEntry{key: name, value: b})
	return &api.NewJoinToken{JoinTokenInfo: rec.JoinTokenInfo, Token: tok}, nil
}

// prune deletes records that could not enroll anyone for joinTokenKeep, so
// that the capped bucket does not fill up with dead tokens.
func (j *joinTokens) prune(ctx context.Context, now time.Time) {
	recs, err := j.records(ctx)
	if err != nil {
		return
	}
	for _, r := range recs {
		end := r.ExpiresAt
		if r.RevokedAt != nil && r.RevokedAt.Before(end) {
			end = *r.RevokedAt
		}
		if now.Sub(end) > joinTokenKeep {
			_ = j.kv.Delete(ctx, r.Name)
		}
	}
}

func (j *joinTokens) records(ctx context.Context) ([]joinTokenRecord, error) {
	lister, err := j.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	var out []joinTokenRecord
	for k := range lister.Keys() {
		e, err := j.kv.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		var rec joinTokenRecord
		if json.Unmarshal(e.Value(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

func (j *joinTokens) list(ctx context.Context) ([]api.JoinTokenInfo, error) {
	recs, err := j.records(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.JoinTokenInfo, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.JoinTokenInfo)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

func (j *joinTokens) revoke(ctx context.Context, name, by string) (*api.JoinTokenInfo, error) {
	for range 20 {
		e, err := j.kv.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		var rec joinTokenRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, fmt.Errorf("stored join token %s: %w", name, err)
		}
		if rec.RevokedAt != nil {
			return &rec.JoinTokenInfo, nil
		}
		now := time.Now().UTC()
		rec.RevokedAt, rec.RevokedBy = &now, by
		b, _ := json.Marshal(rec)
		if _, err := j.kv.Update(ctx, name, b, e.Revision()); err == nil {
			return &rec.JoinTokenInfo, nil
		} else if !isRevisionConflict(err) {
			return nil, fmt.Errorf("revoke join token %s: %w", name, err)
		}
	}
	return nil, errEnrollConflict
}

// putEntry is a put applied before the watch brings it back.
type putEntry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
}

func (p putEntry) Key() string                     { return p.key }
func (p putEntry) Value() []byte                   { return p.value }
func (p putEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// joinTokenOff answers the join-token routes where there is no enrollment.
func (c *Controller) joinTokenOff(w http.ResponseWriter) bool {
	if c.sec == nil || c.sec.joins == nil {
		writeError(w, http.StatusNotFound, errNoEnrollmentHere)
		return true
	}
	return false
}

// handleCreateJoinToken serves POST /join-token.
func (c *Controller) handleCreateJoinToken(w http.ResponseWriter, r *http.Request) {
	if c.joinTokenOff(w) {
		return
	}
	var req api.JoinTokenRequest
	d := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "join token request: "+err.Error())
		return
	}
	if req.Name != "" && !api.ValidToken(req.Name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q: use 1-128 letters, digits, '_' and '-'", req.Name))
		return
	}
	for i, g := range req.Groups {
		if !api.ValidGroup(g) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("groups[%d] %q is not a valid group", i, g))
			return
		}
	}
	if req.Site != "" && !api.ValidToken(req.Site) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("site %q: letters, digits, '_' and '-'", req.Site))
		return
	}
	if ttl := time.Duration(req.TTL); ttl <= 0 || ttl > joinTokenMaxTTL {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ttl %s: want more than 0 and at most %s", ttl, joinTokenMaxTTL))
		return
	}
	if req.Uses < 1 || req.Uses > joinTokenMaxUses {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("uses %d: want 1 to %d", req.Uses, joinTokenMaxUses))
		return
	}
	noteAudit(r, func(n *auditNote) {
		n.resource, n.params = req.Name, map[string]any{"groups": req.Groups, "site": req.Site, "ttl": time.Duration(req.TTL).String(), "uses": req.Uses}
	})
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	nt, err := c.sec.joins.create(ctx, req, principalFrom(r.Context()).Name, time.Now().UTC())
	switch {
	case errors.Is(err, errTokenExists):
		writeError(w, http.StatusConflict, fmt.Sprintf("a join token named %q can still enroll agents; revoke it first or pick another name", req.Name))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	noteAudit(r, func(n *auditNote) { n.resource = nt.Name })
	c.log.Info("join token created", "name", nt.Name, "groups", nt.Groups, "expires_at", nt.ExpiresAt, "uses", nt.Uses, "by", nt.CreatedBy)
	writeJSON(w, http.StatusCreated, nt)
}

// handleListJoinTokens serves GET /join-tokens.
func (c *Controller) handleListJoinTokens(w http.ResponseWriter, r *http.Request) {
	if c.joinTokenOff(w) {
		return
	}
	out, err := c.sec.joins.list(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// handleRevokeJoinToken serves DELETE /join-token/{name}.
func (c *Controller) handleRevokeJoinToken(w http.ResponseWriter, r *http.Request) {
	if c.joinTokenOff(w) {
		return
	}
	name := r.PathValue("name")
	info, err := c.sec.joins.revoke(r.Context(), name, principalFrom(r.Context()).Name)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no join token named %q (grid join-token list shows them)", name))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("join token revoked", "name", name, "by", info.RevokedBy)
	writeJSON(w, http.StatusOK, info)
}
