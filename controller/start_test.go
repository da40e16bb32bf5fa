package controller_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/controller"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// TestFailedStartUndoesWhatItStarted: when the last step of a start fails
// (the API address is taken), everything the steps before it started is
// undone: the NATS port is free again, no goroutine of the attempt is left,
// and a start on the same data dir then succeeds.
func TestFailedStartUndoesWhatItStarted(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	before := runtime.NumGoroutine()

	cfg := controller.DefaultConfig()
	cfg.DataDir, cfg.NATSAddr, cfg.APIAddr = t.TempDir(), freeAddr(t), taken.Addr().String()
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err == nil || !strings.Contains(err.Error(), "API listen") {
		t.Fatalf("start with the API address taken: %v, want the listen error", err)
	}
	ln, err := net.Listen("tcp", cfg.NATSAddr)
	if err != nil {
		t.Fatalf("the NATS port is still held after a failed start: %v", err)
	}
	_ = ln.Close()
	testwait.Until(t, 10*time.Second, 50*time.Millisecond, "the failed start's goroutines to end", func() bool {
		return runtime.NumGoroutine() <= before+2
	})

	cfg.APIAddr = "127.0.0.1:0"
	c, err = controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	if err := c.Start(sctx); err != nil {
		t.Fatalf("start on the same data dir after a failed one: %v", err)
	}
	stop()
	<-c.Done()
}
