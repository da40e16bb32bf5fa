package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// The audit trail (DESIGN.md, "Audit trail"): every mutating API call, what
// controllers do by themselves to jobs and schedules, and refused calls, one
// record each in the audit stream, each naming the hash of the one before.
// Several controllers append to one chain: each publish expects the
// stream's last sequence to be the one whose hash the record names, and a
// controller that lost the race reads the new last record and tries again.

// auditLog appends records to the audit stream.
type auditLog struct {
	js         jetstream.JetStream
	controller string

	// mu serialises this controller's appends; head is the last record
	// it knows of (known false: read it from the stream first). read is
	// when the stream was last looked at, full whether it then had no
	// room for another record.
	mu       sync.Mutex
	known    bool
	lastSeq  uint64
	lastHash string
	read     time.Time
	full     error
	// room is what the stream had left when last looked at (-1: no
	// cap), msgMax its largest record, written what this controller
	// appended since, and inflight the calls between ready and their
	// record: each holds room for a record of msgMax, so that calls
	// passing ready together all find room when they append.
	room     int64
	msgMax   int64
	written  int64
	inflight int

	// failed rate-limits the records of failed authentications (by
	// source address), denied those of calls refused for a weak role (by
	// token).
	failed, denied authFailLimiter
}

// errAuditUnavailable marks an audit record that could not be written.
var errAuditUnavailable = errors.New("the audit trail cannot be written")

// auditMaxAttempts bounds the retries of an append that lost the race to
// another controller: each loss means another record landed, so this is
// only reached under a flood of writers.
const auditMaxAttempts = 50

// auditTimeout bounds one append, its retries included.
const auditTimeout = 10 * time.Second

// maxAuditParams is the largest params a record keeps; larger ones are
// replaced by their size (the record must fit the stream's per-message
// cap, bus.AuditMaxMsgSize).
const maxAuditParams = 16 << 10

// auditRecheck is how often ready looks at the stream again while the head
// is known: to find it full before a call acts rather than after.
const auditRecheck = 2 * time.Second

// ready makes sure the chain's head is known and the stream has room for
// the call's record besides those of the calls in flight, reading it from
// the stream if need be: a mutating call is refused (503) when this fails,
// before it acts. On success the caller holds that room until it calls
// done, after its record is appended.
func (a *auditLog) ready(ctx context.Context) (done func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.known || time.Since(a.read) > auditRecheck || a.full != nil {
		if err := a.readHead(ctx); err != nil {
			return nil, err
		}
	}
	if a.full != nil {
		return nil, a.full
	}
	if a.room >= 0 && a.room-a.written < int64(a.inflight+1)*a.msgMax {
		return nil, fmt.Errorf("%w: the audit stream is nearly full (%d bytes left under audit_max_bytes, %d calls in flight each holding room for a record of up to %d bytes): raise audit_max_bytes or shorten audit_retention",
			errAuditUnavailable, max(a.room-a.written, 0), a.inflight, a.msgMax)
	}
	a.inflight++
	return func() {
		a.mu.Lock()
		a.inflight--
		a.mu.Unlock()
	}, nil
}

// readHead reads the stream's last record. Called with mu held.
func (a *auditLog) readHead(ctx context.Context) error {
	s, err := a.js.Stream(ctx, api.StreamAudit)
	if err != nil {
		return fmt.Errorf("%w: audit stream: %w", errAuditUnavailable, err)
	}
	info := s.CachedInfo()
	last := info.State.LastSeq
	a.full, a.room, a.written, a.msgMax = nil, -1, 0, int64(max(info.Config.MaxMsgSize, 0))
	if cfg := info.Config; cfg.MaxBytes > 0 {
		a.room = cfg.MaxBytes - int64(info.State.Bytes)
	}
	if cfg := info.Config; cfg.MaxBytes > 0 && int64(info.State.Bytes)+int64(max(cfg.MaxMsgSize, 0)) > cfg.MaxBytes {
		// The next record might not fit (JetStream refuses one that
		// passes the cap).
		a.full = fmt.Errorf("%w: the audit stream is full (%d of its %d bytes, audit_max_bytes): raise audit_max_bytes or shorten audit_retention",
			errAuditUnavailable, info.State.Bytes, cfg.MaxBytes)
	}
	hash := ""
	if last > 0 {
		m, err := s.GetMsg(ctx, last)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			// Expired after audit_retention with nothing written since:
			// the next record starts the chain again.
		case err != nil:
			return fmt.Errorf("%w: read audit record %d: %w", errAuditUnavailable, last, err)
		default:
			var rec api.AuditRecord
			if err := json.Unmarshal(m.Data, &rec); err != nil {
				// Not a record of ours: chain on to what is there, and
				// verify names it.
				rec.Hash = ""
			}
			hash = rec.Hash
		}
	}
	a.lastSeq, a.lastHash, a.known, a.read = last, hash, true, time.Now()
	return nil
}

// append writes rec as the chain's next record and returns it as stored.
func (a *auditLog) append(ctx context.Context, rec api.AuditRecord) (api.AuditRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	rec.Controller = a.controller
	cleanAuditStrings(&rec)
	if len(rec.Params) > maxAuditParams {
		rec.Params = shrinkAuditParams(rec.Params, nil)
	}
	// One id for every try: a try whose answer was lost but that was
	// stored makes the next try a duplicate JetStream drops (within its
	// deduplication window), instead of a second copy of the record.
	msgID := "audit-" + randomID(12)
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	for range auditMaxAttempts {
		if !a.known {
			if err = a.readHead(ctx); err != nil {
				return rec, err
			}
		}
		rec.Seq, rec.PrevHash = a.lastSeq+1, a.lastHash
		if rec.Hash, err = rec.ComputeHash(); err != nil {
			return rec, err
		}
		data, merr := json.Marshal(rec)
		if merr != nil {
			return rec, fmt.Errorf("encode audit record: %w", merr)
		}
		var ack *jetstream.PubAck
		ack, err = a.js.Publish(ctx, api.SubjectAudit, data, jetstream.WithExpectStream(api.StreamAudit),
			jetstream.WithExpectLastSequence(a.lastSeq), jetstream.WithMsgID(msgID))
		if err == nil && ack.Sequence == rec.Seq {
			a.lastSeq, a.lastHash = rec.Seq, rec.Hash
			// What the stream stores per message beyond the data
			// (subject, headers, index) is some 100 bytes.
			a.written += int64(len(data)) + 128
			return rec, nil
		}
		if err == nil && ack.Duplicate {
			// An earlier try landed: that is the record.
			return a.stored(ctx, ack.Sequence)
		}
		// Another controller appended first (wrong last sequence), or the
		// answer was lost: read the head again before the next try.
		a.known = false
		if err == nil {
			err = fmt.Errorf("stored at sequence %d, not %d", ack.Sequence, rec.Seq)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return rec, fmt.Errorf("%w: %w", errAuditUnavailable, err)
}

// Bounds of a record's text fields. Names (tokens, nodes, jobs,
// schedules) are at most 128 bytes; a longer one comes from a path nobody
// could have acted on (a refused call's), and keeping it whole would let a
// stranger's 1,000 recorded failures a day add up to 64 MiB a day, filling
// the default audit_max_bytes within weeks and so refusing every change.
const (
	maxAuditName   = 256
	maxAuditDetail = 2 << 10
)

// cleanAuditStrings makes every text field of rec valid UTF-8 and cuts the
// overlong ones (a note of the bytes left out says so). Callers
// put unescaped path values in records (/job/%ff/cancel), and JSON
// encodes a byte that is not UTF-8 as the escape \ufffd while a reader
// decodes it to the character U+FFFD, which it encodes as three raw bytes:
// the hash computed here would never match the one verify computes, and a
// single unauthenticated request would make the chain look edited.
func cleanAuditStrings(rec *api.AuditRecord) {
	for _, s := range []*string{&rec.Actor, &rec.Action, &rec.Route, &rec.Resource, &rec.Job, &rec.Node,
		&rec.Detail, &rec.Remote, &rec.Controller} {
		limit := maxAuditName
		if s == &rec.Detail {
			limit = maxAuditDetail
		}
		*s = cutAuditText(strings.ToValidUTF8(*s, "\uFFFD"), limit)
	}
	rec.Role = api.Role(strings.ToValidUTF8(string(rec.Role), "\uFFFD"))
}

// shrinkAuditParams makes params that are too large for a record fit: first
// by cutting each long string in them (so that one padded value cannot
// take the target, the actions and the other values out of the record),
// then by brief (what the handler says must be kept: a job's target and
// actions) with their size, and only if that is not enough by keeping
// their size alone.
func shrinkAuditParams(params json.RawMessage, brief map[string]any) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(params))
	d.UseNumber() // numbers as written, not rounded through float64
	if err := d.Decode(&v); err == nil {
		if b, err := json.Marshal(cutAuditStrings(v)); err == nil && len(b) <= maxAuditParams {
			return b
		}
	}
	if brief != nil {
		brief["omitted_bytes"] = len(params)
		if b, err := json.Marshal(brief); err == nil && len(b) <= maxAuditParams {
			return b
		}
	}
	return json.RawMessage(`{"omitted_bytes":` + strconv.Itoa(len(params)) + `}`)
}

// cutAuditStrings cuts every string in a decoded JSON value to
// maxAuditName bytes.
func cutAuditStrings(v any) any {
	switch t := v.(type) {
	case string:
		return cutAuditText(t, maxAuditName)
	case []any:
		for i := range t {
			t[i] = cutAuditStrings(t[i])
		}
	case map[string]any:
		for k, e := range t {
			t[k] = cutAuditStrings(e)
		}
	}
	return v
}

// cutAuditText cuts s to about limit bytes, on a rune boundary, saying how
// many bytes were left out.
func cutAuditText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

// stored reads the record at seq, stored by an earlier try of an append
// whose answer was lost. Called with mu held.
func (a *auditLog) stored(ctx context.Context, seq uint64) (api.AuditRecord, error) {
	var rec api.AuditRecord
	s, err := a.js.Stream(ctx, api.StreamAudit)
	if err != nil {
		return rec, fmt.Errorf("%w: %w", errAuditUnavailable, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return rec, fmt.Errorf("%w: read audit record %d: %w", errAuditUnavailable, seq, err)
	}
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return rec, fmt.Errorf("%w: audit record %d: %w", errAuditUnavailable, seq, err)
	}
	a.known = false // the head may be past it by now
	return rec, nil
}

// record writes a record of something the controller did by itself (a
// job's start or end, a schedule's tick). Such a thing has happened
// already, so a record that cannot be written is logged and counted, not
// refused.
func (c *Controller) record(rec api.AuditRecord) {
	if c.audit == nil {
		return
	}
	if rec.Actor == "" {
		rec.Actor = "controller:" + c.id
	}
	if _, err := c.audit.append(context.Background(), rec); err != nil {
		c.metrics.auditFailed.Inc()
		c.log.Error("audit record not written", "action", rec.Action, "resource", rec.Resource, "err", err)
	}
}

// auditNote is what a handler adds to its call's record: the resource it
// touched when the path does not name it, and the call's params.
type auditNote struct {
	action   string
	resource string
	job      string
	node     string
	params   any
	// brief is what params must keep when they are too large for a
	// record.
	brief  map[string]any
	detail string
}

type auditNoteKey struct{}

// noteAudit gives the call's record what the handler knows; a no-op for a
// call that is not recorded.
func noteAudit(r *http.Request, fn func(n *auditNote)) {
	if n, ok := r.Context().Value(auditNoteKey{}).(*auditNote); ok {
		fn(n)
	}
}

// auditActions names the action of each mutating route.
var auditActions = map[string]string{
	"POST /job":                      api.AuditJobSubmit,
	"POST /job/{id}/cancel":          api.AuditJobCancel,
	"POST /job/{id}/retry":           api.AuditJobRetry,
	"DELETE /job/{id}":               api.AuditJobDelete,
	"DELETE /node/{id}":              api.AuditNodeRemove,
	"POST /token":                    api.AuditTokenCreate,
	"DELETE /token/{name}":           api.AuditTokenRevoke,
	"POST /enrollments/{id}/approve": api.AuditNodeApprove,
	"POST /enrollments/{id}/revoke":  api.AuditNodeRevoke,
	"POST /join-token":               api.AuditJoinTokenCreate,
	"DELETE /join-token/{name}":      api.AuditJoinTokenRevoke,
	"POST /site":                     api.AuditSiteCreate,
	"DELETE /site/{name}":            api.AuditSiteRevoke,
	"POST /dlq/{id}/replay":          api.AuditDLQReplay,
	"DELETE /dlq/{id}":               api.AuditDLQDrop,
	"POST /schedules":                api.AuditScheduleCreate,
	"PUT /schedule/{id}":             api.AuditScheduleUpdate,
	"POST /schedule/{id}/pause":      api.AuditSchedulePause,
	"POST /schedule/{id}/resume":     api.AuditScheduleResume,
	"DELETE /schedule/{id}":          api.AuditScheduleDelete,
}

// auditAction is the action of a route; an unlisted mutating route is
// recorded under its method and pattern.
func auditAction(pattern string) string {
	if a, ok := auditActions[pattern]; ok {
		return a
	}
	return pattern
}

// auditedCall runs a mutating call's handler and writes its record before
// the answer leaves: the answer is held in a buffer meanwhile. When the
// trail cannot be written the call is refused with 503 before it acts; if
// the record of a call that has acted still fails, the caller gets 503
// saying so instead of the answer, so that no success is ever reported
// without its record.
func (c *Controller) auditedCall(w http.ResponseWriter, r *http.Request, rt route, p principal) {
	ctx, cancel := context.WithTimeout(r.Context(), auditTimeout)
	done, err := c.audit.ready(ctx)
	cancel()
	if err == nil {
		defer done()
	}
	if err != nil {
		c.metrics.auditFailed.Inc()
		c.log.Error("API call refused: audit trail unavailable", "method", r.Method, "path", r.URL.Path, "by", p.Name, "err", err)
		writeError(w, http.StatusServiceUnavailable, "refused: "+err.Error()+"; every change is recorded before it is made, so none is made until the audit stream takes writes again (see /status and /readyz; a full stream needs a larger audit_max_bytes)")
		return
	}
	note := &auditNote{}
	r = r.WithContext(context.WithValue(r.Context(), auditNoteKey{}, note))
	bw := &bufferedWriter{header: http.Header{}, code: http.StatusOK}
	if v := c.serveNoted(bw, r, rt.handler); v != nil {
		// A handler that panicked may have acted before it did: the
		// record says so, then the panic goes on to net/http, which
		// logs it and drops the connection (no answer, so no success
		// reported).
		bw.code = http.StatusInternalServerError
		note.detail = fmt.Sprintf("the handler panicked (%v); what it changed before is not known", v)
		c.log.Error("API handler panicked", "method", r.Method, "path", r.URL.Path, "by", p.Name, "panic", v)
		defer panic(v)
	}
	c.log.Info("API call", "method", r.Method, "path", r.URL.Path, "by", p.Name, "role", p.Role, "status", bw.code)

	rec := api.AuditRecord{Actor: p.Name, Role: p.Role, Action: auditAction(rt.pattern), Route: rt.pattern, Outcome: bw.code,
		Resource: note.resource, Job: note.job, Node: note.node, Detail: note.detail, Remote: r.RemoteAddr}
	if note.action != "" {
		rec.Action = note.action
	}
	c.fillResource(r, &rec)
	if note.params != nil {
		if b, err := json.Marshal(note.params); err == nil {
			if len(b) > maxAuditParams {
				b = shrinkAuditParams(b, note.brief)
			}
			rec.Params = b
		}
	}
	// Not the request's context: a caller that hangs up cancels it, and
	// what the call did must be recorded all the same (append bounds
	// itself with auditTimeout).
	if _, err := c.audit.append(context.WithoutCancel(r.Context()), rec); err != nil {
		c.metrics.auditFailed.Inc()
		c.log.Error("audit record not written after the call acted", "action", rec.Action, "resource", rec.Resource, "by", p.Name,
			"status", bw.code, "err", err)
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s %s answered %d but its audit record could not be written (%v); "+
			"check the outcome before trying again", r.Method, r.URL.Path, bw.code, err))
		return
	}
	bw.flushTo(w)
}

// serveNoted runs a handler, returning what it panicked with (nil if it
// returned), so that the call is recorded either way.
func (c *Controller) serveNoted(w http.ResponseWriter, r *http.Request, h http.Handler) (v any) {
	defer func() { v = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// fillResource completes a record's resource, job and node from the route's
// path when the handler did not name them.
func (c *Controller) fillResource(r *http.Request, rec *api.AuditRecord) {
	if rec.Resource == "" {
		rec.Resource = r.PathValue("id")
		if rec.Resource == "" {
			rec.Resource = r.PathValue("name")
		}
	}
	switch rec.Action {
	case api.AuditJobCancel, api.AuditJobRetry, api.AuditJobDelete, api.AuditJobSubmit:
		if rec.Job == "" {
			rec.Job = rec.Resource
		}
	case api.AuditNodeRemove, api.AuditNodeApprove, api.AuditNodeRevoke:
		if rec.Node == "" {
			rec.Node = rec.Resource
		}
	}
}

// recordRefusal records a refused call: 403 always, 401 within the
// failed-authentication limit. The refusal acted on nothing, so a record
// that cannot be written is logged, and the refusal goes out anyway.
func (c *Controller) recordRefusal(r *http.Request, rt route, p principal, code int) {
	if c.audit == nil {
		return
	}
	rec := api.AuditRecord{Actor: p.Name, Role: p.Role, Action: api.AuditAuthDenied, Route: rt.pattern, Outcome: code,
		Remote: r.RemoteAddr}
	if rt.pattern != "/" {
		c.fillResource(r, &rec)
	}
	// Refusals acted on nothing, and anyone who reaches the API (401) or
	// holds the weakest token (403) can cause them: both are recorded
	// within limits, per source address or per token, so that a flood
	// cannot fill the stream and through it refuse every change.
	lim, key, what := &c.audit.denied, "token "+p.Name, "refused calls (role too weak)"
	if code == http.StatusUnauthorized {
		rec.Action = api.AuditAuthFailed
		lim, key, what = &c.audit.failed, sourceOf(r.RemoteAddr), "failed authentications"
	}
	ok, dropped := lim.allow(key, time.Now())
	if !ok {
		c.metrics.auditDropped.Inc()
		return
	}
	if dropped > 0 {
		rec.Detail = fmt.Sprintf("%d %s before this one were not recorded (more than %d a minute from one source or token, %d a minute or %d a day from all)",
			dropped, what, authFailPerSource, authFailTotal, authFailPerDay)
	}
	// A caller that hangs up at once must not slip its refusal past the
	// trail.
	if _, err := c.audit.append(context.WithoutCancel(r.Context()), rec); err != nil {
		c.metrics.auditFailed.Inc()
		c.log.Error("audit record of a refused call not written", "path", r.URL.Path, "status", code, "err", err)
	}
}

// sourceOf is the host of a remote address.
func sourceOf(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Failed authentications recorded per minute: a scan that tries token after
// token must not flood the trail (nor the stream's cap, which would then
// refuse every change). The rest are counted, and the next record says how
// many were left out.
//
// The daily bound keeps what unauthenticated callers can add to the trail
// to some 1,000 records (under 0.5 MB) a day however long a scan goes on:
// about a sixth of the default audit_max_bytes over audit_retention, so
// that a scan cannot fill the stream and, through it, refuse every change.
const (
	authFailPerSource = 10
	// authFailTotal also bounds the sources tracked in a minute.
	authFailTotal  = 100
	authFailPerDay = 1000
)

// authFailLimiter counts failed authentications per source within the
// current minute.
type authFailLimiter struct {
	mu      sync.Mutex
	window  time.Time
	total   int
	sources map[string]int
	day     time.Time
	today   int
	dropped int64
}

// allow says whether a failure from source is recorded now, and how many
// were dropped since the last one recorded.
func (l *authFailLimiter) allow(source string, now time.Time) (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := now.Truncate(time.Minute); !w.Equal(l.window) || l.sources == nil {
		l.window, l.total, l.sources = w, 0, map[string]int{}
	}
	if d := now.Truncate(24 * time.Hour); !d.Equal(l.day) {
		l.day, l.today = d, 0
	}
	n := l.sources[source]
	if l.total >= authFailTotal || n >= authFailPerSource || l.today >= authFailPerDay {
		l.dropped++
		return false, 0
	}
	l.sources[source] = n + 1
	l.total++
	l.today++
	d := l.dropped
	l.dropped = 0
	return true, d
}

// bufferedWriter holds a handler's answer until its record is written.
type bufferedWriter struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }

func (b *bufferedWriter) WriteHeader(code int) {
	if !b.wrote {
		b.code, b.wrote = code, true
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

// flushTo sends the held answer.
func (b *bufferedWriter) flushTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(b.code)
	_, _ = w.Write(b.body.Bytes())
}

// auditTask is one step of a job as its record shows it.
type auditTask struct {
	Step   string     `json:"step"`
	Action string     `json:"action"`
	Params api.Params `json:"params,omitempty"`
}

// auditJobParams are the params of a job's record: its target, check mode
// and steps. withParams adds each step's params, which must by then hold
// api.SensitiveValue in place of every sensitive value (a job c.submit has
// accepted: extractSensitive has taken them out).
func auditJobParams(j *api.Job, withParams bool) map[string]any {
	var tasks []auditTask
	for _, s := range api.Flatten(j.Tasks) {
		t := auditTask{Step: s.Path, Action: s.Task.Name()}
		if withParams {
			t.Params = s.Task.Params
		}
		tasks = append(tasks, t)
	}
	out := map[string]any{"target": j.Target.String(), "tasks": tasks}
	if j.CheckMode {
		out["check_mode"] = true
	}
	if j.RetryOf != "" {
		out["retry_of"] = j.RetryOf
	}
	return out
}

// auditScheduleParams are the params of a schedule's record: when it fires
// and what its job does, without the job's params (a schedule keeps its
// job's values as given, so the record does not repeat them).
func auditScheduleParams(spec *api.ScheduleSpec) map[string]any {
	var actions []string
	for _, s := range api.Flatten(spec.Job.Tasks) {
		actions = append(actions, s.Task.Name())
	}
	out := map[string]any{"cron": spec.Cron, "target": spec.Job.Target.String(), "actions": actions}
	if spec.TimeZone != "" {
		out["time_zone"] = spec.TimeZone
	}
	if spec.Paused {
		out["paused"] = true
	}
	return out
}

// Paging of GET /audit.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
	// auditReadTries bounds the attempts at reading one page.
	auditReadTries = 5
)

// parseAuditQuery reads GET /audit's query parameters.
func parseAuditQuery(v map[string][]string) (api.AuditQuery, error) {
	get := func(k string) string {
		if s := v[k]; len(s) > 0 {
			return s[0]
		}
		return ""
	}
	q := api.AuditQuery{Actor: get("actor"), Action: get("action"), Node: get("node"), Job: get("job"), Limit: defaultAuditLimit}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		s := get(t.name)
		if s == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", t.name, s)
		}
		*t.to = at
	}
	if s := get("cursor"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("cursor %q: want the next of the previous page (a record's seq)", s)
		}
		q.After = n
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAuditLimit {
			return q, fmt.Errorf("limit %q: want a number from 1 to %d", s, maxAuditLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// auditMatches applies a query's filters to a record.
func auditMatches(q api.AuditQuery, r api.AuditRecord) bool {
	switch {
	case !q.Since.IsZero() && r.Time.Before(q.Since),
		!q.Until.IsZero() && !r.Time.Before(q.Until),
		q.Actor != "" && r.Actor != q.Actor,
		q.Action != "" && r.Action != q.Action,
		q.Node != "" && r.Node != q.Node,
		q.Job != "" && r.Job != q.Job:
		return false
	}
	return true
}

// handleAudit serves GET /audit: one page of records in chain order, from
// the one after ?cursor= (a seq), filtered by ?since= and ?until= (RFC
// 3339; until excluded), ?actor=, ?action=, ?node= and ?job=; ?limit= (100,
// at most 1000). A record stored in the stream that is not one (written by
// no controller) is shown with its seq and what is wrong, so that verify
// names it.
func (c *Controller) handleAudit(w http.ResponseWriter, r *http.Request) {
	q, err := parseAuditQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var page *api.AuditPage
	for try := 1; ; try++ {
		// A stream that just changed leader answers nothing for a
		// moment.
		if page, err = c.auditPage(ctx, q); err == nil || try == auditReadTries || ctx.Err() != nil {
			break
		}
		c.log.Debug("read audit records; trying again", "try", try, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("read the audit trail: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// auditScan bounds the records one GET /audit reads; a page that stops
// there has a next cursor even with fewer records than its limit.
const auditScan = 5000

// auditPage reads the records of one page, up to the stream's last record
// when the call began. Records are read one by one from the stream's
// leader (a message get), not through a consumer: after a controller's
// kill in a cluster, reads through an ephemeral consumer failed with "no
// responders" (likely one placed with the dead server), while a get is
// answered by whichever server leads the stream now.
func (c *Controller) auditPage(ctx context.Context, q api.AuditQuery) (*api.AuditPage, error) {
	s, err := c.js.Stream(ctx, api.StreamAudit)
	if err != nil {
		return nil, err
	}
	st := s.CachedInfo().State
	page := &api.AuditPage{Records: []api.AuditRecord{}}
	if st.Msgs == 0 || q.After >= st.LastSeq {
		return page, nil
	}
	seq := max(q.After+1, st.FirstSeq)
	if q.After == 0 && !q.Since.IsZero() {
		if seq, err = auditSeqAt(ctx, s, q.Since, seq, st.LastSeq); err != nil {
			return nil, err
		}
	}
	for scanned := 0; seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, err
		}
		var rec api.AuditRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			rec = api.AuditRecord{Seq: seq, Detail: "not an audit record: " + err.Error()}
		}
		if !q.Until.IsZero() && !m.Time.Before(q.Until) && !rec.Time.Before(q.Until) {
			return page, nil // stored in order: nothing later is before until
		}
		if auditMatches(q, rec) {
			page.Records = append(page.Records, rec)
		}
		scanned++
		if seq < st.LastSeq && (len(page.Records) >= q.Limit || scanned >= auditScan) {
			page.Next = seq
			return page, nil
		}
	}
	return page, nil
}

// auditSeqAt finds the first seq in [lo, hi] stored at or after t, by
// halving (records are stored in time order), or hi+1 when there is none.
func auditSeqAt(ctx context.Context, s jetstream.Stream, t time.Time, lo, hi uint64) (uint64, error) {
	end := hi + 1
	for lo < end {
		mid := lo + (end-lo)/2
		m, err := s.GetMsg(ctx, mid)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			lo = mid + 1 // expired: older than anything kept
			continue
		}
		if err != nil {
			return 0, err
		}
		if m.Time.Before(t) {
			lo = mid + 1
		} else {
			end = mid
		}
	}
	return lo, nil
}
