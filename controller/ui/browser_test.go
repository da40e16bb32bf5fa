package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// The browser tests drive the dashboard in a real headless Chromium against
// a real in-process fleet. They skip, saying so, when no browser is
// installed (apt-get install chromium; or set GRID_CHROMIUM to a binary).
// On failure each saves a screenshot of its tab to $TMPDIR; with
// GRID_UI_SCREENSHOTS=<dir> they also save one of every view there.

// chromium finds a browser binary, or "".
func chromium() string {
	if p := os.Getenv("GRID_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts a headless browser for the test and returns its
// context; tabs are made from it with newTab.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no Chromium found: install it (apt-get install -y chromium) or set GRID_CHROMIUM to run the dashboard's browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1400, 1000))
	if os.Geteuid() == 0 {
		// Chromium refuses to sandbox itself as root (CI containers).
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// newTab opens a tab (its own sessionStorage, so its own sign-in) that
// saves a screenshot if the test fails.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("screenshot: %v", err)
			return
		}
		name := filepath.Join(os.TempDir(), "grid-ui-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+".png")
		if err := os.WriteFile(name, png, 0o644); err == nil {
			t.Logf("screenshot of the failure: %s", name)
		}
	})
	return ctx
}

// do runs browser actions with a deadline.
func do(t *testing.T, tab context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is truthy.
func waitJS(t *testing.T, tab context.Context, d time.Duration, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// snap saves a screenshot of the tab under GRID_UI_SCREENSHOTS, if set.
func snap(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv("GRID_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Error(err)
	}
}

// gate sits between the browser and the controller (plain HTTP on
// loopback in front of the HTTPS API, trusting the controller's CA) and
// records the
// Authorization header of every API request, so a test can check that the
// page sends its token; every request reaches the real controller, whose
// own token check answers.
type gate struct {
	srv *httptest.Server
	mu  sync.Mutex
	// auth holds each API request's "METHOD path Authorization".
	auth []string
}

// The tokens the browser signs in with: real tokens of the fleet's
// controller, made by startGate.
var (
	opsToken     string // role operator
	adminToken   string // role admin
	readToken    string // role read
	revokedToken string // made, then revoked (401)
	noViewToken  string // role metrics: valid, but may not read (403)
)

func startGate(t *testing.T, f *fleet.Fleet) *gate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mk := func(name string, role api.Role) string {
		tok, err := f.Client().CreateToken(ctx, name, role)
		if err != nil {
			t.Fatalf("create token %s: %v", name, err)
		}
		return tok.Token
	}
	opsToken, readToken, noViewToken = mk("ops", api.RoleOperator), mk("viewer", api.RoleRead), mk("scraper", api.RoleMetrics)
	revokedToken = mk("gone", api.RoleOperator)
	adminToken = mk("root", api.RoleAdmin)
	if _, err := f.Client().RevokeToken(ctx, "gone"); err != nil {
		t.Fatalf("revoke token: %v", err)
	}
	u, err := url.Parse(f.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // the job's event stream goes out as it comes
	// The browser speaks plain HTTP to the gate on loopback; the gate
	// speaks HTTPS to the controller and verifies it against the
	// controller's CA, as a reverse proxy in front of GRID would.
	proxy.Transport = f.HTTPClient().Transport
	g := &gate{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The browser asks for /favicon.ico on its own, without the page.
		if !strings.HasPrefix(r.URL.Path, "/ui/") && r.URL.Path != "/" && r.URL.Path != "/favicon.ico" {
			g.mu.Lock()
			g.auth = append(g.auth, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
			g.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gate) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.auth...)
}

// signIn opens the dashboard in the tab and signs in with a token, by
// keyboard: the token field has focus on arrival, Enter submits.
func signIn(t *testing.T, tab context.Context, base, token string) {
	t.Helper()
	do(t, tab, 15*time.Second, "open the sign-in page",
		chromedp.Navigate(base+"/ui/#/signin"),
		chromedp.WaitVisible(chromedp.ID("token")))
	waitJS(t, tab, 5*time.Second, "focus on the token field", `document.activeElement && document.activeElement.id === 'token'`)
	do(t, tab, 10*time.Second, "type the token", chromedp.SendKeys(chromedp.ID("token"), token+kb.Enter))
}

// TestDashboardInBrowser signs in, watches a job run live to completion,
// cancels one and sees a node go offline, on one fleet and one browser.
func TestDashboardInBrowser(t *testing.T) {
	browser := startBrowser(t)
	// node-1 enables every action of three backends, a dangerous one
	// (proc.signal) among them, for the launcher to flag; no job here
	// runs it.
	f := fleettest.Start(t, fleet.Options{Agents: 3, Agent: func(i int, c *agent.Config) {
		if i == 0 {
			c.Allow = []string{"ping", "test", "proc"}
		}
	}})
	g := startGate(t, f)
	base := g.srv.URL

	t.Run("sign in", func(t *testing.T) {
		tab := newTab(t, browser)
		// The controller's root leads to the dashboard, which asks for a
		// token before anything else.
		do(t, tab, 15*time.Second, "open the controller's root",
			chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
		if loc := eval[string](t, tab, `location.pathname + location.hash`); loc != "/ui/#/signin" {
			t.Errorf("root led to %s, want /ui/#/signin", loc)
		}
		snap(t, tab, "signin")

		// A token the API refuses: back at sign-in with its message.
		signIn(t, tab, base, revokedToken)
		waitJS(t, tab, 10*time.Second, "the refusal", `document.getElementById('signin-msg').textContent.includes('was revoked')`)
		if h := eval[string](t, tab, `location.hash`); h != "#/signin" {
			t.Errorf("after a refused token the page is %s", h)
		}

		// A token whose role may not view: the same, with the 403's message.
		signIn(t, tab, base, noViewToken)
		waitJS(t, tab, 10*time.Second, "the 403", `document.getElementById('signin-msg').textContent.includes('Not allowed') && document.getElementById('signin-msg').textContent.includes('needs role read')`)
		if tok := eval[*string](t, tab, `sessionStorage.getItem('grid.token')`); tok != nil {
			t.Errorf("a refused token is kept: %q", *tok)
		}

		before := len(g.requests())
		signIn(t, tab, base, opsToken)
		// Signed in, the overview is the landing page.
		waitJS(t, tab, 15*time.Second, "three online nodes in the overview",
			`location.hash === '#/overview' && document.getElementById('ov-online').textContent === '3'`)
		if got := eval[string](t, tab, `document.getElementById('ov-offline').textContent`); got != "0" {
			t.Errorf("overview's offline count %q", got)
		}
		do(t, tab, 10*time.Second, "open the fleet view", chromedp.Click(chromedp.ID("nav-fleet")))
		waitJS(t, tab, 15*time.Second, "three online nodes in the fleet view",
			`document.querySelectorAll('#fleet-table tr[data-node] .st-online').length === 3`)
		if got := eval[string](t, tab, `document.getElementById('fleet-online').textContent`); got != "3" {
			t.Errorf("online count %q", got)
		}
		// Every API request after sign-in carried the token.
		reqs := g.requests()[before:]
		if len(reqs) < 2 {
			t.Fatalf("API requests after sign-in: %v", reqs)
		}
		for _, r := range reqs {
			if !strings.HasSuffix(r, " Bearer "+opsToken) {
				t.Errorf("request without the token: %q", r)
			}
		}
		if tok := eval[string](t, tab, `sessionStorage.getItem('grid.token')`); tok != opsToken {
			t.Errorf("token kept as %q", tok)
		}
	})

	t.Run("watch a job run live", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		tab := newTab(t, browser)
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{
			{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "2s"}},
			{Backend: "ping", Action: "echo", Params: api.Params{"message": "hello from the grid"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		do(t, tab, 10*time.Second, "open the job", chromedp.Evaluate[chromedp.Void](`location.hash = '#/job/`+j.ID+`'`),
			chromedp.WaitVisible(chromedp.ID("job-grid")))
		// Marks the page: a full reload would lose it.
		do(t, tab, 5*time.Second, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__samepage = 1`))
		waitJS(t, tab, 10*time.Second, "a step shown running", `document.querySelectorAll('#job-grid .cellbtn.st-running').length > 0`)
		waitJS(t, tab, 30*time.Second, "the job to complete", `document.body.dataset.jobStatus === 'completed' && document.body.dataset.jobEnded === '`+j.ID+`'`)
		if n := eval[int](t, tab, `document.querySelectorAll('#job-grid .cellbtn.st-success').length`); n != 6 {
			t.Errorf("%d successful cells, want 3 nodes × 2 steps", n)
		}
		if eval[int](t, tab, `window.__samepage || 0`) != 1 {
			t.Errorf("the page reloaded while the job ran")
		}
		do(t, tab, 5*time.Second, "open node-2's second step",
			chromedp.Click(chromedp.CSS(`#job-grid button[data-node="node-2"][data-step="1"]`)),
			chromedp.WaitVisible(chromedp.ID("cell")))
		if out := eval[string](t, tab, `document.getElementById('cell-output').textContent`); out != "hello from the grid" {
			t.Errorf("output %q", out)
		}
		if a := eval[string](t, tab, `document.querySelector('#cell-meta .cell-attempts').textContent`); a != "1" {
			t.Errorf("attempts %q", a)
		}
		if n := eval[int](t, tab, `document.querySelectorAll('#cell-events li').length`); n < 2 {
			t.Errorf("timeline has %d entries", n)
		}
		if c := eval[bool](t, tab, `document.getElementById('job-cancel').hidden`); !c {
			t.Errorf("a finished job offers cancel")
		}
		// A completed job can be run again, but has no failed nodes.
		if r := eval[[]bool](t, tab, `[document.getElementById('job-retry').hidden, document.getElementById('job-retry-failed').hidden]`); r[0] || !r[1] {
			t.Errorf("completed job: retry hidden %v, retry failed nodes hidden %v; want shown, hidden", r[0], r[1])
		}
		snap(t, tab, "job")

		// The jobs view lists it; its filters narrow the list.
		do(t, tab, 10*time.Second, "open the jobs view", chromedp.Click(chromedp.ID("nav-jobs")))
		waitJS(t, tab, 10*time.Second, "the job listed as completed",
			`(document.querySelector('#jobs-table tr[data-job="`+j.ID+`"] .status') || {}).textContent === 'completed'`)
		if tgt := eval[string](t, tab, `document.querySelector('#jobs-table tr[data-job="`+j.ID+`"] td:nth-child(3)').textContent`); tgt != "all" {
			t.Errorf("target shown as %q", tgt)
		}
		snap(t, tab, "jobs")
		do(t, tab, 5*time.Second, "search for another job", chromedp.SendKeys(chromedp.ID("jobs-q"), "no-such-job"))
		waitJS(t, tab, 10*time.Second, "an empty list", `document.querySelector('#jobs-table tbody').textContent.includes('No job matches')`)
	})

	t.Run("a job's spec, phases and durations", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// A barrier step, then a pipeline whose second step runs only
		// on failure (so it is skipped here).
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Strategy: api.StrategyContinue, Tasks: []api.Phase{
			{Backend: "ping", Action: "echo", Params: api.Params{"message": "yes: a colon"}},
			{Condition: api.ConditionOnSuccess, Tasks: []api.Phase{
				{Backend: "ping", Action: "echo"},
				{Backend: "ping", Action: "echo", Condition: api.ConditionOnFailure},
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		tab := newTab(t, browser)
		do(t, tab, 5*time.Second, "a 1400×900 window", chromedp.EmulateViewport(1400, 900))
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 10*time.Second, "open the job", chromedp.Evaluate[chromedp.Void](`location.hash = '#/job/`+j.ID+`'`))
		waitJS(t, tab, 30*time.Second, "the job to end", `document.body.dataset.jobEnded === '`+j.ID+`'`)

		// The header row over the steps says which phase is a barrier and
		// which a pipeline, with their conditions.
		phases := eval[[]string](t, tab, `Array.from(document.querySelectorAll('#job-grid th.phase')).map((th) => th.dataset.kind + ' ' + th.dataset.condition + ' ' + th.colSpan + ' ' + th.textContent)`)
		want := []string{"barrier always 1 Step 1 · barrier · always", "pipeline on_success 2 Steps 2–3 · pipeline · on success"}
		if !slices.Equal(phases, want) {
			t.Errorf("phase headers %q, want %q", phases, want)
		}
		if c := eval[string](t, tab, `document.querySelector('#job-grid th[data-step="2"]').textContent`); c != "3. ping.echoon failure" {
			t.Errorf("the on_failure step's header %q", c)
		}

		// The spec, as YAML.
		spec := eval[string](t, tab, `document.getElementById('job-spec').textContent`)
		for _, line := range []string{"target:\n  scope: all", "strategy: continue", "  - backend: ping\n    action: echo\n    params:\n      message: \"yes: a colon\"",
			"  - tasks:\n      - backend: ping", "        condition: on_failure\n    condition: on_success"} {
			if !strings.Contains(spec, line) {
				t.Errorf("spec lacks %q:\n%s", line, spec)
			}
		}
		if strings.Contains(spec, "results") || strings.Contains(spec, "status") {
			t.Errorf("spec shows the job's state:\n%s", spec)
		}

		// Opening the spec pushes the grid's cells toward the fold; the
		// panel of a clicked cell is scrolled into view all the same.
		do(t, tab, 5*time.Second, "open the spec", chromedp.Click(chromedp.CSS(`#job-spec-box summary`)))
		do(t, tab, 5*time.Second, "open node-3's first step", chromedp.Click(chromedp.CSS(`#job-grid button[data-node="node-3"][data-step="0"]`)),
			chromedp.WaitVisible(chromedp.ID("cell")))
		waitJS(t, tab, 5*time.Second, "the panel's heading and output in the window",
			`(() => { const a = document.getElementById('cell-h').getBoundingClientRect(), b = document.getElementById('cell-output').getBoundingClientRect(); return a.top >= 0 && b.bottom <= innerHeight; })()`)
		// Durations read as people write them, not as Go prints them.
		d := eval[string](t, tab, `document.querySelector('#cell-meta .cell-duration').textContent`)
		if !regexp.MustCompile(`^\d+(\.\d)? (ms|s)$`).MatchString(d) {
			t.Errorf("duration shown as %q", d)
		}
		snap(t, tab, "job-spec")
	})

	t.Run("cancel a job", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
			Tasks: []api.Phase{{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "60s"}}, {Backend: "ping", Action: "echo"}}})
		if err != nil {
			t.Fatal(err)
		}
		tab := newTab(t, browser)
		open := func() {
			do(t, tab, 10*time.Second, "open the job", chromedp.Evaluate[chromedp.Void](`location.hash = '#/job/`+j.ID+`'`))
			waitJS(t, tab, 15*time.Second, "the step running", `document.querySelectorAll('#job-grid .cellbtn.st-running').length === 1`)
		}
		// A read token may view the job but not cancel it: the page says
		// so and keeps showing the job.
		signIn(t, tab, base, readToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		open()
		do(t, tab, 5*time.Second, "cancel, confirm", chromedp.Click(chromedp.ID("job-cancel")), chromedp.Click(chromedp.ID("job-cancel")))
		waitJS(t, tab, 10*time.Second, "the refusal", `document.getElementById('job-msg').textContent.includes('Not allowed to cancel') && document.getElementById('job-msg').textContent.includes('needs role operator')`)
		if h := eval[string](t, tab, `location.hash`); h != "#/job/"+j.ID {
			t.Errorf("a refused cancel left the job view for %s", h)
		}
		if got, err := f.Client().GetJob(ctx, j.ID); err != nil || got.Status != api.JobRunning {
			t.Fatalf("job after a refused cancel: %v %v", got.Status, err)
		}

		// An operator cancels it; the view follows it to cancelled.
		do(t, tab, 5*time.Second, "sign out", chromedp.Click(chromedp.ID("signout")))
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the job view again", `location.hash === '#/job/`+j.ID+`'`)
		waitJS(t, tab, 15*time.Second, "the step running", `document.querySelectorAll('#job-grid .cellbtn.st-running').length === 1`)
		do(t, tab, 5*time.Second, "arm cancel", chromedp.Focus(chromedp.ID("job-cancel")), chromedp.KeyEvent(kb.Enter))
		if txt := eval[string](t, tab, `document.getElementById('job-cancel').textContent`); txt != "Confirm cancel" {
			t.Errorf("cancel asked no confirmation: %q", txt)
		}
		do(t, tab, 5*time.Second, "confirm cancel", chromedp.KeyEvent(kb.Enter))
		waitJS(t, tab, 15*time.Second, "the job cancelled", `document.body.dataset.jobStatus === 'cancelled' && document.body.dataset.jobEnded === '`+j.ID+`'`)
		if got, err := f.Client().GetJob(ctx, j.ID); err != nil || got.Status != api.JobCancelled {
			t.Fatalf("job after cancel: %v %v", got.Status, err)
		}
		// The step that never ran is not shown as waiting on an ended job.
		if sum := eval[string](t, tab, `document.getElementById('job-summary').textContent`); strings.Contains(sum, "waiting") || !strings.Contains(sum, "1 not run") {
			t.Errorf("summary of the cancelled job %q, want its second step counted as not run", sum)
		}
		if c := eval[string](t, tab, `document.querySelector('#job-grid button[data-node="node-1"][data-step="1"]').textContent`); c != "not run" {
			t.Errorf("the step that never ran reads %q, want not run", c)
		}

		// The cancelled job's node is retried from the page: the new job
		// opens, linked to the old one, on node-1 alone.
		waitJS(t, tab, 10*time.Second, "retry offered", `!document.getElementById('job-retry-failed').hidden && !document.getElementById('job-retry').hidden`)
		do(t, tab, 5*time.Second, "retry failed nodes", chromedp.Click(chromedp.ID("job-retry-failed")))
		waitJS(t, tab, 15*time.Second, "the new job's page", `location.hash.startsWith('#/job/') && location.hash !== '#/job/`+j.ID+`' && (document.getElementById('job-retry-of') || {}).textContent === '`+j.ID+`'`)
		newID := strings.TrimPrefix(eval[string](t, tab, `decodeURIComponent(location.hash)`), "#/job/")
		retried, err := f.Client().GetJob(ctx, newID)
		if err != nil {
			t.Fatal(err)
		}
		if retried.RetryOf != j.ID || !slices.Equal(retried.Nodes, []string{"node-1"}) || retried.SubmittedBy != "ops" {
			t.Errorf("retried job: retry_of %q nodes %v submitted_by %q; want %s, [node-1], ops", retried.RetryOf, retried.Nodes, retried.SubmittedBy, j.ID)
		}
		if _, err := f.Client().CancelJob(ctx, newID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pause and resume a schedule", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := f.Client().CreateSchedule(ctx, &api.ScheduleSpec{Name: "nightly-ping", Cron: "0 3 * * *", TimeZone: "Europe/Berlin",
			Job: api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}}}); err != nil {
			t.Fatal(err)
		}
		// One that fires at once, for its last job's status.
		if _, err := f.Client().CreateSchedule(ctx, &api.ScheduleSpec{Name: "often", Cron: "@every 1s",
			Job: api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}}}); err != nil {
			t.Fatal(err)
		}
		tab := newTab(t, browser)
		signIn(t, tab, base, readToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 10*time.Second, "open the schedules view", chromedp.Click(chromedp.ID("nav-schedules")))
		row := `document.querySelector('#schedules-table tr[data-schedule="nightly-ping"]')`
		waitJS(t, tab, 10*time.Second, "the schedule listed", `!!`+row+` && `+row+`.querySelector('.state').textContent === 'active'`)
		if got := eval[string](t, tab, row+`.querySelector('td:nth-child(3)').textContent + ' ' + `+row+`.querySelector('td:nth-child(2)').textContent`); got != "Europe/Berlin 0 3 * * *" {
			t.Errorf("row shows %q", got)
		}
		// The next run is in the schedule's zone, named, and in the
		// browser's, named.
		sc, err := f.Client().GetSchedule(ctx, "nightly-ping")
		if err != nil || sc.NextRun == nil {
			t.Fatalf("schedule: %+v %v", sc, err)
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if got, want := eval[string](t, tab, row+`.querySelector('.next .zoned').textContent`), sc.NextRun.In(berlin).Format("2006-01-02 15:04")+" Europe/Berlin"; got != want || !strings.Contains(got, " 03:00 ") {
			t.Errorf("next run shown as %q, want %q", got, want)
		}
		localTZ := eval[string](t, tab, `Intl.DateTimeFormat().resolvedOptions().timeZone`)
		local, err := time.LoadLocation(localTZ)
		if err != nil {
			t.Fatalf("the browser's zone %q: %v", localTZ, err)
		}
		if got, want := eval[string](t, tab, row+`.querySelector('.next .local').textContent`), sc.NextRun.In(local).Format("2006-01-02 15:04")+" your time ("+localTZ+")"; got != want {
			t.Errorf("next run in the browser's zone shown as %q, want %q", got, want)
		}
		if got := eval[string](t, tab, row+`.querySelector('.target').textContent`); got != "all" {
			t.Errorf("target shown as %q", got)
		}
		// The schedule that fired shows its last job, with the job's status.
		often := `document.querySelector('#schedules-table tr[data-schedule="often"]')`
		waitJS(t, tab, 15*time.Second, "the last job's status", `!!`+often+` && !!`+often+`.querySelector('.lastjob .st-completed') && `+often+`.querySelector('.target').textContent === 'node:node-2'`)
		if _, err := f.Client().PauseSchedule(ctx, "often"); err != nil {
			t.Fatal(err)
		}

		// A read token may view but not pause.
		do(t, tab, 5*time.Second, "pause as a reader", chromedp.Click(chromedp.CSS(`#schedules-table button[data-id="nightly-ping"]`)))
		waitJS(t, tab, 10*time.Second, "the refusal", `document.getElementById('schedules-msg').textContent.includes('Not allowed to pause') && document.getElementById('schedules-msg').textContent.includes('needs role operator')`)
		snap(t, tab, "schedules")

		do(t, tab, 5*time.Second, "sign out", chromedp.Click(chromedp.ID("signout")))
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the schedules view again", `location.hash === '#/schedules' && !!`+row)
		do(t, tab, 5*time.Second, "pause", chromedp.Click(chromedp.CSS(`#schedules-table button[data-id="nightly-ping"]`)))
		waitJS(t, tab, 10*time.Second, "shown paused", row+`.querySelector('.state').textContent === 'paused' && `+row+`.querySelector('button').textContent === 'Resume'`)
		if sc, err := f.Client().GetSchedule(ctx, "nightly-ping"); err != nil || !sc.Paused {
			t.Fatalf("schedule after pause: %+v %v", sc, err)
		}
		do(t, tab, 5*time.Second, "resume", chromedp.Click(chromedp.CSS(`#schedules-table button[data-id="nightly-ping"]`)))
		waitJS(t, tab, 10*time.Second, "shown active", row+`.querySelector('.state').textContent === 'active'`)
		if sc, err := f.Client().GetSchedule(ctx, "nightly-ping"); err != nil || sc.Paused || sc.NextRun == nil {
			t.Fatalf("schedule after resume: %+v %v", sc, err)
		}
	})

	t.Run("read the audit", func(t *testing.T) {
		// The schedule's pause and resume above were ops's.
		tab := newTab(t, browser)
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 10*time.Second, "open the audit view as an operator", chromedp.Click(chromedp.ID("nav-audit")))
		waitJS(t, tab, 10*time.Second, "the refusal, still signed in",
			`document.getElementById('audit-msg').textContent.includes('Not allowed') && location.hash === '#/audit' && !!sessionStorage.getItem('grid.token')`)
		do(t, tab, 5*time.Second, "sign out", chromedp.Click(chromedp.ID("signout")))
		signIn(t, tab, base, f.AdminToken())
		waitJS(t, tab, 10*time.Second, "the audit view again", `location.hash === '#/audit' && document.querySelectorAll('#audit-table tr[data-seq]').length > 0`)
		do(t, tab, 5*time.Second, "filter ops's records", chromedp.Evaluate[chromedp.Void](
			`document.getElementById('audit-actor').value = 'ops'; document.getElementById('audit-apply').click()`))
		rows := `[...document.querySelectorAll('#audit-table tr[data-seq]')]`
		waitJS(t, tab, 10*time.Second, "ops's records only",
			rows+`.length >= 3 && `+rows+`.every((r) => r.querySelector('.actor').textContent === 'ops')`)
		// ops's cancel and retry (above), the schedule's pause and resume,
		// and its refused look at this view, in that order.
		if got := eval[string](t, tab, rows+`.map((r) => r.querySelector('.action').textContent).join(' ')`); got != "job.cancel job.retry schedule.pause schedule.resume auth.denied" {
			t.Errorf("ops's actions shown: %q", got)
		}
		snap(t, tab, "audit")
	})

	t.Run("launch a job from the form", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		pick := func(tab context.Context, id, value string) {
			do(t, tab, 5*time.Second, "choose "+value+" in "+id, chromedp.Evaluate[chromedp.Void](
				`{ const s = document.getElementById('`+id+`'); s.value = '`+value+`'; s.dispatchEvent(new Event('change', { bubbles: true })); }`))
		}
		// A reader is not offered the launcher, and is told why on its page.
		tab := newTab(t, browser)
		signIn(t, tab, base, readToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 5*time.Second, "open the launcher", chromedp.Evaluate[chromedp.Void](`location.hash = '#/launch'`))
		waitJS(t, tab, 10*time.Second, "the refusal", `document.getElementById('launch-msg').textContent.includes('may not submit jobs') && document.getElementById('launch-form').hidden`)
		if !eval[bool](t, tab, `document.getElementById('nav-launch').hidden`) {
			t.Errorf("a reader sees the launcher in the menu")
		}

		tab = newTab(t, browser)
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the launcher in the menu", `location.hash === '#/overview' && !document.getElementById('nav-launch').hidden`)
		do(t, tab, 5*time.Second, "open the launcher", chromedp.Click(chromedp.ID("nav-launch")))
		waitJS(t, tab, 10*time.Second, "the catalog", `!!document.querySelector('#launch-action option[value="ping.sleep"]')`)
		if !eval[bool](t, tab, `document.querySelector('#launch-action option[value="apt.remove"]').disabled`) {
			t.Errorf("an action the nodes do not enable can be chosen")
		}
		waitJS(t, tab, 10*time.Second, "the count of all nodes", `document.getElementById('launch-count').textContent === '3 nodes online now'`)
		// A dangerous action says so, in the list and once chosen.
		pick(tab, "launch-action", "proc.signal")
		waitJS(t, tab, 5*time.Second, "the warning", `!document.getElementById('launch-danger').hidden && document.querySelector('#launch-action option[value="proc.signal"]').textContent.includes('dangerous')`)
		// A sensitive param is a password field.
		pick(tab, "launch-action", "test.secret")
		waitJS(t, tab, 5*time.Second, "the secret's field", `(document.getElementById('param-value') || {}).type === 'password'`)
		pick(tab, "launch-action", "ping.echo")
		if !eval[bool](t, tab, `document.getElementById('launch-danger').hidden`) {
			t.Errorf("ping.echo is flagged dangerous")
		}

		// The form follows the schema: a required duration is checked
		// before anything is sent.
		pick(tab, "launch-action", "ping.sleep")
		waitJS(t, tab, 5*time.Second, "the duration field", `!!document.getElementById('param-duration') && document.querySelector('label[for="param-duration"]').textContent.includes('required')`)
		do(t, tab, 5*time.Second, "preview without a duration", chromedp.Click(chromedp.ID("launch-preview")))
		waitJS(t, tab, 5*time.Second, "the missing duration", `document.getElementById('param-duration-err').textContent === 'duration required' && document.activeElement.id === 'param-duration'`)
		do(t, tab, 5*time.Second, "a bad duration", chromedp.SendKeys(chromedp.ID("param-duration"), "soon"), chromedp.Click(chromedp.ID("launch-preview")))
		waitJS(t, tab, 5*time.Second, "the bad duration", `document.getElementById('param-duration-err').textContent.includes('must be a duration')`)

		// ping.echo on node-2: the count, a preview in check mode, then Run.
		pick(tab, "launch-action", "ping.echo")
		waitJS(t, tab, 5*time.Second, "the message field with its default", `(document.getElementById('param-message') || {}).placeholder === 'pong'`)
		pick(tab, "launch-scope", "node")
		do(t, tab, 5*time.Second, "fill the form", chromedp.SendKeys(chromedp.ID("param-message"), "launched from the form"),
			chromedp.SendKeys(chromedp.ID("launch-value"), "node-2"))
		waitJS(t, tab, 10*time.Second, "the count of node-2", `document.getElementById('launch-count').textContent === '1 node (online)'`)
		if !eval[bool](t, tab, `document.getElementById('launch-run').disabled`) {
			t.Errorf("Run is offered before a preview")
		}
		do(t, tab, 5*time.Second, "preview", chromedp.Click(chromedp.ID("launch-preview")))
		waitJS(t, tab, 20*time.Second, "the preview's outcome", `document.getElementById('launch-preview-result').textContent.includes('Check mode completed on 1 node') && !document.getElementById('launch-run').disabled`)
		previewID := strings.TrimPrefix(eval[string](t, tab, `decodeURIComponent(document.getElementById('launch-preview-job').getAttribute('href'))`), "#/job/")
		if pj, err := f.Client().GetJob(ctx, previewID); err != nil || !pj.CheckMode {
			t.Fatalf("preview job %s: check mode %v, %v", previewID, pj != nil && pj.CheckMode, err)
		}
		snap(t, tab, "launch")
		do(t, tab, 5*time.Second, "run", chromedp.Click(chromedp.ID("launch-run")))
		waitJS(t, tab, 20*time.Second, "the new job's live page, completed", `location.hash.startsWith('#/job/') && location.hash !== '#/job/`+previewID+`' && document.body.dataset.jobStatus === 'completed'`)
		id := strings.TrimPrefix(eval[string](t, tab, `decodeURIComponent(location.hash)`), "#/job/")
		j, err := f.Client().GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.CheckMode || j.Target.String() != "node:node-2" || j.SubmittedBy != "ops" || len(j.Tasks) != 1 || j.Tasks[0].Params["message"] != "launched from the form" {
			t.Errorf("launched job: check mode %v, target %s, by %s, tasks %+v", j.CheckMode, j.Target, j.SubmittedBy, j.Tasks)
		}
		if out := j.Results.Node(0, "node-2"); out == nil || out.Output != "launched from the form" {
			t.Errorf("node-2's result: %+v", out)
		}
	})

	t.Run("the overview: counts, charts, a failure leads to its job", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var bad *api.Job
		for _, tasks := range [][]api.Phase{{{Backend: "test", Action: "fail"}}, {{Backend: "ping", Action: "echo"}}} {
			j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-2"}, Tasks: tasks})
			if err != nil {
				t.Fatal(err)
			}
			if j, err = f.Client().WaitJob(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			if bad == nil {
				bad = j
			}
		}
		if bad.Status != api.JobFailed {
			t.Fatalf("job %s ended %s, want failed", bad.ID, bad.Status)
		}
		tab := newTab(t, browser)
		signIn(t, tab, base, readToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview' && document.getElementById('ov-online').textContent === '3'`)
		// What the overview should say, from the controller's job list
		// (one page holds them all): every job of this test was made
		// within the hour. The page
		// refreshes every 2s; wait for it to agree.
		var want map[string]int
		for {
			jobs, err := f.Client().ListJobsPage(ctx, api.JobQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			want = map[string]int{"submitted": len(jobs)}
			for _, j := range jobs {
				if j.Status.Terminal() {
					want[string(j.Status)]++
				}
			}
			js := fmt.Sprintf(`(() => {
				const k = (w, key) => (document.querySelector('#ov-' + w + '-rates [data-k="' + key + '"]') || {}).textContent || '';
				return ['hour', 'day'].every((w) => k(w, 'submitted').startsWith('%d submitted') && k(w, 'completed').startsWith('completed %d (') &&
					k(w, 'failed').startsWith('failed %d (') && k(w, 'cancelled').startsWith('cancelled %d (') &&
					k(w, 'partial_failure').startsWith('partial failure %d ('));
			})()`, want["submitted"], want["completed"], want["failed"], want["cancelled"], want["partial_failure"])
			if eval[bool](t, tab, js) {
				break
			}
			select {
			case <-ctx.Done():
				snap(t, tab, "overview-counts")
				t.Fatalf("the overview never showed %v: %s", want, eval[string](t, tab, `document.getElementById('ov-hour-rates').textContent`))
			case <-time.After(200 * time.Millisecond):
			}
		}
		// The hour's chart draws each failure once, in its minute's bar.
		drawn := eval[int](t, tab, `[...document.querySelectorAll('#ov-hour rect.b-failed title')].reduce((a, e) => a + parseInt(e.textContent.split(': ')[1], 10), 0)`)
		if drawn != want["failed"] {
			t.Errorf("the hour's chart draws %d failed jobs, want %d", drawn, want["failed"])
		}
		if n := eval[int](t, tab, `document.querySelectorAll('#ov-day rect').length`); n == 0 {
			t.Errorf("the day's chart draws no bar")
		}
		if got := eval[string](t, tab, `document.getElementById('ov-ctl-table').tBodies[0].textContent`); !strings.Contains(got, "online") {
			t.Errorf("controllers: %s", got)
		}
		if n := eval[int](t, tab, `document.querySelectorAll('#ov-streams tr[data-stream] .st-healthy').length`); n == 0 {
			t.Errorf("no healthy stream listed: %s", eval[string](t, tab, `document.getElementById('ov-streams').textContent`))
		}
		snap(t, tab, "overview")
		row := `#ov-failures tr[data-job="` + bad.ID + `"]`
		if got := eval[string](t, tab, `(document.querySelector('`+row+`') || {}).textContent || ''`); !strings.Contains(got, "failed") || !strings.Contains(got, "node:node-2") {
			t.Errorf("the failure's row: %q", got)
		}
		do(t, tab, 10*time.Second, "follow the failure's link", chromedp.Click(chromedp.CSS(row+` a`)))
		waitJS(t, tab, 10*time.Second, "the failed job's page", `location.hash === '#/job/`+bad.ID+`' && document.getElementById('job-status').textContent === 'failed'`)
	})

	t.Run("see a node go offline", func(t *testing.T) {
		tab := newTab(t, browser)
		signIn(t, tab, base, opsToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 10*time.Second, "open the fleet view", chromedp.Click(chromedp.ID("nav-fleet")))
		waitJS(t, tab, 15*time.Second, "node-3 online", `(document.querySelector('#fleet-table tr[data-node="node-3"] .status') || {}).textContent === 'online' && !!document.body.dataset.fleetRenders`)
		renders := eval[int](t, tab, `Number(document.body.dataset.fleetRenders || 0)`)
		if err := f.KillAgent("node-3"); err != nil {
			t.Fatal(err)
		}
		// node_offline_after is 2s in tests; the view refreshes every 2s.
		waitJS(t, tab, 15*time.Second, "node-3 offline", `(document.querySelector('#fleet-table tr[data-node="node-3"] .status') || {}).textContent === 'offline'`)
		if got := eval[string](t, tab, `document.getElementById('fleet-offline').textContent`); got != "1" {
			t.Errorf("offline count %q", got)
		}
		if eval[int](t, tab, `Number(document.body.dataset.fleetRenders || 0)`) <= renders {
			t.Errorf("the fleet view did not refresh")
		}
		// The status filter shows only it.
		do(t, tab, 5*time.Second, "filter offline", chromedp.Evaluate[chromedp.Void](
			`const s = document.getElementById('fleet-status'); s.value = 'offline'; s.dispatchEvent(new Event('change'))`))
		waitJS(t, tab, 10*time.Second, "only node-3", `document.querySelectorAll('#fleet-table tr[data-node]').length === 1 && !!document.querySelector('#fleet-table tr[data-node="node-3"]')`)
		snap(t, tab, "fleet")
	})

	t.Run("a node's page; an admin revokes a node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeNode, Value: "node-1"},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "on node-1"}}}})
		if err != nil {
			t.Fatal(err)
		}
		tab := newTab(t, browser)
		signIn(t, tab, base, readToken)
		waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
		do(t, tab, 10*time.Second, "open the fleet view", chromedp.Click(chromedp.ID("nav-fleet")))
		// Node ids in the fleet view lead to the node's page.
		do(t, tab, 10*time.Second, "follow node-1's link", chromedp.Click(chromedp.CSS(`#fleet-table tr[data-node="node-1"] a.nodelink`)))
		waitJS(t, tab, 10*time.Second, "node-1's page with the job, node-1 succeeded in it",
			`location.hash === '#/node/node-1' && (document.querySelector('#node-jobs tr[data-job="`+j.ID+`"] .outcome') || {}).textContent === 'success'`)
		if got := eval[string](t, tab, `document.getElementById('node-status').textContent`); got != "online" {
			t.Errorf("status %q", got)
		}
		meta := eval[string](t, tab, `document.getElementById('node-meta').textContent`)
		for _, want := range []string{"Groupsweb.prod", "Hostname", "Last seen"} {
			if !strings.Contains(meta, want) {
				t.Errorf("node facts lack %q: %s", want, meta)
			}
		}
		if !eval[bool](t, tab, `!!document.querySelector('#node-backends tr[data-backend="ping"] li[data-action="echo"]')`) {
			t.Errorf("the ping backend's echo action is not listed")
		}
		// A reader sees no enrollment and no admin action.
		if got := eval[string](t, tab, `document.getElementById('node-enrollment').textContent`); !strings.Contains(got, "admin role needed") {
			t.Errorf("enrollment for a reader: %q", got)
		}
		if !eval[bool](t, tab, `document.getElementById('node-admin').hidden`) {
			t.Errorf("a reader is offered admin actions")
		}
		if h := eval[string](t, tab, `location.hash`); h != "#/node/node-1" {
			t.Errorf("the enrollment's 403 left the page for %s", h)
		}
		snap(t, tab, "node")

		// An admin: the enrollment, and the actions.
		do(t, tab, 5*time.Second, "sign out", chromedp.Click(chromedp.ID("signout")))
		signIn(t, tab, base, adminToken)
		waitJS(t, tab, 10*time.Second, "node-1 admitted", `location.hash === '#/node/node-1' && (document.querySelector('#node-enrollment .st') || {}).textContent === 'admitted' && !document.getElementById('node-admin').hidden`)
		if !eval[bool](t, tab, `document.getElementById('node-approve').hidden`) {
			t.Errorf("an admitted node offers approve")
		}
		// Remove asks first; the server refuses an online node, and the
		// page says why.
		do(t, tab, 5*time.Second, "remove", chromedp.Click(chromedp.ID("node-remove")))
		waitJS(t, tab, 5*time.Second, "the confirmation", `document.getElementById('confirm').open && document.activeElement.id === 'confirm-cancel'`)
		do(t, tab, 5*time.Second, "confirm", chromedp.Click(chromedp.ID("confirm-ok")))
		waitJS(t, tab, 10*time.Second, "the refusal", `document.getElementById('node-msg').textContent.includes('Could not remove node-1') && document.getElementById('node-msg').textContent.includes('is online')`)
		// Revoke, then think again: nothing happens.
		do(t, tab, 5*time.Second, "revoke, cancel", chromedp.Click(chromedp.ID("node-revoke")), chromedp.WaitVisible(chromedp.ID("confirm-cancel")), chromedp.Click(chromedp.ID("confirm-cancel")))
		waitJS(t, tab, 5*time.Second, "the dialog closed", `!document.getElementById('confirm').open`)
		// Escape is a "no" too.
		do(t, tab, 5*time.Second, "revoke, Escape", chromedp.Click(chromedp.ID("node-revoke")), chromedp.WaitVisible(chromedp.ID("confirm-cancel")), chromedp.KeyEvent(kb.Escape))
		waitJS(t, tab, 5*time.Second, "the dialog closed", `!document.getElementById('confirm').open && document.activeElement.id === 'node-revoke'`)
		enrollment := func() string {
			list, err := f.Client().ListEnrollments(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range list {
				if e.NodeID == "node-1" {
					return e.Status
				}
			}
			return "none"
		}
		if st := enrollment(); st != api.EnrollAdmitted {
			t.Fatalf("a cancelled revoke left node-1 %s", st)
		}
		// Revoke: Enter on the button opens the dialog, focus on Cancel.
		do(t, tab, 5*time.Second, "revoke", chromedp.Focus(chromedp.ID("node-revoke")), chromedp.KeyEvent(kb.Enter))
		waitJS(t, tab, 5*time.Second, "the confirmation", `document.getElementById('confirm').open && document.activeElement.id === 'confirm-cancel'`)
		do(t, tab, 5*time.Second, "confirm", chromedp.Click(chromedp.ID("confirm-ok")))
		waitJS(t, tab, 15*time.Second, "node-1 revoked", `document.getElementById('node-msg').textContent.includes('node-1 revoked') && (document.querySelector('#node-enrollment .st') || {}).textContent === 'revoked'`)
		if st := enrollment(); st != api.EnrollRevoked {
			t.Errorf("node-1 is %s after revoke", st)
		}
		snap(t, tab, "node-revoked")
		// The job grid links node ids to their pages too.
		do(t, tab, 10*time.Second, "open the job", chromedp.Evaluate[chromedp.Void](`location.hash = '#/job/`+j.ID+`'`))
		waitJS(t, tab, 10*time.Second, "node-1 linked in the grid", `(document.querySelector('#job-grid tr[data-node="node-1"] a.nodelink') || {}).getAttribute && document.querySelector('#job-grid tr[data-node="node-1"] a.nodelink').getAttribute('href') === '#/node/node-1'`)
	})
}

// TestFleetView10kNodes renders the fleet view over 10,000 registry entries
// (put in the nodes bucket directly) and logs how long it takes in the
// browser. The figure is reported, not asserted.
func TestFleetView10kNodes(t *testing.T) {
	const total = 10000
	browser := startBrowser(t)
	f := fleettest.Start(t, fleet.Options{Controller: func(c *controller.Config) {
		c.NodeOfflineAfter = config.Duration(10 * time.Minute)
	}})
	g := startGate(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	putNodes(t, ctx, f, total)

	jobs := putJobs(t, ctx, f, 2000)

	// The landing page, over 10,000 nodes and 2,000 jobs of the last day:
	// a cold load (reload; the tab keeps its token) timed from the
	// navigation to the counts, tables and both charts painted.
	tab := newTab(t, browser)
	signIn(t, tab, g.srv.URL, opsToken)
	waitJS(t, tab, 30*time.Second, "the overview over 10,000 nodes and 2,000 jobs", fmt.Sprintf(
		`document.getElementById('ov-nodes').textContent === '10,000' && (document.querySelector('#ov-day-rates [data-k="failed"]') || {}).textContent === 'failed %s (%s)'`,
		thousands(jobs["failed"]), percent(jobs["failed"], 2000)))
	do(t, tab, 15*time.Second, "reload the overview", chromedp.Reload())
	waitJS(t, tab, 15*time.Second, "the overview's first render", `document.body.dataset.overviewRenders === '1'`)
	ovLoad := eval[float64](t, tab, `performance.now()`)
	ovFetchRender := eval[float64](t, tab, `Number(document.body.dataset.overviewRenderMs)`)
	ovReads := eval[[]float64](t, tab, `['/status', '/controllers', '/jobs/stats?window=1h', '/jobs/stats?window=24h'].map((p) => (performance.getEntriesByType('resource').find((e) => e.name.endsWith(p)) || { duration: -1 }).duration)`)
	if got := eval[string](t, tab, `document.getElementById('ov-offline').textContent`); got != "1,000" {
		t.Errorf("overview's offline count %q, want 1,000", got)
	}
	for _, k := range []string{"completed", "partial_failure", "cancelled"} {
		want := fmt.Sprintf("%s %s (%s)", strings.ReplaceAll(k, "_", " "), thousands(jobs[k]), percent(jobs[k], 2000))
		if got := eval[string](t, tab, `document.querySelector('#ov-day-rates [data-k="`+k+`"]').textContent`); got != want {
			t.Errorf("the day's %s: %q, want %q", k, got, want)
		}
	}
	if n := eval[int](t, tab, `document.querySelectorAll('#ov-failures tr[data-job]').length`); n != 10 {
		t.Errorf("%d recent failures listed, want 10", n)
	}
	snap(t, tab, "overview-10k")
	t.Logf("overview, %d nodes and 2,000 jobs: page load to counts and charts painted %.0f ms (reads and render %.0f ms; GET /status %.0f ms, GET /controllers %.0f ms, GET /jobs/stats 1h %.0f ms, 24h %.0f ms); load average %s",
		total, ovLoad, ovFetchRender, ovReads[0], ovReads[1], ovReads[2], ovReads[3], loadAvg())

	do(t, tab, 5*time.Second, "open the fleet view", chromedp.Evaluate[chromedp.Void](`location.hash = '#/fleet'`))
	waitJS(t, tab, 30*time.Second, "10,000 nodes counted", `document.getElementById('fleet-total').textContent === '10,000'`)
	// A cold load: reload (the tab keeps its token) and time from the
	// navigation to the first page of nodes painted with the counts.
	do(t, tab, 15*time.Second, "reload", chromedp.Reload())
	waitJS(t, tab, 15*time.Second, "the first render", `document.body.dataset.fleetRenders === '1'`)
	load := eval[float64](t, tab, `performance.now()`)
	fetchRender := eval[float64](t, tab, `Number(document.body.dataset.fleetRenderMs)`)
	firstFetch := eval[float64](t, tab, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/fleet?'))[0].duration`)
	if rows := eval[int](t, tab, `document.querySelectorAll('#fleet-table tr[data-node]').length`); rows != 100 {
		t.Errorf("%d rows on the first page, want 100", rows)
	}
	if got := eval[string](t, tab, `document.getElementById('fleet-offline').textContent`); got != "1,000" {
		t.Errorf("offline count %q, want 1,000", got)
	}
	// A search narrows on the server: one request, timed to its result
	// painted.
	before := eval[int](t, tab, `Number(document.body.dataset.fleetRenders || 0)`)
	do(t, tab, 5*time.Second, "search", chromedp.Evaluate[chromedp.Void](
		`document.getElementById('fleet-q').value = 'node-0999'; document.getElementById('fleet-filters').requestSubmit()`))
	waitJS(t, tab, 15*time.Second, "the search result", fmt.Sprintf(
		`document.getElementById('fleet-count').textContent.includes('of 10 nodes') && Number(document.body.dataset.fleetRenders) > %d`, before))
	search := eval[float64](t, tab, `Number(document.body.dataset.fleetRenderMs)`)
	// The server's share: the browser's timing of the last GET /fleet.
	server := eval[float64](t, tab, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/fleet?')).pop().duration`)
	// The last page.
	do(t, tab, 5*time.Second, "clear the search",
		chromedp.Evaluate[chromedp.Void](`document.getElementById('fleet-q').value = ''; document.getElementById('fleet-filters').requestSubmit()`))
	waitJS(t, tab, 15*time.Second, "all nodes again", `document.getElementById('fleet-count').textContent.includes('of 10,000 nodes')`)
	snap(t, tab, "fleet-10k")
	t.Logf("fleet view, %d nodes: page load to first page painted %.0f ms (GET /fleet + render %.0f ms, GET /fleet %.0f ms of it); search to result painted %.0f ms (GET /fleet %.0f ms of it)",
		total, load, fetchRender, firstFetch, search, server)

	// A node's page among them, as an admin (its enrollment is read too):
	// from the fleet's link to the page painted.
	tab = newTab(t, browser)
	signIn(t, tab, g.srv.URL, adminToken)
	waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
	do(t, tab, 5*time.Second, "open the fleet view", chromedp.Evaluate[chromedp.Void](`location.hash = '#/fleet'`))
	waitJS(t, tab, 30*time.Second, "the fleet's first page", `!!document.querySelector('#fleet-table a.nodelink')`)
	do(t, tab, 10*time.Second, "open a node's page", chromedp.Click(chromedp.CSS(`#fleet-table tr[data-node="node-00005"] a.nodelink`)))
	waitJS(t, tab, 15*time.Second, "the node's page", `document.body.dataset.nodeRenders === '1' && document.getElementById('node-h').textContent === 'Node node-00005'`)
	nodeMs := eval[float64](t, tab, `Number(document.body.dataset.nodeRenderMs)`)
	reads := eval[[]float64](t, tab, `['/node/node-00005?', '/node/node-00005/jobs', '/enrollments?'].map((p) => (performance.getEntriesByType('resource').find((e) => (e.name + '?').includes(p)) || { duration: -1 }).duration)`)
	if got := eval[string](t, tab, `document.getElementById('node-meta').textContent`); !strings.Contains(got, "dc1.rack05") {
		t.Errorf("node-00005's page: %s", got)
	}
	t.Logf("node page, %d nodes: reads and render %.0f ms (GET /node/{id} %.0f ms, GET /node/{id}/jobs %.0f ms, GET /enrollments?node= %.0f ms)",
		total, nodeMs, reads[0], reads[1], reads[2])
}

// putJobs stores n finished jobs spread over the last day (every tenth
// failed, every 25th partly failed, every 50th cancelled, the rest
// completed), as controllers would have written them, waits for the job
// index to hold them all, and returns the count of each outcome.
func putJobs(t *testing.T, ctx context.Context, f *fleet.Fleet, n int) map[string]int {
	t.Helper()
	kv, err := fleettest.JetStream(t, f).KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	now := time.Now().UTC()
	for i := range n {
		st := api.JobCompleted
		switch {
		case i%50 == 0:
			st = api.JobCancelled
		case i%25 == 0:
			st = api.JobPartialFailure
		case i%10 == 0:
			st = api.JobFailed
		}
		counts[string(st)]++
		// Within the day's window whatever minute the page is read in.
		fin := now.Add(-time.Duration(i) * 23 * time.Hour / time.Duration(n))
		created := fin.Add(-time.Second)
		j := api.Job{ID: fmt.Sprintf("job-%05d", i), Target: api.Target{Scope: api.ScopeGroup, Value: "dc1"},
			Tasks: []api.Phase{{Backend: "ping", Action: "echo"}}, Status: st, CreatedAt: created, UpdatedAt: fin,
			StartedAt: &created, FinishedAt: &fin}
		if st != api.JobCompleted {
			j.Error = "step 0 failed on node-00001"
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, j.ID, b); err != nil {
			t.Fatalf("put job %s: %v", j.ID, err)
		}
	}
	for {
		st, err := f.Client().Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Jobs.Total >= n {
			return counts
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the controller holds %d of %d jobs", st.Jobs.Total, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// thousands writes n as the dashboard does ("2,000").
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// percent writes n of all as the dashboard does: to a tenth, no
// trailing zero ("8%", "12.5%").
func percent(n, all int) string {
	return strconv.FormatFloat(math.Round(1000*float64(n)/float64(all))/10, 'f', -1, 64) + "%"
}

// loadAvg is the machine's load average (1, 5 and 15 minutes), to read a
// timing by.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// putNodes registers n nodes in the fleet's nodes bucket (every tenth
// offline), as agents' registrations would, and waits for the controller
// to see them all.
func putNodes(t *testing.T, ctx context.Context, f *fleet.Fleet, n int) {
	t.Helper()
	// A secured controller takes a node's record only once it is admitted.
	admit := make(map[string][]string, n)
	for i := range n {
		admit[fmt.Sprintf("node-%05d", i)] = []string{fmt.Sprintf("dc%d.rack%02d", i%4, i%25)}
	}
	if err := f.AdmitNodes(ctx, admit); err != nil {
		t.Fatalf("admit nodes: %v", err)
	}
	js := fleettest.JetStream(t, f)
	kv, err := js.KeyValue(ctx, api.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	now := start.UTC()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				info := api.NodeInfo{ID: fmt.Sprintf("node-%05d", i), Hostname: fmt.Sprintf("host-%05d.example", i),
					Groups: []string{fmt.Sprintf("dc%d.rack%02d", i%4, i%25)}, Backends: []string{"ping", "file", "apt"},
					Status: api.NodeOnline, Version: "v1.4.0", OnlineSince: now, LastSeen: now}
				if i%10 == 9 {
					info.Status, info.Version = api.NodeOffline, "v1.3.2"
				}
				b, _ := json.Marshal(info)
				if _, err := kv.Put(ctx, info.ID, b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put node: %v", err)
	}
	for {
		nodes, err := f.Client().ListNodes(ctx)
		if err == nil && len(nodes) == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the controller saw %d of %d nodes", len(nodes), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("registered %d nodes in %v", n, time.Since(start).Round(time.Millisecond))
}

// TestJobView1000NodesLive follows a job over 1,000 real in-process agents
// in the job view and logs how the page kept up: the longest task the
// browser ran (a frozen page shows as long tasks), the updates it applied,
// and how long after the job ended the page said so. Starting 1,000 agents
// takes a while on a small machine, so it runs only with GRID_UI_SCALE=1.
func TestJobView1000NodesLive(t *testing.T) {
	if os.Getenv("GRID_UI_SCALE") == "" {
		t.Skip("set GRID_UI_SCALE=1 to follow a job over 1,000 agents in the browser")
	}
	const agents = 1000
	browser := startBrowser(t)
	f := fleettest.Start(t, fleet.Options{
		Controller: func(c *controller.Config) {
			c.NodeOfflineAfter = config.Duration(30 * time.Second)
			c.HeartbeatInterval = config.Duration(5 * time.Second)
		},
		Agent: func(_ int, c *agent.Config) { c.HeartbeatInterval = agent.Duration(5 * time.Second) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var names []string
	for range agents {
		a, err := f.AddAgent(ctx, []string{"scale"})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, a.ID())
	}
	if err := f.WaitOnline(ctx, names...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d agents online in %v", agents, time.Since(start).Round(time.Millisecond))
	g := startGate(t, f)
	tab := newTab(t, browser)
	signIn(t, tab, g.srv.URL, opsToken)
	waitJS(t, tab, 10*time.Second, "the overview", `location.hash === '#/overview'`)
	do(t, tab, 5*time.Second, "watch for long tasks", chromedp.Evaluate[chromedp.Void](`
		window.__long = [];
		new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({ type: 'longtask', buffered: false });`))
	j, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeGroup, Value: "scale"}, Tasks: []api.Phase{
		{Backend: "ping", Action: "sleep", Params: api.Params{"duration": "3s"}},
		{Backend: "ping", Action: "echo", Params: api.Params{"message": "done"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	do(t, tab, 10*time.Second, "open the job", chromedp.Evaluate[chromedp.Void](`location.hash = '#/job/`+j.ID+`'`))
	waitJS(t, tab, 30*time.Second, "steps shown running", `document.querySelectorAll('#job-grid .cellbtn.st-running').length > 0`)
	waitJS(t, tab, 2*time.Minute, "the job to complete", `document.body.dataset.jobEnded === '`+j.ID+`'`)
	shown := time.Now()
	done, err := f.Client().GetJob(ctx, j.ID)
	if err != nil || done.FinishedAt == nil {
		t.Fatalf("job: %v", err)
	}
	if done.Status != api.JobCompleted {
		t.Errorf("job %s", done.Status)
	}
	summary := eval[string](t, tab, `document.getElementById('job-summary').textContent`)
	if !strings.Contains(summary, "2,000 success") {
		t.Errorf("summary %q", summary)
	}
	long := eval[[]float64](t, tab, `window.__long`)
	busy := eval[string](t, tab, `document.body.dataset.jobBusyMs`)
	worst := 0.0
	for _, d := range long {
		worst = max(worst, d)
	}
	snap(t, tab, "job-1000")
	t.Logf("job over %d nodes: %q; the page's longest handling of stream events or a repaint %s ms; %d long tasks (>50 ms), the longest %.0f ms; the page showed the end %v after the job finished",
		agents, summary, busy, len(long), worst, shown.Sub(*done.FinishedAt).Round(time.Millisecond))
}
