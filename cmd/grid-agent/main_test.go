package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// syncBuffer is written by the agent's logger while the test reads it.
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

func TestCommandLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(bad, []byte("name: web-1\nnats: [nats://127.0.0.1:4222]\nmax_concurent: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrHint string
	}{
		{"version", []string{"version"}, exitOK, "grid-agent dev (", ""},
		{"--version", []string{"--version"}, exitOK, "grid-agent dev (", ""},
		{"help", []string{"--help"}, exitOK, "", "--join-token-file"},
		{"unknown flag", []string{"--frobnicate"}, exitUsage, "", "unknown flag: --frobnicate"},
		{"argument", []string{"run"}, exitUsage, "", `unexpected argument "run"`},
		{"bad log level", []string{"--log-level", "loud"}, exitUsage, "", "--log-level"},
		{"unknown config key", []string{"--config", bad}, exitUsage, "", "max_concurent"},
		{"invalid name", []string{"--name", "a.b"}, exitUsage, "", "name"},
		{"join token without CA", []string{"--join-token", "x"}, exitUsage, "", "ca_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), c.args, &stdout, &stderr)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.code, stderr.String())
			}
			if !strings.HasPrefix(stdout.String(), c.stdout) {
				t.Errorf("stdout %q, want it to start with %q", stdout.String(), c.stdout)
			}
			if !strings.Contains(stderr.String(), c.stderrHint) {
				t.Errorf("stderr %q does not name %q", stderr.String(), c.stderrHint)
			}
		})
	}
}

// grid-agent enrolls with a secured controller from a config file, with a
// flag overriding one of its keys, registers, and on its context ending
// deregisters and exits 0.
func TestRegistersFromConfigFile(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	yaml := "name: from-file\ngroups: [web.prod]\nnats: [" + f.NATSURL() + "]\ndata_dir: " + filepath.Join(dir, "state") +
		"\nca_file: " + f.CAFile() + "\njoin_token_file: " + f.JoinTokenFile() + "\nheartbeat_interval: 300ms\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--config", cfg, "--name", "slim-1"}, &bytes.Buffer{}, &stderr) }()

	node := func() *api.NodeInfo {
		nodes, err := f.Client().ListNodes(ctx)
		if err != nil {
			return nil
		}
		for _, n := range nodes {
			if n.ID == "slim-1" {
				return &n
			}
		}
		return nil
	}
	testwait.Until(t, 30*time.Second, 50*time.Millisecond, "slim-1 online", func() bool {
		select {
		case code := <-done:
			t.Fatalf("grid-agent exited %d: %s", code, stderr.String())
		default:
		}
		n := node()
		return n != nil && n.Status == api.NodeOnline
	})
	if n := node(); len(n.Groups) != 1 || n.Groups[0] != "web.prod" {
		t.Errorf("groups %v, want [web.prod] from the file", n.Groups)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "agent.nk")); err != nil {
		t.Errorf("no key in the file's data_dir: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d after stop, want 0: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("grid-agent did not stop within 30s")
	}
}
