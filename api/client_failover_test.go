package api_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// refusedAddr is an address nothing listens on: connections are refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "https://" + addr
}

// brokenAddr accepts connections and closes them at once, as a controller
// killed while it answers does: the request may have been sent.
func brokenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return "https://" + l.Addr().String()
}

// With several controller addresses, requests go to the first that can be
// reached; a job submission moves on only when nothing was sent.
func TestClientFailsOverBetweenAddresses(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	live := f.APIURL()
	client := func(t *testing.T, addrs ...string) *api.Client {
		t.Helper()
		cfg := f.ClientConfig(f.AdminToken())
		cfg.Address = strings.Join(addrs, ",")
		c, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "hi"}}}}

	for name, tc := range map[string]struct {
		addrs     func(t *testing.T) []string
		submitErr bool // the submission fails (sent to a broken controller)
	}{
		"refused first":        {addrs: func(t *testing.T) []string { return []string{refusedAddr(t), live} }},
		"live first":           {addrs: func(t *testing.T) []string { return []string{live, refusedAddr(t)} }},
		"broken first":         {addrs: func(t *testing.T) []string { return []string{brokenAddr(t), live} }, submitErr: true},
		"refused, then broken": {addrs: func(t *testing.T) []string { return []string{refusedAddr(t), brokenAddr(t), live} }, submitErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := client(t, tc.addrs(t)...)
			// A GET may be sent twice, so it reaches the live controller.
			if _, err := c.Status(ctx); err != nil {
				t.Fatalf("status: %v", err)
			}
			if c.Address() != live {
				t.Errorf("after a GET the client uses %s, want the live %s", c.Address(), live)
			}
			// A fresh client starts at the first address again.
			c = client(t, tc.addrs(t)...)
			j, err := c.SubmitJob(ctx, spec)
			if tc.submitErr {
				var ue *api.UnreachableError
				if err == nil || !errors.As(err, &ue) {
					t.Fatalf("submit through a controller that broke the connection: job %v, err %v; want it unreachable, not sent again", j, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			done, err := c.WaitJob(ctx, j.ID)
			if err != nil || done.Status != api.JobCompleted {
				t.Fatalf("wait: %v %v", done, err)
			}
		})
	}

	// Every controller unreachable: the error names the last one tried.
	c := client(t, refusedAddr(t), refusedAddr(t))
	_, err := c.Status(context.Background())
	var ue *api.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("no controller reachable: %v, want an UnreachableError", err)
	}
}

// An address list with an empty or malformed entry is refused naming it.
func TestClientAddressListValidation(t *testing.T) {
	for addr, want := range map[string]string{
		"https://a:1,,https://b:1": "empty entry",
		"https://a:1,ftp://b:1":    `"ftp://b:1"`,
		" , ":                      "empty entry",
	} {
		err := api.ClientConfig{Address: addr}.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%q) = %v, want an error with %s", addr, err, want)
		}
	}
	if err := (api.ClientConfig{Address: "h1:1, https://h2:2"}).Validate(); err != nil {
		t.Errorf("two addresses: %v", err)
	}
}
