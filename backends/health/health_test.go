package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testbin"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testpki"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// body is what the test server's /ok answers; hostile body patterns are
// matched against it.
const body = "status: ready; $(touch x) `y` && | > ' \" \\ -rf --help"

// server is an HTTP server with the endpoints the checks are tried on.
func server(t *testing.T) *httptest.Server {
	t.Helper()
	var flaky atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	// /flaky fails twice, then answers.
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, _ *http.Request) {
		if flaky.Add(1) <= 2 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "up")
	})
	// /hang answers only when the client goes away.
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, b *Backend, action string, p api.Params) (*backends.Result, error) {
	t.Helper()
	r := backends.NewRegistry().MustRegister(b)
	// Every check is read-only: it runs in check mode as it does outside.
	res, err := r.Run(context.Background(), "health", &backends.Request{Action: action, Params: p, CheckMode: true})
	if res != nil && res.Changed {
		t.Errorf("%s reports a change", action)
	}
	return res, err
}

func TestConformance(t *testing.T) {
	s := server(t)
	b := New(Options{})
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{
			"http":    {"url": s.URL + "/ok"},
			"tcp":     {"address": "127.0.0.1:1"},
			"process": {"name": "init"},
			"unit":    {"unit": "ssh.service"},
		},
		Blocking: func(t *testing.T) *backends.Request {
			return &backends.Request{Action: "http", Params: api.Params{"url": s.URL + "/hang", "timeout": "1m"}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			switch {
			case action == "http" && param == "body_pattern":
				// The value is a regular expression matched against the body,
				// nothing else.
				res, err := run(t, b, "http", api.Params{"url": s.URL + "/ok", "body_pattern": value})
				re, cerr := regexp.Compile(value)
				if cerr != nil {
					// Refused before any request: nothing to retry.
					if err == nil || !strings.Contains(err.Error(), "body_pattern") || res.Facts != nil {
						t.Errorf("invalid pattern %q: got %v", value, err)
					}
					return
				}
				if got := res.Facts["body_match"]; got != re.MatchString(body) {
					t.Errorf("pattern %q: body_match %v", value, got)
				}
			case action == "process" && param == "name":
				res, err := run(t, b, "process", api.Params{"name": value})
				if !errors.Is(err, ErrUnhealthy) || res.Facts["name"] != value || res.Facts["count"] != 0 {
					t.Errorf("process %q: %v %v", value, res.Facts, err)
				}
			default:
				t.Errorf("%s.%s accepted %q", action, param, value)
			}
		},
	})
}

func TestHTTP(t *testing.T) {
	s := server(t)
	b := New(Options{})
	for _, tc := range []struct {
		name    string
		params  api.Params
		healthy bool
		status  int
		// attempts is how many requests were made.
		attempts int
	}{
		{"ok", api.Params{"url": s.URL + "/ok"}, true, 200, 1},
		{"body matches", api.Params{"url": s.URL + "/ok", "body_pattern": `^status: ready`}, true, 200, 1},
		{"body does not match", api.Params{"url": s.URL + "/ok", "body_pattern": `^status: down`}, false, 200, 1},
		{"server error", api.Params{"url": s.URL + "/down"}, false, 503, 1},
		{"expected error status", api.Params{"url": s.URL + "/down", "status": "503"}, true, 503, 1},
		{"not found", api.Params{"url": s.URL + "/nowhere"}, false, 404, 1},
		{"redirect not followed", api.Params{"url": s.URL + "/moved"}, false, 302, 1},
		{"redirect expected", api.Params{"url": s.URL + "/moved", "status": "302"}, true, 302, 1},
		{"retries until up", api.Params{"url": s.URL + "/flaky", "retries": "3", "retry_delay": "1ms"}, true, 200, 3},
		{"timeout", api.Params{"url": s.URL + "/hang", "timeout": "50ms", "retries": "1", "retry_delay": "1ms"}, false, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(t, b, "http", tc.params)
			if tc.healthy != (err == nil) {
				t.Fatalf("healthy = %v, want %v (err %v)", err == nil, tc.healthy, err)
			}
			if err != nil && !errors.Is(err, ErrUnhealthy) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v wraps neither ErrUnhealthy nor a deadline", err)
			}
			if tc.status != 0 && res.Facts["status"] != tc.status {
				t.Errorf("status fact %v, want %d", res.Facts["status"], tc.status)
			}
			if res.Facts["attempts"] != tc.attempts || res.Facts["healthy"] != tc.healthy {
				t.Errorf("facts %v, want %d attempts, healthy %v", res.Facts, tc.attempts, tc.healthy)
			}
		})
	}
	// The flaky endpoint has come up; a new one fails with too few retries.
	t.Run("too few retries", func(t *testing.T) {
		s := server(t)
		res, err := run(t, b, "http", api.Params{"url": s.URL + "/flaky", "retries": "1", "retry_delay": "1ms"})
		if !errors.Is(err, ErrUnhealthy) || res.Facts["attempts"] != 2 {
			t.Errorf("err %v, facts %v", err, res.Facts)
		}
	})
}

// An https check verifies the server against the system's roots or
// ca_file; insecure skips verification.
func TestHTTPS(t *testing.T) {
	ca := testpki.NewCA(t, "Grid Test CA")
	other := testpki.NewCA(t, "Other CA")
	leaf := ca.Issue(t, "localhost", time.Hour, "127.0.0.1", "localhost")
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "secure") }))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	s.StartTLS()
	t.Cleanup(s.Close)
	b := New(Options{})
	for _, tc := range []struct {
		name    string
		params  api.Params
		healthy bool
	}{
		{"our CA", api.Params{"ca_file": ca.File}, true},
		{"system roots", api.Params{}, false},
		{"another CA", api.Params{"ca_file": other.File}, false},
		{"insecure", api.Params{"insecure": "true"}, true},
		{"not a PEM file", api.Params{"ca_file": "/dev/null"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.params["url"] = s.URL
			tc.params["body_pattern"] = "^secure$"
			_, err := run(t, b, "http", tc.params)
			if tc.healthy != (err == nil) {
				t.Errorf("healthy = %v, want %v (err %v)", err == nil, tc.healthy, err)
			}
		})
	}
}

// Params outside http and https, or that are not a host:port, never get
// to the network.
func TestRefusedParams(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New(Options{}))
	for _, tc := range []struct {
		action string
		params api.Params
	}{
		{"http", api.Params{"url": "file:///etc/passwd"}},
		{"http", api.Params{"url": "gopher://example.com/"}},
		{"http", api.Params{"url": "http://example.com/ x"}},
		{"http", api.Params{"url": "http://x/", "status": "99"}},
		{"http", api.Params{"url": "http://x/", "ca_file": "relative.pem"}},
		{"tcp", api.Params{"address": "example.com"}},
		{"tcp", api.Params{"address": "-x:80"}},
		{"process", api.Params{"name": "a/b"}},
		{"disk", api.Params{"max_used_pct": "101"}},
		{"load", api.Params{"max_per_cpu": "-1"}},
		{"load", api.Params{"window": "2"}},
	} {
		_, err := r.Run(context.Background(), "health", &backends.Request{Action: tc.action, Params: tc.params})
		if !errors.Is(err, backends.ErrInvalidParams) {
			t.Errorf("%s %v: got %v, want ErrInvalidParams", tc.action, tc.params, err)
		}
	}
	// A port the pattern lets through but TCP has not.
	res, err := run(t, New(Options{}), "tcp", api.Params{"address": "127.0.0.1:70000"})
	if err == nil || errors.Is(err, ErrUnhealthy) {
		t.Errorf("port 70000: %v %v", res, err)
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	b := New(Options{})
	res, err := run(t, b, "tcp", api.Params{"address": l.Addr().String()})
	if err != nil || res.Facts["remote"] != l.Addr().String() {
		t.Errorf("listening port: %v %v", res.Facts, err)
	}
	res, err = run(t, b, "tcp", api.Params{"address": closedAddr, "retries": "2", "retry_delay": "1ms"})
	if !errors.Is(err, ErrUnhealthy) || res.Facts["attempts"] != 3 || res.Facts["healthy"] != false {
		t.Errorf("closed port: %v %v", res.Facts, err)
	}
}

func TestProcess(t *testing.T) {
	self, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(self))
	b := New(Options{})
	res, err := run(t, b, "process", api.Params{"name": name})
	if err != nil {
		t.Fatalf("this test's own process %s: %v", name, err)
	}
	if pids, _ := res.Facts["pids"].([]int); !slices.Contains(pids, os.Getpid()) {
		t.Errorf("pids %v lack %d", pids, os.Getpid())
	}
	if _, err := run(t, b, "process", api.Params{"name": name, "min": "99999"}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("min 99999: %v", err)
	}
	res, err = run(t, b, "process", api.Params{"name": "no-such-process-here"})
	if !errors.Is(err, ErrUnhealthy) || res.Facts["count"] != 0 {
		t.Errorf("absent process: %v %v", res.Facts, err)
	}
	if _, err := run(t, b, "process", api.Params{"name": "no-such-process-here", "min": "0"}); err != nil {
		t.Errorf("min 0: %v", err)
	}
}

// The thresholds are judged against the host's real numbers: a threshold
// of 100% always passes, 0% fails whenever anything is used.
func TestThresholds(t *testing.T) {
	b := New(Options{})
	for _, tc := range []struct {
		action string
		params api.Params
		// metric is the fact compared with the threshold.
		metric string
	}{
		{"disk", api.Params{"path": t.TempDir()}, "used_pct"},
		{"memory", api.Params{}, "used_pct"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			p := api.Params{"max_used_pct": "100"}
			for k, v := range tc.params {
				p[k] = v
			}
			res, err := run(t, b, tc.action, p)
			if err != nil || res.Facts["healthy"] != true {
				t.Fatalf("at 100%%: %v %v", res.Facts, err)
			}
			used := res.Facts[tc.metric].(float64)
			p["max_used_pct"] = "0"
			res, err = run(t, b, tc.action, p)
			if (used > 0) != errors.Is(err, ErrUnhealthy) || res.Facts["healthy"] != (used == 0) {
				t.Errorf("at 0%% with %.1f%% used: %v %v", used, res.Facts, err)
			}
		})
	}
	t.Run("load", func(t *testing.T) {
		res, err := run(t, b, "load", api.Params{"max_per_cpu": "999999", "window": "1"})
		if err != nil || res.Facts["cpus"].(int) < 1 {
			t.Fatalf("%v %v", res.Facts, err)
		}
		load := res.Facts["load1"].(float64)
		_, err = run(t, b, "load", api.Params{"max_per_cpu": "0", "window": "1"})
		if (load > 0) != errors.Is(err, ErrUnhealthy) {
			t.Errorf("load %.2f against 0: %v", load, err)
		}
	})
}

// The unit check reads the unit's state with systemctl show (a fake
// systemctl here; the real one in the host tests).
func TestUnit(t *testing.T) {
	bin := testbin.Build(t, "../systemd/testdata/fakesystemctl")
	dir := t.TempDir()
	t.Setenv("FAKE_SYSTEMCTL_DIR", dir)
	if err := os.Mkdir(filepath.Join(dir, "units"), 0o755); err != nil {
		t.Fatal(err)
	}
	for unit, st := range map[string]string{"web.service": "active running enabled", "db.service": "failed failed enabled"} {
		if err := os.WriteFile(filepath.Join(dir, "units", unit), []byte(st), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := New(Options{SystemctlPath: bin})
	for _, tc := range []struct {
		unit, active string
		healthy      bool
	}{
		{"web.service", "active", true},
		{"db.service", "failed", false},
		{"gone.service", "", false},
	} {
		res, err := run(t, b, "unit", api.Params{"unit": tc.unit})
		if tc.healthy != (err == nil) || (err != nil && !errors.Is(err, ErrUnhealthy)) {
			t.Errorf("%s: err %v, want healthy %v", tc.unit, err, tc.healthy)
		}
		if tc.active != "" && res.Facts["active_state"] != tc.active {
			t.Errorf("%s: facts %v", tc.unit, res.Facts)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "argv.log"))
	if !strings.Contains(string(log), `"show"`) || strings.Contains(string(log), `"start"`) {
		t.Errorf("systemctl calls %s: want only show", log)
	}
}
