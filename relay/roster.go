package relay

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// roster is the relay's copy of its site's enrollments, by public key:
// what the relay decides each agent connection's rights from, exactly as
// a controller decides from its enrollments bucket.
type roster struct {
	site string
	log  *slog.Logger

	mu     sync.RWMutex
	byKey  map[string]api.Enrollment
	counts rosterCounts
}

// rosterCounts is what the log says of a roster.
type rosterCounts struct{ admitted, pending, revoked int }

func newRoster(site string, log *slog.Logger) *roster {
	return &roster{site: site, log: log, byKey: map[string]api.Enrollment{}}
}

// admitted returns the enrollment of an admitted key, its Site set to the
// relay's site.
func (r *roster) admitted(key string) (api.Enrollment, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.byKey[key]
	if !ok || e.Status != api.EnrollAdmitted {
		return api.Enrollment{}, false
	}
	return e, true
}

// knows reports whether key is, or was, enrolled at the site (its
// enrollment requests are not a stranger's).
func (r *roster) knows(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.byKey[key]
	return ok
}

// keyChange is a key whose connections must be closed because the rights
// they were given no longer hold: all of them, or, for a key just
// admitted, all but its enrollment connection (which waits for the
// answer and may only ask anyway).
type keyChange struct {
	key           string
	keepEnrolling bool
}

// replace installs the hub's list of the site's enrollments and returns
// the keys whose connections hold rights the new roster does not give.
// Enrollments that do not belong to the site or are malformed are left
// out: the relay gives rights only to what it can check.
func (r *roster) replace(list []api.Enrollment) []keyChange {
	next := map[string]api.Enrollment{}
	var counts rosterCounts
	for _, e := range list {
		if err := r.valid(e); err != nil {
			r.log.Warn("ignoring an enrollment of the roster", "node", e.NodeID, "err", err)
			continue
		}
		e.Site = r.site
		e.Groups = slices.Clone(e.Groups)
		if prev, dup := next[e.PublicKey]; dup {
			// The hub binds a key to one node id; two are a record to
			// distrust, so neither gets an agent's rights.
			r.log.Warn("two enrollments of the roster name one key; admitting neither", "nodes", []string{prev.NodeID, e.NodeID}, "key", e.PublicKey)
			prev.Status = api.EnrollPending
			next[e.PublicKey] = prev
			continue
		}
		next[e.PublicKey] = e
	}
	// Earlier keys of a node id are known (revoked), so that their
	// requests are not counted as a stranger's.
	for _, e := range list {
		if r.valid(e) != nil {
			continue
		}
		for _, k := range e.RevokedKeys {
			if _, ok := next[k]; !ok && nkeys.IsValidPublicUserKey(k) {
				next[k] = api.Enrollment{NodeID: e.NodeID, PublicKey: k, Status: api.EnrollRevoked, Site: r.site}
			}
		}
	}
	for _, e := range next {
		switch e.Status {
		case api.EnrollAdmitted:
			counts.admitted++
		case api.EnrollPending:
			counts.pending++
		default:
			counts.revoked++
		}
	}
	r.mu.Lock()
	prev := r.byKey
	prevCounts := r.counts
	r.byKey, r.counts = next, counts
	r.mu.Unlock()
	if counts != prevCounts {
		r.log.Info("site roster", "admitted", counts.admitted, "pending", counts.pending, "revoked", counts.revoked)
	}
	return diffRosters(prev, next)
}

// diffRosters lists the keys whose connections must go: an admitted key
// no longer admitted, or admitted as another node or with other groups;
// and a key just admitted (its connections were given only the right to
// enroll).
func diffRosters(prev, next map[string]api.Enrollment) []keyChange {
	var out []keyChange
	for k, p := range prev {
		n, ok := next[k]
		was := p.Status == api.EnrollAdmitted
		is := ok && n.Status == api.EnrollAdmitted
		if was && (!is || n.NodeID != p.NodeID || !slices.Equal(n.Groups, p.Groups)) {
			out = append(out, keyChange{key: k})
		}
	}
	for k, n := range next {
		if n.Status != api.EnrollAdmitted {
			continue
		}
		if p, ok := prev[k]; !ok || p.Status != api.EnrollAdmitted {
			out = append(out, keyChange{key: k, keepEnrolling: true})
		}
	}
	slices.SortFunc(out, func(a, b keyChange) int {
		if a.key < b.key {
			return -1
		}
		if a.key > b.key {
			return 1
		}
		return 0
	})
	return out
}

func (r *roster) valid(e api.Enrollment) error {
	if api.SiteOf(e.Site) != r.site {
		return fmt.Errorf("enrolled at site %q, not %q", api.SiteOf(e.Site), r.site)
	}
	if !nkeys.IsValidPublicUserKey(e.PublicKey) {
		return fmt.Errorf("public key %q is not an NKey user key", e.PublicKey)
	}
	if !api.ValidToken(e.NodeID) {
		return fmt.Errorf("node id %q is not valid", e.NodeID)
	}
	for _, g := range e.Groups {
		if !api.ValidGroup(g) {
			return fmt.Errorf("group %q is not valid", g)
		}
	}
	return nil
}

// rosterCache keeps the last roster the hub sent in the data dir; a
// zero dir keeps nothing. The file carries a MAC keyed from the site's
// seed: whoever can write the data dir but not read the credential could
// otherwise admit keys of their own, as any node of the site, on the
// relay's next start.
type rosterCache struct {
	dir string
	key []byte
}

// cacheKey is the roster cache's MAC key, derived from the site's seed so
// that it is on no disk of its own.
func cacheKey(seed string) []byte {
	m := hmac.New(sha256.New, []byte(seed))
	m.Write([]byte("grid relay roster cache"))
	return m.Sum(nil)
}

// cachedRoster is the cache file: the roster as the relay wrote it and
// its MAC.
type cachedRoster struct {
	Roster json.RawMessage `json:"roster"`
	MAC    []byte          `json:"mac"`
}

func (c rosterCache) mac(b []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write(b)
	return m.Sum(nil)
}

func (c rosterCache) path() string { return filepath.Join(c.dir, RosterFile) }

// load returns the cached roster of site; ok is false when there is none.
func (c rosterCache) load(site string) (api.SiteRoster, bool, error) {
	if c.dir == "" {
		return api.SiteRoster{}, false, nil
	}
	b, err := c.read()
	if errors.Is(err, os.ErrNotExist) {
		return api.SiteRoster{}, false, nil
	}
	if err != nil {
		return api.SiteRoster{}, false, fmt.Errorf("roster cache: %w", err)
	}
	var cr cachedRoster
	if err := json.Unmarshal(b, &cr); err != nil {
		return api.SiteRoster{}, false, fmt.Errorf("roster cache %s: %w", c.path(), err)
	}
	if !hmac.Equal(cr.MAC, c.mac(cr.Roster)) {
		return api.SiteRoster{}, false, fmt.Errorf("roster cache %s was not written by this site's relay (or was changed since): "+
			"not used; the relay waits for the hub's roster and replaces it", c.path())
	}
	var sr api.SiteRoster
	if err := json.Unmarshal(cr.Roster, &sr); err != nil {
		return api.SiteRoster{}, false, fmt.Errorf("roster cache %s: %w", c.path(), err)
	}
	if sr.Site != site {
		return api.SiteRoster{}, false, fmt.Errorf("roster cache %s is site %q's, not %q: remove it or use another data dir", c.path(), sr.Site, site)
	}
	return sr, true, nil
}

// maxRosterCache bounds the cache read: a roster comes in one message of
// the hub (at most its 8 MiB payload).
const maxRosterCache = 16 << 20

// read reads the cache file, which must be a regular file of at most
// maxRosterCache bytes: whoever can write the data dir could otherwise
// put a FIFO there (the read would wait forever) or a link to an endless
// device (it would take all memory), and the relay would never start.
func (c rosterCache) read() ([]byte, error) {
	fi, err := os.Lstat(c.path())
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v): not used; remove it", c.path(), fi.Mode().Type())
	}
	// Without waiting, should a FIFO have taken the file's place since.
	f, err := os.OpenFile(c.path(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s changed while opened: not used", c.path())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRosterCache+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRosterCache {
		return nil, fmt.Errorf("%s is larger than any roster (%d bytes at most): not used; remove it", c.path(), maxRosterCache)
	}
	return b, nil
}

// save writes the roster (mode 0600: it names every key of the site)
// through a temporary file, so a crash leaves the old one or the new one.
func (c rosterCache) save(sr api.SiteRoster) error {
	if c.dir == "" {
		return nil
	}
	raw, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	b, err := json.Marshal(cachedRoster{Roster: raw, MAC: c.mac(raw)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("roster cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.dir, RosterFile+".*")
	if err != nil {
		return fmt.Errorf("roster cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("roster cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("roster cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("roster cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path()); err != nil {
		return fmt.Errorf("roster cache: %w", err)
	}
	return nil
}

// fetchRoster asks the hub for the site's roster on the relay's own
// connection (its inbox is the site's, where the hub answers).
func fetchRoster(ctx context.Context, nc *nats.Conn, site string, timeout time.Duration) (api.SiteRoster, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, api.SiteRosterSubject(site), nil)
	if err != nil {
		return api.SiteRoster{}, fmt.Errorf("ask the hub for the roster: %w", err)
	}
	var sr api.SiteRoster
	if err := json.Unmarshal(m.Data, &sr); err != nil {
		return api.SiteRoster{}, fmt.Errorf("the hub's roster: %w", err)
	}
	if sr.Error != "" {
		return api.SiteRoster{}, fmt.Errorf("the hub refused the roster: %s", sr.Error)
	}
	if sr.Site != site {
		return api.SiteRoster{}, fmt.Errorf("the hub sent site %q's roster, not %q's", sr.Site, site)
	}
	return sr, nil
}
