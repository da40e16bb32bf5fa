package bus

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

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

// A client without the CA of a TLS server's certificate is told at once,
// at ERROR, that TLS failed and which setting names the CA, rather than
// waiting in silence while it retries.
func TestConnectSaysWhenTheServerCertificateIsNotTrusted(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.EnsureCert(ca, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"),
		pki.CertSpec{CommonName: "test server", Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, err := embedded.StartServer(ctx, embedded.ServerConfig{Host: "127.0.0.1", Port: -1, DataDir: t.TempDir(),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	nc, err := Connect("no-ca", []string{ns.ClientURL()}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testwait.Until(t, 10*time.Second, 20*time.Millisecond, "an error naming the CA setting", func() bool {
		out := logs.String()
		return strings.Contains(out, "level=ERROR") && strings.Contains(out, "NATS TLS failed") && strings.Contains(out, "--ca-file")
	})
	if nc.IsConnected() {
		t.Fatal("connected without trusting the server's certificate")
	}
}
