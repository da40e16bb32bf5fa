package relay

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Defaults of a relay's settings.
const (
	// DefaultListen is where agents connect: every interface, the port a
	// controller's NATS uses, so an agent's --nats needs only the host.
	DefaultListen = "0.0.0.0:4222"
	// DefaultRosterEvery is how often the relay asks the hub for its
	// site's enrollments (besides at start and after every reconnect).
	DefaultRosterEvery = 5 * time.Second
	// DefaultEnrollTimeout is how long the relay waits for the hub's answer
	// to an enrollment request before leaving it unanswered (the agent asks
	// again).
	DefaultEnrollTimeout = 5 * time.Second
)

// RosterFile is the roster's cache in the data dir.
const RosterFile = "roster.json"

// Config configures a relay.
type Config struct {
	// CredentialFile is the site's credential as "grid site create"
	// writes it. Credential, when set, is used instead (and CredentialFile
	// must be empty).
	CredentialFile string
	Credential     *api.SiteCredential
	// Listen is the host:port agents connect to (port 0 picks one).
	Listen string
	// HubURLs, when set, replace the credential's leaf URLs of the hub
	// (tls://host:port, one per controller; the relay fails over).
	HubURLs []string
	// DataDir, when set, keeps the last roster the hub sent, so that a
	// relay restarted while its link is cut still admits its agents.
	DataDir string
	// RosterEvery is how often the roster is asked for; zero means
	// DefaultRosterEvery.
	RosterEvery time.Duration
	// EnrollTimeout bounds the wait for the hub's answer to an enrollment;
	// zero means DefaultEnrollTimeout.
	EnrollTimeout time.Duration
	// Logger receives the relay's logs; nil logs nothing.
	Logger *slog.Logger
	// Debug turns on the embedded NATS server's own logging.
	Debug bool
}

// DefaultConfig returns a config with every default filled in but the
// credential.
func DefaultConfig() Config {
	return Config{Listen: DefaultListen, RosterEvery: DefaultRosterEvery, EnrollTimeout: DefaultEnrollTimeout}
}

// Validate checks the settings that need no file read (the credential is
// loaded and checked by New).
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.CredentialFile == "" && c.Credential == nil:
		errs = append(errs, errors.New("no site credential: give the file 'grid site create' wrote (--credential)"))
	case c.CredentialFile != "" && c.Credential != nil:
		errs = append(errs, errors.New("give the credential as a file or as a value, not both"))
	}
	if _, _, err := splitListen(c.Listen); err != nil {
		errs = append(errs, err)
	}
	for _, u := range c.HubURLs {
		if _, err := parseHubURL(u); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RosterEvery < 0 || c.EnrollTimeout < 0 {
		errs = append(errs, errors.New("roster interval and enrollment timeout cannot be negative"))
	}
	return errors.Join(errs...)
}

func splitListen(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: want host:port (0.0.0.0:4222)", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("listen address %q: port %q is not a port number", addr, port)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, p, nil
}

// parseHubURL reads a hub leaf URL: tls://host:port (nats:// is accepted
// too; the link is TLS whatever the scheme says).
func parseHubURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("hub URL %q: %w", s, err)
	}
	if (u.Scheme != "tls" && u.Scheme != "nats") || u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("hub URL %q: want tls://host:port, a controller's leaf_addr", s)
	}
	if u.User != nil {
		return nil, fmt.Errorf("hub URL %q: the relay authenticates with the site's key; leave user and password out", s)
	}
	return u, nil
}

// checkCredentialMode refuses a credential file that users other than its
// owner (and its group) may read, or anyone but its owner may change: it
// holds the site's seed, and its CA and hub URLs decide which hub the
// relay trusts. File modes say nothing of access on Windows.
func checkCredentialMode(path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("site credential: %w", err)
	}
	if m := fi.Mode().Perm(); m&0o026 != 0 {
		return fmt.Errorf("site credential %s has mode %v: other users can read or change the site's key; chmod 600 it", path, m)
	}
	return nil
}

// credential is a checked site credential, ready to use.
type credential struct {
	site    string
	seed    string
	pub     string
	caPool  *x509.CertPool
	cert    tls.Certificate
	hubURLs []*url.URL
}

// loadCredential reads the config's credential and checks every part of
// it, so that a wrong file fails at start with a message that says which
// part, not later as an unexplained TLS or authorization error.
func loadCredential(c Config) (*credential, error) {
	var sc api.SiteCredential
	if c.Credential != nil {
		sc = *c.Credential
	} else {
		if err := checkCredentialMode(c.CredentialFile); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(c.CredentialFile)
		if err != nil {
			return nil, fmt.Errorf("site credential: %w", err)
		}
		if err := json.Unmarshal(b, &sc); err != nil {
			return nil, fmt.Errorf("site credential %s: not the JSON 'grid site create' writes: %w", c.CredentialFile, err)
		}
	}
	if err := api.ValidSiteName(sc.Site); err != nil {
		return nil, fmt.Errorf("site credential: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(sc.Seed))
	if err != nil {
		return nil, fmt.Errorf("site credential: seed: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, errors.New("site credential: seed is not an NKey user seed")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(sc.CA)) {
		return nil, errors.New("site credential: ca holds no PEM certificate")
	}
	cert, err := tls.X509KeyPair([]byte(sc.Cert), []byte(sc.Key))
	if err != nil {
		return nil, fmt.Errorf("site credential: cert and key: %w", err)
	}
	// The site's agents check the relay's certificate against the hub's CA:
	// one the CA did not issue for a server would fail every agent's
	// handshake, with the error on the agents' side only.
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("site credential: cert: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("site credential: cert is not a server certificate of the credential's CA: %w", err)
	}
	urls := c.HubURLs
	if len(urls) == 0 {
		urls = sc.HubURLs
	}
	if len(urls) == 0 {
		return nil, errors.New("site credential names no hub URL: give --hub tls://CONTROLLER:LEAF_PORT")
	}
	cred := &credential{site: sc.Site, seed: sc.Seed, pub: pub, caPool: pool, cert: cert}
	for _, s := range urls {
		u, err := parseHubURL(s)
		if err != nil {
			return nil, err
		}
		cred.hubURLs = append(cred.hubURLs, u)
	}
	return cred, nil
}
