package controller_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/controller"
)

// The debug server is off by default, and with debug_addr it serves the
// profiler and the runtime's memory classes on its own address, not the
// API's.
func TestDebugServer(t *testing.T) {
	var tok string // the API's admin token; the debug server takes none
	hc := http.DefaultClient
	get := func(url string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ctl, _, stop := startController(t, t.TempDir(), freeAddr(t))
	tok, hc = ctl.AdminToken(), httpFor(t, ctl)
	if ctl.DebugURL() != "" {
		t.Errorf("debug server on by default at %s", ctl.DebugURL())
	}
	if code, _ := get(ctl.APIURL() + "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("API serves /debug/pprof/: %d", code)
	}
	stop()
	<-ctl.Done()
	tok, hc = "", http.DefaultClient

	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr, cfg.DebugAddr = t.TempDir(), freeAddr(t), "127.0.0.1:0", "127.0.0.1:0"
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop")
		}
	}()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if c.DebugURL() == "" {
		t.Fatal("no debug URL with debug_addr set")
	}
	code, body := get(c.DebugURL() + "/debug/memory")
	if code != http.StatusOK {
		t.Fatalf("/debug/memory: %d", code)
	}
	for _, want := range []string{"/memory/classes/heap/stacks:bytes ", "/memory/classes/heap/released:bytes ", "/gc/heap/live:bytes ", "/sched/goroutines:goroutines "} {
		if !strings.Contains(body, want) {
			t.Errorf("/debug/memory lacks %s:\n%s", want, body)
		}
	}
	if code, body := get(c.DebugURL() + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine: %d %.80q", code, body)
	}
}
