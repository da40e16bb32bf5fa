package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// rawCall does one raw API request with an optional bearer token: the one
// place this file builds HTTP requests by hand.
func rawCall(t *testing.T, ctl *controller.Controller, method, path, tok string, body []byte) (int, string) {
	t.Helper()
	hc, err := ctl.APIHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, ctl.APIURL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error
}

// makeToken creates a token through the admin client and returns it.
func makeToken(t *testing.T, admin *api.Client, name string, role api.Role) string {
	t.Helper()
	nt, err := admin.CreateToken(context.Background(), name, role)
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	if nt.Token == "" || nt.Role != role || nt.Name != name {
		t.Fatalf("created token: %+v", nt)
	}
	return nt.Token
}

// weaker is the role just below r ("" below metrics: no token at all).
func weaker(r api.Role) api.Role {
	for i, x := range api.Roles {
		if x == r && i > 0 {
			return api.Roles[i-1]
		}
	}
	return ""
}

// Every route of the API but the health checks refuses a request without a
// token (401) and one whose role is too weak (403), each saying which and
// what to do. The route table itself is walked, so a route added later is
// checked too.
func TestEveryRouteNeedsTokenAndRole(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	admin := f.Client()
	toks := map[api.Role]string{api.RoleAdmin: f.AdminToken()}
	for _, r := range []api.Role{api.RoleMetrics, api.RoleRead, api.RoleOperator} {
		toks[r] = makeToken(t, admin, "t-"+string(r), r)
	}
	routes := f.Controller.APIRoutes()
	if len(routes) < 15 {
		t.Fatalf("only %d routes in the table", len(routes))
	}
	for _, rt := range routes {
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = http.MethodGet, "/no-such-endpoint"
		}
		path = strings.NewReplacer("{id}", "job-nosuch", "{name}", "nosuch", "{$}", "").Replace(path)
		t.Run(rt.Pattern, func(t *testing.T) {
			code, msg := rawCall(t, f.Controller, method, path, "", nil)
			if rt.Role == "" {
				if code == http.StatusUnauthorized || code == http.StatusForbidden {
					t.Fatalf("public route without a token: %d %s", code, msg)
				}
				return
			}
			if code != http.StatusUnauthorized || !strings.Contains(msg, "missing API token") || !strings.Contains(msg, "GRID_TOKEN") {
				t.Fatalf("without a token: %d %q, want 401 saying the token is missing and how to send one", code, msg)
			}
			code, msg = rawCall(t, f.Controller, method, path, "grid_not-a-real-token", nil)
			if code != http.StatusUnauthorized || !strings.Contains(msg, "unknown API token") {
				t.Fatalf("unknown token: %d %q, want 401 unknown", code, msg)
			}
			if w := weaker(rt.Role); w != "" {
				code, msg = rawCall(t, f.Controller, method, path, toks[w], nil)
				if code != http.StatusForbidden || !strings.Contains(msg, "has role "+string(w)) || !strings.Contains(msg, "needs role "+string(rt.Role)) {
					t.Fatalf("role %s: %d %q, want 403 naming both roles", w, code, msg)
				}
			}
			// The role itself gets past the check (whatever the handler
			// then makes of the request).
			code, msg = rawCall(t, f.Controller, method, path, toks[rt.Role], []byte("{}"))
			if code == http.StatusUnauthorized || code == http.StatusForbidden {
				t.Fatalf("role %s: %d %q", rt.Role, code, msg)
			}
		})
	}
	// The routes the contract names have the roles it names.
	want := map[string]api.Role{
		"POST /job": api.RoleOperator, "POST /job/{id}/cancel": api.RoleOperator, "GET /job/{id}": api.RoleRead,
		"GET /jobs": api.RoleRead, "GET /nodes": api.RoleRead, "GET /status": api.RoleRead,
		"POST /token": api.RoleAdmin, "GET /tokens": api.RoleAdmin, "DELETE /token/{name}": api.RoleAdmin,
		"POST /join-token": api.RoleAdmin, "GET /join-tokens": api.RoleAdmin, "DELETE /join-token/{name}": api.RoleAdmin,
		"GET /metrics": api.RoleMetrics, "GET /healthz": "", "GET /readyz": "",
	}
	got := map[string]api.Role{}
	for _, rt := range routes {
		got[rt.Pattern] = rt.Role
	}
	for p, r := range want {
		if g, ok := got[p]; !ok || g != r {
			t.Errorf("%s: role %q, want %q", p, g, r)
		}
	}
}

// A read token can look at jobs but neither submit nor cancel one; an
// operator token can, and its name is recorded as the job's submitter.
func TestReadTokenCannotSubmitOrCancel(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	ctx := context.Background()
	reader := f.ClientWithToken(makeToken(t, f.Client(), "dashboard", api.RoleRead))
	deployer := f.ClientWithToken(makeToken(t, f.Client(), "deploy", api.RoleOperator))
	spec, err := api.ParseJobSpec([]byte("target: {scope: all}\ntasks: [{backend: ping, action: sleep, params: {duration: 30s}}]"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.SubmitJob(ctx, spec); !api.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("submit with a read token: %v, want 403", err)
	}
	j, err := deployer.SubmitJob(ctx, spec)
	if err != nil {
		t.Fatalf("submit with an operator token: %v", err)
	}
	if j.SubmittedBy != "deploy" {
		t.Fatalf("submitted_by %q, want deploy", j.SubmittedBy)
	}
	if _, err := reader.GetJob(ctx, j.ID); err != nil {
		t.Fatalf("read token cannot read the job: %v", err)
	}
	_, err = reader.CancelJob(ctx, j.ID)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, `"dashboard" has role read`) {
		t.Fatalf("cancel with a read token: %v, want 403 naming the token and its role", err)
	}
	if cur, _ := f.Client().GetJob(ctx, j.ID); cur.Status.Terminal() {
		t.Fatalf("job %s is %s after a refused cancel", j.ID, cur.Status)
	}
	if _, err := deployer.CancelJob(ctx, j.ID); err != nil {
		t.Fatalf("cancel with an operator token: %v", err)
	}
	final, err := f.Client().WaitJob(ctx, j.ID)
	if err != nil || final.Status != api.JobCancelled || final.SubmittedBy != "deploy" {
		t.Fatalf("job after cancel: %+v %v", final, err)
	}
	// As stored, for every controller to see.
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, j.ID)
	if err != nil || !strings.Contains(string(e.Value()), `"submitted_by":"deploy"`) {
		t.Fatalf("stored job lacks submitted_by: %v", err)
	}
	// A submission cannot claim a submitter of its own.
	code, msg := rawCall(t, f.Controller, http.MethodPost, "/job", f.AdminToken(),
		[]byte(`{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}],"submitted_by":"someone-else"}`))
	if code != http.StatusBadRequest || !strings.Contains(msg, "submitted_by") {
		t.Fatalf("spoofed submitted_by: %d %q, want 400", code, msg)
	}
}

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every mutating call is logged with the token's name, and no token ever
// reaches the log.
func TestMutatingCallsLoggedWithTokenName(t *testing.T) {
	var logs lockedBuffer
	f := fleettest.Start(t, fleet.Options{Agents: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	tok := makeToken(t, f.Client(), "deploy", api.RoleOperator)
	spec, err := api.ParseJobSpec([]byte("target: {scope: all}\ntasks: [{backend: ping, action: echo}]"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := f.ClientWithToken(tok).SubmitJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client().WaitJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ClientWithToken(tok).CancelJob(context.Background(), j.ID); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("cancel of a finished job: %v, want 409", err)
	}
	if _, err := f.Client().RevokeToken(context.Background(), "deploy"); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if testing.Verbose() {
		t.Log(out)
	}
	for _, want := range []string{
		`method=POST path=/token by=admin role=admin status=201`,
		`method=POST path=/job by=deploy role=operator status=202`,
		`job=` + j.ID + ` by=deploy`,
		`method=POST path=/job/` + j.ID + `/cancel by=deploy role=operator status=409`,
		`method=DELETE path=/token/deploy by=admin role=admin status=200`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	for _, secret := range []string{tok, f.AdminToken()} {
		if strings.Contains(out, secret) {
			t.Fatalf("a token is in the log")
		}
	}
}

// A token made through one controller works on its peers, and once revoked
// through one it is refused by every controller.
func TestRevokedTokenRefusedOnEveryController(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startPeers(ctx, t, []string{"c1", "c2", "c3"}, []string{"n1"}, nil)
	tok := makeToken(t, p.clients["c1"], "ci", api.RoleRead)
	for name, c := range p.ctls {
		waitFor(t, 5*time.Second, "token known on "+name, func() bool {
			code, _ := rawCall(t, c, http.MethodGet, "/nodes", tok, nil)
			return code == http.StatusOK
		})
	}
	// Each controller's admin token is honoured by the others too.
	if code, msg := rawCall(t, p.ctls["c3"], http.MethodGet, "/tokens", p.ctls["c1"].AdminToken(), nil); code != http.StatusOK {
		t.Fatalf("c1's admin token on c3: %d %s", code, msg)
	}
	if _, err := p.clients["c2"].RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	// Revoking answers once the controller that revoked refuses the token.
	if code, msg := rawCall(t, p.ctls["c2"], http.MethodGet, "/nodes", tok, nil); code != http.StatusUnauthorized || !strings.Contains(msg, "revoked") {
		t.Fatalf("c2 right after revoking: %d %q", code, msg)
	}
	for name, c := range p.ctls {
		waitFor(t, 5*time.Second, "revoked token refused on "+name, func() bool {
			code, msg := rawCall(t, c, http.MethodGet, "/nodes", tok, nil)
			return code == http.StatusUnauthorized && strings.Contains(msg, `"ci" was revoked`)
		})
	}
	ts, err := p.clients["c3"].ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Name == "ci" && (ti.RevokedAt == nil || ti.RevokedBy == "") {
			t.Fatalf("token list: %+v, want ci revoked with by whom", ti)
		}
	}
	// The name is free again; the old token stays refused.
	if _, err := p.clients["c1"].CreateToken(ctx, "ci", api.RoleRead); err != nil {
		t.Fatalf("reuse a revoked name: %v", err)
	}
	if _, err := p.clients["c1"].CreateToken(ctx, "ci", api.RoleRead); !api.IsStatus(err, http.StatusConflict) {
		t.Fatalf("a live name twice: %v, want 409", err)
	}
	if code, _ := rawCall(t, p.ctls["c1"], http.MethodGet, "/nodes", tok, nil); code != http.StatusUnauthorized {
		t.Fatalf("old token after its name was reused: %d", code)
	}
	// The admin names stay free for controllers that start later.
	for _, name := range []string{"admin", "admin-c4"} {
		if _, err := p.clients["c1"].CreateToken(ctx, name, api.RoleAdmin); !api.IsStatus(err, http.StatusBadRequest) {
			t.Errorf("token named %s: %v, want 400", name, err)
		}
	}
}

// The first start writes the admin token to DATA_DIR/admin-token, readable
// by the owner only, and later starts reuse it. Only its hash is stored.
func TestAdminTokenFile(t *testing.T) {
	dataDir, natsAddr := t.TempDir(), freeAddr(t)
	c, cl, stop := startController(t, dataDir, natsAddr)
	path := filepath.Join(dataDir, controller.AdminTokenFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %o, want 0600", path, st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	tok := strings.TrimSpace(string(b))
	if tok != c.AdminToken() || !strings.HasPrefix(tok, "grid_") || len(tok) < 40 {
		t.Fatalf("admin token file %q", tok)
	}
	ts, err := cl.ListTokens(context.Background())
	if err != nil || len(ts) != 1 || ts[0].Name != "admin" || ts[0].Role != api.RoleAdmin {
		t.Fatalf("tokens after first start: %+v %v", ts, err)
	}
	// The bucket holds a hash, never the token.
	nc, err := nats.Connect(c.NATSURL(), c.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), api.BucketTokens)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), "admin")
	nc.Close()
	if err != nil || strings.Contains(string(e.Value()), tok) || !strings.Contains(string(e.Value()), `"sha256"`) {
		t.Fatalf("stored admin token record: %s %v", e.Value(), err)
	}
	stop()
	<-c.Done()

	c2, cl2, stop2 := startController(t, dataDir, natsAddr)
	defer func() { stop2(); <-c2.Done() }()
	if c2.AdminToken() != tok {
		t.Fatalf("restart made a new admin token")
	}
	if ts, err := cl2.ListTokens(context.Background()); err != nil || len(ts) != 1 {
		t.Fatalf("tokens after restart: %+v %v", ts, err)
	}
}

// The controller's allow list refuses actions outside it, and dangerous
// actions need a role of dangerous_roles unless run in check mode; each
// refusal is a 403 naming the action.
func TestSubmitPolicy(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1,
		// The agent offers everything, dangerous actions included; its
		// resolver file is in its sandbox.
		Agent: func(_ int, c *agent.Config) { c.Allow = []string{"*"} },
		Controller: func(c *controller.Config) {
			c.Allow = []string{"ping", "net"}
		}})
	ctx := context.Background()
	op := f.ClientWithToken(makeToken(t, f.Client(), "deploy", api.RoleOperator))
	job := func(yaml string) *api.JobSpec {
		t.Helper()
		spec, err := api.ParseJobSpec([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	dnsSet := "target: {scope: all}\ntasks: [{backend: ping, action: echo}, {backend: net, action: dns_set, params: {servers: 192.0.2.53}}]"
	_, err := op.SubmitJob(ctx, job(dnsSet))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "tasks[1]: net.dns_set is a dangerous action") ||
		!strings.Contains(ae.Message, "role admin") {
		t.Fatalf("operator submits net.dns_set: %v, want 403 naming the action and the role", err)
	}
	// In check mode it changes nothing, so an operator may preview it.
	if _, err := op.SubmitJob(ctx, job(dnsSet+"\ncheck_mode: true")); err != nil {
		t.Fatalf("operator submits net.dns_set in check mode: %v", err)
	}
	if j, err := f.Client().SubmitJob(ctx, job(dnsSet)); err != nil {
		t.Fatalf("admin submits net.dns_set: %v", err)
	} else if final, err := f.Client().WaitJob(ctx, j.ID); err != nil || final.Status != api.JobCompleted {
		t.Fatalf("admin's dns_set job: %+v %v", final, err)
	}
	// Outside the controller's allow list, for every role.
	_, err = f.Client().SubmitJob(ctx, job("target: {scope: all}\ntasks: [{backend: test, action: fail}]"))
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "test.fail is not in this controller's allow list") {
		t.Fatalf("test.fail outside the allow list: %v, want 403 naming it", err)
	}
}
