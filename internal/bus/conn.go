// Package bus holds GRID's NATS layer: the JetStream topology (streams and
// KV buckets) that controllers and agents share, and connection helpers.
// The embedded server is package embedded, which only controllers import.
package bus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// Connect dials NATS with reconnects that never give up: an agent or
// controller outlives a server restart. urls may be comma-separated.
func Connect(name string, urls []string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("connect NATS: no server URL")
	}
	log = config.Logger(log)
	// Asynchronous errors (a slow consumer dropping messages, a refused
	// subscription) go to the log, at most one every 10s, not to stderr.
	var lastAsyncErr atomic.Int64
	opts := []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			now := time.Now().UnixNano()
			if last := lastAsyncErr.Load(); now-last < int64(10*time.Second) || !lastAsyncErr.CompareAndSwap(last, now) {
				return
			}
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("NATS asynchronous error", "subject", subject, "err", err)
		}),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		// A server refusing a reconnect (its controller has not yet heard
		// of an admission, or still holds the connection it just closed)
		// is tried again like any other failure: by default the client
		// would close for good after two refusals in a row.
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectBufSize(32 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
		// A first connection that fails is reported here (it keeps being
		// retried). A certificate the client does not trust is a setting
		// to fix, not a server to wait for: say so, and which one.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return
			}
			if TLSTrustError(err) {
				log.Error("NATS TLS failed: this client does not trust the server's certificate. "+
					"Give it the CA that signed it: for an agent --ca-file (ca_file in its config) with the controller's DATA_DIR/ca.pem; "+
					"for a controller on an external NATS, nats_ca_file", "err", err)
				return
			}
			log.Warn("NATS connect failed; retrying", "err", err)
		}),
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect NATS %s: %w", strings.Join(urls, ","), err)
	}
	return nc, nil
}

// CredentialOptions authenticate to a NATS deployment: creds is a
// credentials file (a user JWT with its seed, as nsc writes) or an NKey
// seed file; caFile is the CA of the servers' certificates. Either may be
// empty.
func CredentialOptions(creds, caFile string) ([]nats.Option, error) {
	var opts []nats.Option
	if creds != "" {
		b, err := os.ReadFile(creds)
		if err != nil {
			return nil, fmt.Errorf("NATS credentials: %w", err)
		}
		if strings.Contains(string(b), "BEGIN NATS USER JWT") {
			opts = append(opts, nats.UserCredentials(creds))
		} else {
			o, err := nats.NkeyOptionFromSeed(creds)
			if err != nil {
				return nil, fmt.Errorf("NATS credentials %s: neither a .creds file nor an NKey seed: %w", creds, err)
			}
			opts = append(opts, o)
		}
	}
	if caFile != "" {
		opts = append(opts, nats.RootCAs(caFile))
	}
	return opts, nil
}

// TLSTrustError reports whether a connection failed because the client
// could not verify the server's certificate (or spoke plain text to a
// server that requires TLS).
func TLSTrustError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	switch {
	case errors.As(err, &unknown), errors.As(err, &verify), errors.As(err, &invalid), errors.As(err, &host):
		return true
	case errors.Is(err, nats.ErrSecureConnRequired):
		return true
	}
	return strings.Contains(err.Error(), "x509: ")
}
