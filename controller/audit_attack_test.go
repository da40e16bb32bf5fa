package controller_test

// Attacks on the audit trail: values a caller controls that end up in
// records, and what a stranger or a weak token can make the trail hold.
// Each runs against a real secured controller.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// aaRecords reads the whole trail as an admin.
func aaRecords(t *testing.T, f *fleet.Fleet) []api.AuditRecord {
	t.Helper()
	var recs []api.AuditRecord
	if err := f.Client().EachAudit(context.Background(), api.AuditQuery{Limit: 1000}, func(r api.AuditRecord) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatalf("read the audit trail: %v", err)
	}
	return recs
}

// aaVerify walks the chain as grid audit verify does.
func aaVerify(t *testing.T, recs []api.AuditRecord) {
	t.Helper()
	var chain api.AuditChain
	for _, r := range recs {
		if err := chain.Next(r); err != nil {
			t.Fatalf("verify: %v (record %+v)", err, r)
		}
	}
}

// A path value is unescaped before it reaches a record: bytes that are not
// UTF-8 (%ff) were hashed as the JSON encoder's \ufffd escape but read back
// as the character itself, so one unauthenticated request made every later
// verify report an edited record.
func TestAuditAttackInvalidUTF8DoesNotBreakChain(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	rd := ar2Token(t, f, "viewer", api.RoleRead)
	for _, c := range []struct {
		tok  string
		path string
		want int
	}{
		{"", "/job/%ff%fe/cancel", http.StatusUnauthorized},
		{"made-up", "/token/%c3%28", http.StatusUnauthorized},
		{rd, "/job/a%ffb/cancel", http.StatusForbidden},
		{rd, "/enrollments/%80/approve", http.StatusForbidden},
	} {
		method := http.MethodPost
		if strings.HasPrefix(c.path, "/token/") {
			method = http.MethodDelete
		}
		if code, body := ar2Call(t, f, c.tok, method, c.path, ""); code != c.want {
			t.Fatalf("%s %s: %d %s, want %d", method, c.path, code, body, c.want)
		}
	}
	recs := aaRecords(t, f)
	found := 0
	for _, r := range recs {
		if strings.ContainsRune(r.Resource, '\uFFFD') {
			found++
		}
	}
	if found != 4 {
		t.Errorf("%d records name the bad resource, want 4", found)
	}
	aaVerify(t, recs)
}

// A refused call's record takes its resource from the path, which may be as
// long as the request line (up to a megabyte of headers): a stranger's
// 1,000 recorded failures a day of 60 KiB each would fill the default
// audit_max_bytes in some 16 days and so refuse every change.
func TestAuditAttackLongPathRecordStaysSmall(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	rd := ar2Token(t, f, "viewer", api.RoleRead)
	long := strings.Repeat("x", 60<<10)
	for _, c := range []struct {
		tok, method, path string
	}{
		{"", http.MethodPost, "/job/" + long + "/cancel"},
		{rd, http.MethodPost, "/job/" + long + "/retry"},
		{rd, http.MethodDelete, "/token/" + long},
	} {
		if code, body := ar2Call(t, f, c.tok, c.method, c.path, ""); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("%s %.40s…: %d %s", c.method, c.path, code, body)
		}
	}
	recs := aaRecords(t, f)
	seen := 0
	for _, r := range recs {
		if r.Action != api.AuditAuthFailed && r.Action != api.AuditAuthDenied {
			continue
		}
		seen++
		b, _ := json.Marshal(r)
		t.Logf("a %s record with a 60 KiB path is %d bytes", r.Action, len(b))
		if len(b) > 2<<10 {
			t.Errorf("record %d (%s %s) is %d bytes", r.Seq, r.Action, r.Route, len(b))
		}
		if !strings.HasPrefix(r.Resource, "xxxx") {
			t.Errorf("record %d: resource %.40q does not start with the path's", r.Seq, r.Resource)
		}
	}
	if seen != 3 {
		t.Errorf("%d refusals recorded, want 3", seen)
	}
	aaVerify(t, recs)
}

// A handler that panics after it acted (a bug) left no record: the panic
// went past the wrapper before the append, and net/http only closed the
// connection. The change stands, so its record must be written.
func TestAuditAttackPanickingHandlerIsRecorded(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	var acted atomic.Bool
	h := f.Controller.Authorize("POST /boom/{id}", api.RoleOperator, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		acted.Store(true)
		panic("handler bug after the change was made")
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /boom/{id}", h)
	srv := httptest.NewServer(mux)
	// net/http logs the panic it recovers; the test's output need not.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/boom/thing-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.AdminToken())
	if resp, err := srv.Client().Do(req); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode < 500 {
			t.Errorf("a panicking call answered %d", resp.StatusCode)
		}
	}
	if !acted.Load() {
		t.Fatal("the handler did not run")
	}
	var got *api.AuditRecord
	for _, r := range aaRecords(t, f) {
		if r.Route == "POST /boom/{id}" {
			got = &r
		}
	}
	if got == nil {
		t.Fatal("the call that acted and then panicked has no audit record")
	}
	if got.Outcome != http.StatusInternalServerError || got.Resource != "thing-1" || got.Actor != "admin" ||
		!strings.Contains(got.Detail, "panic") {
		t.Errorf("record %+v: want outcome 500, resource thing-1, actor admin and a detail naming the panic", *got)
	}
}

// aaCount counts the records of an action.
func aaCount(recs []api.AuditRecord, action, route string) int {
	n := 0
	for _, r := range recs {
		if r.Action == action && (route == "" || r.Route == route) {
			n++
		}
	}
	return n
}

// Flooding the trail with calls that act on nothing. A full stream refuses
// every change (and deny_purge keeps it full until records expire or
// audit_max_bytes is raised), so what the weakest callers can add must be
// bounded: a stranger's 401s were (10 a minute per source address); a
// read token's 403s were recorded without bound (some 2 million ~500-byte
// records fill the default 1 GiB: half an hour at 1,000 calls a second),
// and so were a metrics token's POSTs to paths that do not exist (404s
// through the catch-all route).
func TestAuditAttackRefusalFloodIsBounded(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	rd := ar2Token(t, f, "viewer", api.RoleRead)
	mt := ar2Token(t, f, "scraper", api.RoleMetrics)
	const calls = 25
	for range calls {
		if code, body := ar2Call(t, f, "", http.MethodPost, "/job/j1/cancel", ""); code != http.StatusUnauthorized {
			t.Fatalf("stranger: %d %s", code, body)
		}
		if code, body := ar2Call(t, f, rd, http.MethodPost, "/job/j1/cancel", ""); code != http.StatusForbidden {
			t.Fatalf("read token: %d %s", code, body)
		}
		if code, body := ar2Call(t, f, mt, http.MethodPost, "/no/such/thing", ""); code != http.StatusNotFound {
			t.Fatalf("metrics token: %d %s", code, body)
		}
	}
	recs := aaRecords(t, f)
	logged := map[string]bool{}
	for _, r := range recs {
		if !logged[r.Action] {
			b, _ := json.Marshal(r)
			t.Logf("a %s record is %d bytes", r.Action, len(b))
			logged[r.Action] = true
		}
	}
	// Within one minute the limits allow 10 per source or token; a
	// minute's turn between the calls may allow up to 10 more.
	for _, c := range []struct {
		what, action, route string
		max                 int
	}{
		{"a stranger's 401s", api.AuditAuthFailed, "", 20},
		{"a read token's 403s", api.AuditAuthDenied, "", 20},
		{"a metrics token's 404s", "/", "/", 0},
	} {
		n := aaCount(recs, c.action, c.route)
		if c.max == 0 && n > 0 {
			t.Errorf("%s, %d calls: %d records, want none (they act on nothing)", c.what, calls, n)
		}
		if c.max > 0 && (n > c.max || n < 10) {
			t.Errorf("%s, %d calls: %d records, want 10 to %d", c.what, calls, n, c.max)
		}
	}
	aaVerify(t, recs)
}

// A caller that hangs up while its call runs cancels the request's
// context; the record was appended with that context, so a change made
// before the hang-up went unrecorded (and a refusal too).
func TestAuditAttackHangUpStillRecorded(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	acted := make(chan struct{})
	done := make(chan struct{})
	inner := f.Controller.Authorize("POST /slow/{id}", api.RoleOperator, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(acted)
		<-r.Context().Done() // the caller is gone; the change stands
		w.WriteHeader(http.StatusCreated)
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /slow/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		inner.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST /slow/thing-2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", f.AdminToken()); err != nil {
		t.Fatal(err)
	}
	<-acted
	_ = conn.Close()
	<-done
	for _, r := range aaRecords(t, f) {
		if r.Route == "POST /slow/{id}" {
			if r.Resource != "thing-2" || r.Outcome != http.StatusCreated {
				t.Errorf("record %+v: want resource thing-2, outcome 201", r)
			}
			return
		}
	}
	t.Fatal("the call that acted before its caller hung up has no audit record")
}

// Path and method tricks cannot make a change without its record: every
// token that exists after them has its token.create record.
func TestAuditAttackPathTricksActOnlyWithRecord(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	tok := f.AdminToken()
	for i, c := range []struct{ method, path string }{
		{http.MethodPost, "//token"},
		{http.MethodPost, "/job/../token"},
		{http.MethodPost, "/token/"},
		{http.MethodPost, "/%74oken"},
		{http.MethodPost, "/token?x=/job"},
		{http.MethodPut, "/token"},
		{http.MethodPatch, "/token"},
		{http.MethodOptions, "/token"},
		{http.MethodHead, "/token"},
		{http.MethodPost, "/token"},
	} {
		ar2Call(t, f, tok, c.method, c.path, fmt.Sprintf(`{"name":"trick-%d","role":"admin"}`, i))
	}
	infos, err := f.Client().ListTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, r := range aaRecords(t, f) {
		if r.Action == api.AuditTokenCreate && r.Outcome == http.StatusCreated {
			recorded[r.Resource] = true
		}
	}
	made := 0
	for _, ti := range infos {
		if !strings.HasPrefix(ti.Name, "trick-") {
			continue
		}
		made++
		if !recorded[ti.Name] {
			t.Errorf("token %s was made without a token.create record", ti.Name)
		}
	}
	if made == 0 {
		t.Error("not even the plain POST /token made its token: the test proves nothing")
	}
}

// Concurrent callers of every kind (strangers, a read token, an admin
// making changes) cannot fork the chain: every change has its record, and
// every record names the one before.
func TestAuditAttackConcurrentCallersKeepOneChain(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0})
	rd := ar2Token(t, f, "viewer", api.RoleRead)
	// call is ar2Call without t.Fatal, which a goroutine may not use.
	call := func(tok, method, path, body string) {
		req, err := http.NewRequest(method, f.APIURL()+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := f.HTTPClient().Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return
		}
		_ = resp.Body.Close()
	}
	const each = 8
	var wg sync.WaitGroup
	for i := range each {
		wg.Go(func() { call("", http.MethodDelete, fmt.Sprintf("/token/s-%d", i), "") })
		wg.Go(func() { call(rd, http.MethodDelete, fmt.Sprintf("/token/r-%d", i), "") })
		wg.Go(func() {
			call(f.AdminToken(), http.MethodPost, "/token", fmt.Sprintf(`{"name":"c-%d","role":"read"}`, i))
		})
	}
	wg.Wait()
	recs := aaRecords(t, f)
	aaVerify(t, recs)
	prev := map[string]uint64{}
	for _, r := range recs {
		if s, ok := prev[r.PrevHash]; ok {
			t.Errorf("records %d and %d name the same previous record", s, r.Seq)
		}
		prev[r.PrevHash] = r.Seq
	}
	if n := aaCount(recs, api.AuditTokenCreate, ""); n != each+1 {
		t.Errorf("%d token.create records, want %d", n, each+1)
	}
}

// The room check before a call acts (room for one record of the largest
// size) was made by each call alone: calls that passed it together all
// acted, and those whose records no longer fitted were changes without a
// record (their callers got 503 after the fact). Near a full stream, each
// call in flight must hold room for its record.
func TestAuditAttackConcurrentCallsNearFullAllRecorded(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 0, Controller: func(c *controller.Config) {
		c.AuditMaxBytes = controller.ByteSize(8 << 20)
	}})
	nc, err := nats.Connect(f.NATSURL(), f.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := js.Stream(ctx, api.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the stream (with the controllers' own rights, standing in for
	// a long busy year) until a little more than one largest record fits.
	const reserve = 64 << 10
	for {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		room := info.Config.MaxBytes - int64(info.State.Bytes)
		if room-reserve < 4<<10 {
			break
		}
		if _, err := js.Publish(ctx, api.SubjectAudit, make([]byte, min(60<<10, room-reserve-3<<10))); err != nil {
			t.Fatal(err)
		}
	}
	f.Controller.LookAtAuditNow()

	var entered, answered atomic.Int64
	release := make(chan struct{})
	h := f.Controller.Authorize("POST /many/{id}", api.RoleOperator, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered.Add(1)
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /many/{id}", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	const n = 300
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer answered.Add(1)
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/many/c-%d", srv.URL, i), nil)
			req.Header.Set("Authorization", "Bearer "+f.AdminToken())
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	// Every call has either entered the handler (and waits there) or
	// been answered without entering it.
	for entered.Load()+answered.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	acted := int(entered.Load())
	recorded := 0
	if err := f.Client().EachAudit(ctx, api.AuditQuery{Limit: 1000}, func(r api.AuditRecord) error {
		if r.Route == "POST /many/{id}" {
			recorded++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	late := 0
	for _, c := range codes {
		if c == http.StatusServiceUnavailable {
			late++
		}
	}
	t.Logf("%d calls: %d acted, %d recorded, %d answered 503", n, acted, recorded, late)
	if acted == 0 {
		t.Fatal("no call acted: the stream was filled too far")
	}
	if recorded != acted {
		t.Errorf("%d calls acted but %d were recorded", acted, recorded)
	}
}

// A job's params larger than a record keeps were replaced by their size
// alone, so an operator could pad one param and leave the record without
// the job's target, actions or other params.
func TestAuditAttackPaddedParamsKeepWhatTheJobDoes(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	pad := strings.Repeat("p", 40<<10)
	body := `{"target":{"scope":"node","value":"node-1"},"tasks":[` +
		`{"backend":"ping","action":"echo","params":{"message":"` + pad + `"}},` +
		`{"backend":"ping","action":"echo","params":{"message":"the-real-payload"}}]}`
	code, resp := ar2Call(t, f, op, http.MethodPost, "/job", body)
	if code != http.StatusCreated && code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("submit: %d %.300s", code, resp)
	}
	var rec *api.AuditRecord
	for _, r := range aaRecords(t, f) {
		if r.Action == api.AuditJobSubmit {
			rec = &r
		}
	}
	if rec == nil {
		t.Fatal("no job.submit record")
	}
	p := string(rec.Params)
	for _, want := range []string{"node-1", "ping.echo", "the-real-payload", "ppp"} {
		if !strings.Contains(p, want) {
			t.Errorf("record params %.300s… lack %q", p, want)
		}
	}
	if len(p) > 16<<10 {
		t.Errorf("record params are %d bytes", len(p))
	}
}

// Padding spread over many short values (no string to cut) took a job's
// target and actions out of its record all the same.
func TestAuditAttackManyStepsKeepTargetAndActions(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	op := ar2Token(t, f, "ops", api.RoleOperator)
	steps := make([]string, 120)
	for i := range steps {
		steps[i] = `{"backend":"ping","action":"echo","params":{"message":"` + strings.Repeat("q", 200) + `"}}`
	}
	body := `{"target":{"scope":"node","value":"node-1"},"tasks":[` + strings.Join(steps, ",") + `]}`
	if code, resp := ar2Call(t, f, op, http.MethodPost, "/job", body); code != http.StatusAccepted {
		t.Fatalf("submit: %d %.300s", code, resp)
	}
	var rec *api.AuditRecord
	for _, r := range aaRecords(t, f) {
		if r.Action == api.AuditJobSubmit {
			rec = &r
		}
	}
	if rec == nil {
		t.Fatal("no job.submit record")
	}
	p := string(rec.Params)
	for _, want := range []string{"node-1", "ping.echo", "omitted_bytes"} {
		if !strings.Contains(p, want) {
			t.Errorf("record params %.300s… lack %q", p, want)
		}
	}
}
