package cert

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testpki"
)

// pki is a test CA, a short-lived server certificate it signed for
// localhost and 127.0.0.1, and a TLS server presenting it.
type pki struct {
	ca, other *testpki.CA
	leaf      *testpki.Leaf
	addr      string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{ca: testpki.NewCA(t, "Grid Test CA"), other: testpki.NewCA(t, "Other CA")}
	p.leaf = p.ca.Issue(t, "web.test", 10*24*time.Hour+time.Hour, "localhost", "127.0.0.1")
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{p.leaf.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	p.addr = l.Addr().String()
	return p
}

// backend returns the cert backend with its clock set so that the leaf
// has exactly 10 days left.
func (p *pki) backend() *Backend {
	at := p.leaf.Cert.NotAfter.Add(-10 * 24 * time.Hour)
	return &Backend{now: func() time.Time { return at }}
}

func run(t *testing.T, b *Backend, action string, params api.Params) (*backends.Result, error) {
	t.Helper()
	r := backends.NewRegistry().MustRegister(b)
	res, err := r.Run(context.Background(), "cert", &backends.Request{Action: action, Params: params, CheckMode: true})
	if res != nil && res.Changed {
		t.Errorf("%s reports a change", action)
	}
	return res, err
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Suite{
		Backend: New(),
		Samples: map[string]api.Params{
			"inspect": {"path": "/etc/ssl/certs/ca-certificates.crt"},
			"expiry":  {"address": "localhost:443"},
			"verify":  {"address": "localhost:443", "ca_file": "/etc/ssl/ca.pem"},
		},
		// A listener that accepts and never answers the handshake.
		Blocking: func(t *testing.T) *backends.Request {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					t.Cleanup(func() { c.Close() })
				}
			}()
			return &backends.Request{Action: "inspect", Params: api.Params{"address": l.Addr().String(), "timeout": "1m"}}
		},
	})
}

// inspect reads the same certificate from its PEM file and from the
// server presenting it.
func TestInspect(t *testing.T) {
	p := newPKI(t)
	for _, params := range []api.Params{{"path": p.leaf.File}, {"address": p.addr}, {"address": p.addr, "server_name": "localhost"}} {
		res, err := run(t, p.backend(), "inspect", params)
		if err != nil {
			t.Fatalf("%v: %v", params, err)
		}
		f := res.Facts
		if f["common_name"] != "web.test" || f["issuer"] != "CN=Grid Test CA" || f["days_left"] != 10 || f["expired"] != false || f["is_ca"] != false {
			t.Errorf("%v: facts %v", params, f)
		}
		if sans, _ := f["sans"].([]string); !slices.Equal(sans, []string{"localhost", "127.0.0.1"}) {
			t.Errorf("%v: sans %v", params, f["sans"])
		}
		if f["not_after"] != p.leaf.Cert.NotAfter.UTC().Format(time.RFC3339) || !strings.Contains(f["subject"].(string), "O=Grid Test") {
			t.Errorf("%v: facts %v", params, f)
		}
		if chain, _ := f["chain"].([]any); len(chain) != 1 {
			t.Errorf("%v: chain %v", params, f["chain"])
		}
		if !strings.Contains(res.Output, "10 days") {
			t.Errorf("output %q", res.Output)
		}
	}
}

func TestExpiry(t *testing.T) {
	p := newPKI(t)
	expired := &Backend{now: func() time.Time { return p.leaf.Cert.NotAfter.Add(36 * time.Hour) }}
	for _, tc := range []struct {
		name   string
		b      *Backend
		params api.Params
		ok     bool
		left   int
	}{
		{"file, enough days", p.backend(), api.Params{"path": p.leaf.File, "min_days": "10"}, true, 10},
		{"file, too few", p.backend(), api.Params{"path": p.leaf.File, "min_days": "11"}, false, 10},
		{"endpoint, default 30", p.backend(), api.Params{"address": p.addr}, false, 10},
		{"endpoint, enough", p.backend(), api.Params{"address": p.addr, "min_days": "7"}, true, 10},
		{"expired", expired, api.Params{"path": p.leaf.File, "min_days": "0"}, false, -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(t, tc.b, "expiry", tc.params)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrExpiring)) {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if res.Facts["min_days_left"] != tc.left || res.Facts["ok"] != tc.ok {
				t.Errorf("facts %v, want %d days left", res.Facts, tc.left)
			}
		})
	}
	// The earliest expiry of a chain counts: a file holding the leaf and
	// a CA that expires sooner.
	short := testpki.NewCA(t, "Short CA")
	chainFile := filepath.Join(t.TempDir(), "chain.pem")
	testpki.WritePEM(t, chainFile, p.leaf.Cert.Raw, short.Cert.Raw)
	res, err := run(t, p.backend(), "expiry", api.Params{"path": chainFile, "min_days": "5"})
	if !errors.Is(err, ErrExpiring) || res.Facts["expires_first"] != "CN=Short CA" {
		t.Errorf("chain: %v %v", err, res.Facts)
	}
}

func TestVerify(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name   string
		params api.Params
		ok     bool
	}{
		{"endpoint, our CA", api.Params{"address": p.addr, "ca_file": p.ca.File}, true},
		{"endpoint by name", api.Params{"address": p.addr, "server_name": "localhost", "ca_file": p.ca.File}, true},
		{"endpoint, wrong name", api.Params{"address": p.addr, "server_name": "db.test", "ca_file": p.ca.File}, false},
		{"endpoint, other CA", api.Params{"address": p.addr, "ca_file": p.other.File}, false},
		{"endpoint, system roots", api.Params{"address": p.addr}, false},
		{"file, our CA", api.Params{"path": p.leaf.File, "ca_file": p.ca.File}, true},
		{"file, other CA", api.Params{"path": p.leaf.File, "ca_file": p.other.File}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(t, p.backend(), "verify", tc.params)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrUntrusted)) {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if res.Facts["verified"] != tc.ok {
				t.Errorf("facts %v", res.Facts)
			}
		})
	}
}

func TestBadSources(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// A key beside the certificate is skipped; the certificate is read.
	certData, _ := os.ReadFile(p.leaf.File)
	withKey := write("with-key.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"+string(certData))
	if res, err := run(t, p.backend(), "inspect", api.Params{"path": withKey}); err != nil || res.Facts["common_name"] != "web.test" {
		t.Errorf("cert after a key: %v", err)
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name   string
		params api.Params
		want   string
	}{
		{"neither", api.Params{}, "give path"},
		{"both", api.Params{"path": p.leaf.File, "address": p.addr}, "not both"},
		{"not PEM", api.Params{"path": write("junk.pem", "hello")}, "no PEM certificate"},
		{"missing", api.Params{"path": filepath.Join(dir, "nope.pem")}, "no such file"},
		{"device", api.Params{"path": "/dev/zero"}, "not a regular file"},
		{"closed port", api.Params{"address": closedAddr}, "refused"},
		{"bad port", api.Params{"address": "127.0.0.1:99999"}, "out of range"},
	} {
		_, err := run(t, p.backend(), "inspect", tc.params)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
