package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// retryFields says, for every field of api.Job, what a retry does with it:
// "keep" the original's setting, or "run" (it belongs to the original's
// run or provenance; the retry gets its own). RetryOf links the two.
var retryFields = map[string]string{
	"Target": "keep", "Tasks": "keep", "Strategy": "keep", "Timeout": "keep", "CheckMode": "keep",
	"MaxConcurrency": "keep", "MaxErrors": "keep", "Priority": "keep", "NotBefore": "keep", "Nodes": "keep",
	"ID": "run", "Status": "run", "Step": "run", "Expected": "run", "Unreachable": "run", "Summary": "run",
	"Results": "run", "Error": "run", "Owner": "run", "SubmittedBy": "run", "CancelledBy": "run", "TraceID": "run", "TraceParent": "run",
	"CreatedAt": "run", "UpdatedAt": "run", "StartedAt": "run", "FinishedAt": "run", "ScheduleID": "run",
	"StatusReason": "run", "NodeSites": "run",
	"RetryOf": "link",
}

// A retry keeps every setting of the original job and none of its run,
// and shares no memory with it. A field added to api.Job fails this test
// until it is placed in retryFields (and, if a setting, copied by
// retryJob).
func TestRetryJobKeepsEverySetting(t *testing.T) {
	var orig api.Job
	if err := json.Unmarshal([]byte(`{
		"id": "job-1", "target": {"scope": "group", "value": "web"},
		"tasks": [{"backend": "ping", "action": "echo", "params": {"message": "hi"}, "max_concurrency": 1},
		          {"tasks": [{"backend": "ping", "action": "sleep", "params": {"duration": "1s"}}], "condition": "on_failure"}],
		"strategy": "continue", "timeout": "5m", "check_mode": true, "max_concurrency": "40%", "max_errors": 2,
		"status": "partial_failure", "step": 1, "expected": ["n1", "n2"], "unreachable": ["n3"],
		"summary": {"targeted": 3}, "results": {"0": {"n1": {"status": "failed"}}}, "error": "boom", "owner": "c1",
		"submitted_by": "admin", "cancelled_by": "ops", "trace_id": "t", "trace_parent": "00-t-s-01",
		"created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:06Z",
		"started_at": "2026-01-02T03:04:05Z", "finished_at": "2026-01-02T03:04:07Z",
		"nodes": ["n1", "n2"], "retry_of": "job-0", "schedule_id": "nightly", "priority": 8,
		"not_before": "2026-01-02T03:00:00Z", "status_reason": "waiting", "node_sites": {"n3": "paris"}}`), &orig); err != nil {
		t.Fatal(err)
	}
	got, err := retryJob(&orig)
	if err != nil {
		t.Fatal(err)
	}
	ov, gv := reflect.ValueOf(orig), reflect.ValueOf(*got)
	typ := ov.Type()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		what, ok := retryFields[name]
		if !ok {
			t.Errorf("api.Job.%s is new: say in retryFields whether a retry keeps it (a setting) or not (its run)", name)
			continue
		}
		if ov.Field(i).IsZero() {
			t.Errorf("the test's original job leaves %s unset; set it", name)
			continue
		}
		o, g := ov.Field(i).Interface(), gv.Field(i).Interface()
		switch what {
		case "keep":
			if !reflect.DeepEqual(o, g) {
				t.Errorf("%s: retry has %#v, want the original's %#v", name, g, o)
			}
		case "run":
			if !gv.Field(i).IsZero() {
				t.Errorf("%s: retry carries the original's run: %#v", name, g)
			}
		}
	}
	if got.RetryOf != orig.ID {
		t.Errorf("retry_of %q, want %q", got.RetryOf, orig.ID)
	}
	for name := range retryFields {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("retryFields names %s, which api.Job does not have", name)
		}
	}
	// Nothing shared: changing the retry leaves the original alone.
	got.Tasks[0].Params["message"] = "changed"
	got.Tasks[1].Tasks[0].Backend = "changed"
	got.Nodes[0] = "changed"
	got.MaxConcurrency.Value = 99
	if orig.Tasks[0].Params["message"] != "hi" || orig.Tasks[1].Tasks[0].Backend != "ping" || orig.Nodes[0] != "n1" ||
		orig.MaxConcurrency.Value != 40 {
		t.Fatalf("the retry shares memory with the original: %+v", orig)
	}
}

// Each kind of refusal has one status code, whatever wraps it; the body
// is {"error": message}; a full queue says when to try again; an error of
// no kind is a 500. The cause stays reachable through a refusal.
func TestJobErrorStatus(t *testing.T) {
	cause := &api.ValidationError{Field: "tasks[0]", Msg: "bad"}
	for _, tt := range []struct {
		err  error
		code int
	}{
		{refuse(errRefused, errors.New("x")), http.StatusForbidden},
		{refuse(errInvalid, cause), http.StatusBadRequest},
		{refuse(errTooLarge, cause), http.StatusBadRequest},
		{refuse(errQueueFull, errors.New("x")), http.StatusTooManyRequests},
		{refuse(errStorageFull, errors.New("x")), http.StatusInsufficientStorage},
		{refuse(errUnavailable, errors.New("x")), http.StatusServiceUnavailable},
		{refuse(errJobExists, errors.New("x")), http.StatusConflict},
		{refuse(errJobState, errors.New("x")), http.StatusConflict},
		{refuse(errJobNotFound, errors.New("x")), http.StatusNotFound},
		{fmt.Errorf("tick: %w", refuse(errRefused, errors.New("x"))), http.StatusForbidden},
		{errors.New("of no kind"), http.StatusInternalServerError},
	} {
		if got := jobErrorStatus(tt.err); got != tt.code {
			t.Errorf("%v: %d, want %d", tt.err, got, tt.code)
		}
		w := httptest.NewRecorder()
		writeRefusal(w, tt.err)
		var body api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != tt.code || body.Error != tt.err.Error() {
			t.Errorf("%v: answered %d %q (%v)", tt.err, w.Code, w.Body.String(), err)
		}
		if ra := w.Header().Get("Retry-After"); (ra != "") != (tt.code == http.StatusTooManyRequests) {
			t.Errorf("%v: Retry-After %q", tt.err, ra)
		}
	}
	var ve *api.ValidationError
	if err := refuse(errInvalid, cause); !errors.As(err, &ve) || ve != cause || err.Error() != cause.Error() {
		t.Fatalf("the cause of a refusal is lost: %v", err)
	}
	if refuse(errInvalid, nil) != nil {
		t.Fatal("refuse(kind, nil) is not nil")
	}
}

// The schedule engine skips a tick refused for good and tries again one
// refused for now, by kind.
func TestFinalRefusal(t *testing.T) {
	for kind, final := range map[error]bool{
		errRefused: true, errInvalid: true, errTooLarge: true, errQueueFull: true, errStorageFull: true,
		errUnavailable: false, errJobExists: false,
	} {
		if got := finalRefusal(refuse(kind, errors.New("x"))); got != final {
			t.Errorf("%v: final %v, want %v", kind, got, final)
		}
	}
	if finalRefusal(errors.New("of no kind")) {
		t.Error("an error of no kind is final: the tick would be lost")
	}
}

// Only submit makes jobs: it is the one function of the package that
// stores a new job, so a route, a tick or anything later that makes one
// goes through its checks (policy, validation on the nodes, size,
// admission). Requests are queued only for jobs submit stored, or again
// for jobs stored before (a schedule's claim finished by a peer, a dead
// letter replayed).
func TestOnlySubmitMakesJobs(t *testing.T) {
	allowed := map[string]map[string]bool{
		"jobs.create":            {"submit": true},
		"queueRequest":           {"submit": true, "submitTick": true},
		"PriorityRequestSubject": {"queueRequest": true, "handleDLQReplay": true},
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				what := sel.Sel.Name
				if what == "create" {
					inner, ok := sel.X.(*ast.SelectorExpr)
					if !ok || inner.Sel.Name != "jobs" {
						return true
					}
					what = "jobs.create"
				}
				callers, watched := allowed[what]
				if !watched {
					return true
				}
				found[what] = true
				if !callers[fn.Name.Name] {
					t.Errorf("%s: %s calls %s: a job is made only by submit (controller/submit.go), which applies policy, validation, size and admission",
						fset.Position(call.Pos()), fn.Name.Name, what)
				}
				return true
			})
		}
	}
	for what := range allowed {
		if !found[what] {
			t.Errorf("no call of %s found: this test no longer looks at what it should", what)
		}
	}
}

// A write of a new job refused for lack of room is storage full (507);
// any other failed write is unavailable (503).
func TestStoreErrorKinds(t *testing.T) {
	for _, tt := range []struct {
		err  error
		kind error
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: jsInsufficientResources, Description: "insufficient resources"}, errStorageFull},
		{fmt.Errorf("store job j: %w", errors.New("nats: maximum bytes exceeded")), errStorageFull},
		{fmt.Errorf("store job j: %w", jetstream.ErrNoHeartbeat), errUnavailable},
		{errors.New("nats: timeout"), errUnavailable},
	} {
		got := storeError(tt.err)
		if !errors.Is(got, tt.kind) || !errors.Is(got, tt.err) {
			t.Errorf("%v: %v, want kind %v with the cause", tt.err, got, tt.kind)
		}
	}
}
