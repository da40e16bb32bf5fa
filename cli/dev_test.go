package cli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer lets the test read what a command running in another
// goroutine has printed so far.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevFleetEndToEnd runs "grid dev" and drives it with the client
// commands, as the README's quick start does.
func TestDevFleetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var devOut, devErr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "test", []string{"dev", "--agents", "2", "--api-addr", "127.0.0.1:0"}, &devOut, &devErr)
	}()

	apiRE := regexp.MustCompile(`API:\s+(http://\S+)`)
	var addr string
	deadline := time.Now().Add(30 * time.Second)
	for addr == "" {
		if m := apiRE.FindStringSubmatch(devOut.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("grid dev exited with %d: %s", code, devErr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("grid dev printed no API address: %q %q", devOut.String(), devErr.String())
		}
	}

	code, out, errOut := runCLI(t, "--addr", addr, "node", "list")
	if code != ExitOK || !strings.Contains(out, "node-1") || !strings.Contains(out, "node-2") {
		t.Fatalf("node list: code %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "job", "run", "--addr", addr, "--target", "group:web", "ping", "echo", "--message", "hi", "--wait")
	if code != ExitOK || !strings.Contains(out, "completed") || !strings.Contains(out, "hi") {
		t.Fatalf("job run: code %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "job", "run", "--addr", addr, "-f", "../examples/jobs/fail-fast-rollback.yaml", "--wait")
	if code != ExitFailed || !strings.Contains(out, "skipped") || !strings.Contains(out, "rolled back") {
		t.Fatalf("fail-fast job: code %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "job", "run", "--addr", addr, "--target", "all", "ping", "echo", "--bogus", "x")
	if code != ExitUsage {
		t.Fatalf("unknown param: code %d err %q", code, errOut)
	}
	code, out, errOut = runCLI(t, "--addr", addr, "backends", "ping")
	if code != ExitOK || !strings.Contains(out, "--duration") {
		t.Fatalf("backends ping: code %d out %q err %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "--addr", addr, "-o", "json", "job", "list")
	if code != ExitOK || strings.Count(out, `"id"`) != 2 {
		t.Fatalf("job list: code %d out %q", code, out)
	}

	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("grid dev exited with %d: %s", code, devErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("grid dev did not stop")
	}
}
