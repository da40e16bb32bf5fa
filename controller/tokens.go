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
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// AdminTokenFile is the file in the data dir holding the admin token a
// controller made at its first start.
const AdminTokenFile = "admin-token"

// tokenPrefix marks GRID API tokens, so one pasted in the wrong place is
// recognisable (and secret scanners can look for it).
const tokenPrefix = "grid_"

// tokenRecord is one token as stored in the tokens bucket, keyed by name.
type tokenRecord struct {
	api.TokenInfo
	// SHA256 is the hex SHA-256 of the token. Tokens are 32 bytes from
	// crypto/rand, so there is nothing to guess and nothing a slow password
	// hash would protect better; a fast hash keeps the check on every
	// request cheap. The token itself is never stored.
	SHA256 string `json:"sha256"`
}

// tokenEntry is a record in memory, its hash decoded.
type tokenEntry struct {
	rec  tokenRecord
	hash [sha256.Size]byte
	rev  uint64
}

// tokenStore keeps the tokens bucket in memory, following it with a watch
// so that a token made or revoked through any controller counts on every
// controller at once.
type tokenStore struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu     sync.RWMutex
	byName map[string]*tokenEntry
}

// newToken returns a fresh random token.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func hashToken(tok string) [sha256.Size]byte { return sha256.Sum256([]byte(tok)) }

// openTokens loads the bucket and follows it until ctx ends, from a
// goroutine counted in wg.
func openTokens(ctx context.Context, wg *sync.WaitGroup, kv jetstream.KeyValue, log *slog.Logger) (*tokenStore, error) {
	s := &tokenStore{kv: kv, log: log, byName: map[string]*tokenEntry{}}
	// Serve nothing before the stored tokens are loaded.
	if err := followLoaded(ctx, wg, kv, log, "tokens", s.applyEntry); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *tokenStore) applyEntry(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		if cur := s.byName[e.Key()]; cur != nil && cur.rev < e.Revision() {
			delete(s.byName, e.Key())
		}
		s.mu.Unlock()
		return
	}
	var rec tokenRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		s.log.Warn("unreadable token record ignored", "name", e.Key(), "err", err)
		return
	}
	s.apply(rec, e.Revision())
}

// apply records a token at a bucket revision, unless a newer one is known:
// a controller applies its own writes at once and the watch repeats them.
func (s *tokenStore) apply(rec tokenRecord, rev uint64) {
	raw, err := hex.DecodeString(rec.SHA256)
	if err != nil || len(raw) != sha256.Size {
		s.log.Warn("token record without a valid hash ignored", "name", rec.Name)
		return
	}
	te := &tokenEntry{rec: rec, rev: rev}
	copy(te.hash[:], raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.byName[rec.Name]; cur != nil && cur.rev >= rev {
		return
	}
	s.byName[rec.Name] = te
}

// lookup finds the token's record. Every stored hash is compared, in
// constant time, so how long the check takes says nothing about which
// token, or how much of one, matched.
func (s *tokenStore) lookup(tok string) (tokenRecord, bool) {
	h := hashToken(tok)
	s.mu.RLock()
	defer s.mu.RUnlock()
	var found *tokenEntry
	for _, te := range s.byName {
		if subtle.ConstantTimeCompare(te.hash[:], h[:]) == 1 {
			found = te
		}
	}
	if found == nil {
		return tokenRecord{}, false
	}
	return found.rec, true
}

func (s *tokenStore) get(name string) (*tokenEntry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	te, ok := s.byName[name]
	return te, ok
}

// list returns every token's description, sorted by name.
func (s *tokenStore) list() []api.TokenInfo {
	s.mu.RLock()
	out := make([]api.TokenInfo, 0, len(s.byName))
	for _, te := range s.byName {
		out = append(out, te.rec.TokenInfo)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// errTokenExists says a live token already has the name.
var errTokenExists = errors.New("token exists")

// create stores a new token under name. A revoked token's name may be
// reused; a live one's may not.
func (s *tokenStore) create(ctx context.Context, name string, role api.Role, by, tok string) (api.TokenInfo, error) {
	h := hashToken(tok)
	rec := tokenRecord{TokenInfo: api.TokenInfo{Name: name, Role: role, CreatedAt: time.Now().UTC(), CreatedBy: by},
		SHA256: hex.EncodeToString(h[:])}
	data, err := json.Marshal(rec)
	if err != nil {
		return api.TokenInfo{}, err
	}
	rev, err := s.kv.Create(ctx, name, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		cur, gerr := s.kv.Get(ctx, name)
		if gerr != nil {
			return api.TokenInfo{}, fmt.Errorf("read token %s: %w", name, gerr)
		}
		var old tokenRecord
		if json.Unmarshal(cur.Value(), &old) == nil && old.RevokedAt == nil {
			return api.TokenInfo{}, fmt.Errorf("%w: %s", errTokenExists, name)
		}
		rev, err = s.kv.Update(ctx, name, data, cur.Revision())
	}
	if err != nil {
		return api.TokenInfo{}, fmt.Errorf("store token %s: %w", name, err)
	}
	s.apply(rec, rev)
	return rec.TokenInfo, nil
}

// revoke marks a token revoked. The record (with its hash) stays, so a
// revoked token is told apart from an unknown one, and list shows who
// revoked it when.
func (s *tokenStore) revoke(ctx context.Context, name, by string) (api.TokenInfo, error) {
	for {
		cur, err := s.kv.Get(ctx, name)
		if err != nil {
			return api.TokenInfo{}, err
		}
		var rec tokenRecord
		if err := json.Unmarshal(cur.Value(), &rec); err != nil {
			return api.TokenInfo{}, fmt.Errorf("read token %s: %w", name, err)
		}
		if rec.RevokedAt != nil {
			return rec.TokenInfo, nil
		}
		now := time.Now().UTC()
		rec.RevokedAt, rec.RevokedBy = &now, by
		data, err := json.Marshal(rec)
		if err != nil {
			return api.TokenInfo{}, err
		}
		rev, err := s.kv.Update(ctx, name, data, cur.Revision())
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // changed since read: look again
		}
		if err != nil {
			return api.TokenInfo{}, fmt.Errorf("revoke token %s: %w", name, err)
		}
		s.apply(rec, rev)
		return rec.TokenInfo, nil
	}
}

// ensureAdminToken makes sure the data dir holds an admin token the cluster
// honours, and returns it. The first start writes a new one (0600); later
// starts reuse it. Its record is named "admin", or "admin-<controller>"
// when another controller of the cluster has that name. A revoked admin
// token stays revoked: delete the file and restart for a new one.
func (c *Controller) ensureAdminToken(ctx context.Context) (string, error) {
	path := filepath.Join(c.cfg.DataDir, AdminTokenFile)
	if b, err := os.ReadFile(path); err == nil {
		tok := strings.TrimSpace(string(b))
		if strings.HasPrefix(tok, tokenPrefix) {
			if rec, ok := c.tokens.lookup(tok); ok {
				if rec.RevokedAt != nil {
					c.log.Warn("the admin token in the data dir was revoked; delete the file and restart for a new one",
						"file", path, "name", rec.Name)
				}
				return tok, nil
			}
			// Not in the bucket (a new NATS store): register it again.
			return tok, c.registerAdmin(ctx, tok)
		}
		c.log.Warn("ignoring a malformed admin token file; writing a new one", "file", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	tok := newToken()
	if err := os.MkdirAll(c.cfg.DataDir, 0o750); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	// Written before it is registered: a token in the bucket that no file
	// holds could never be used.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	if err := c.registerAdmin(ctx, tok); err != nil {
		return "", err
	}
	c.log.Info("wrote a new admin API token", "file", path)
	return tok, nil
}

// reservedTokenName reports whether a name is kept for the controllers'
// admin tokens, which a start must always be able to register.
func reservedTokenName(name string) bool {
	return name == "admin" || strings.HasPrefix(name, "admin-")
}

func (c *Controller) registerAdmin(ctx context.Context, tok string) error {
	var err error
	for _, name := range []string{"admin", "admin-" + c.id} {
		var info api.TokenInfo
		if info, err = c.tokens.create(ctx, name, api.RoleAdmin, c.id, tok); err == nil {
			c.log.Info("admin API token registered", "name", info.Name)
			return nil
		}
		if !errors.Is(err, errTokenExists) {
			break
		}
	}
	return fmt.Errorf("register the admin token: %w", err)
}
