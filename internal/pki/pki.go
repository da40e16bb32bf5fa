// Package pki creates and loads what GRID's transport security rests on: a
// certificate authority, certificates it signs, the agent join token and
// NKey seeds. Everything is generated once into a data dir and reused on
// restart; secret files are written 0600. The NATS server and (later) the
// HTTP API share one CA, so clients trust one file: DATA_DIR/ca.pem.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// File names inside a data dir. CAFile and JoinTokenFile are an interface:
// scripts and docs rely on them.
const (
	CAFile             = "ca.pem"
	CAKeyFile          = "ca-key.pem"
	ServerCertFile     = "server.pem"
	ServerKeyFile      = "server-key.pem"
	ControllerCertFile = "controller.pem"
	ControllerKeyFile  = "controller-key.pem"
	JoinTokenFile      = "join-token"
	AgentKeyFile       = "agent.nk"
)

// ControllerURI is the URI SAN that marks a client certificate as a
// controller's: a certificate of the CA without it is not a controller.
const ControllerURI = "urn:grid:controller"

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 2 * 365 * 24 * time.Hour
	// renewBefore: a certificate this close to expiry is reissued at start.
	renewBefore = 30 * 24 * time.Hour
)

// CA is a certificate authority. Key is nil when only the certificate is
// known (a CA brought by the operator without its key): then it verifies
// but signs nothing.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// Pool is a cert pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// EnsureCA loads dir/ca.pem (and dir/ca-key.pem if present) or, when
// neither exists, creates both.
func EnsureCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	certPEM, err := os.ReadFile(certPath)
	switch {
	case err == nil:
		ca := &CA{PEM: certPEM}
		if ca.Cert, err = parseCert(certPEM); err != nil {
			return nil, fmt.Errorf("%s: %w", certPath, err)
		}
		keyPEM, err := os.ReadFile(keyPath)
		if errors.Is(err, os.ErrNotExist) {
			return ca, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read CA key: %w", err)
		}
		if ca.Key, err = parseKey(keyPEM); err != nil {
			return nil, fmt.Errorf("%s: %w", keyPath, err)
		}
		return ca, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("read CA: %w", err)
	}
	if _, err := os.Stat(keyPath); err == nil {
		return nil, fmt.Errorf("%s exists without %s: put the CA certificate next to its key", keyPath, certPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "GRID CA", Organization: []string{"GRID"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// The key first: a crash in between leaves no CA certificate without
	// its key, which would stop the next start.
	if err := writeSecret(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// LoadCAPool reads a PEM file of CA certificates into a pool.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", path)
	}
	return p, nil
}

// CertSpec says what a certificate is for.
type CertSpec struct {
	// CommonName names the holder.
	CommonName string
	// Hosts are DNS names or IP addresses the certificate is valid for.
	Hosts []string
	// URIs are URI SANs (ControllerURI marks a controller).
	URIs []string
	// Server and Client set the extended key usages.
	Server, Client bool
}

// EnsureCert loads the certificate at certPath/keyPath, or issues it from
// ca when missing, expiring soon, not signed by ca, or not covering every
// host and URI of spec (a listen address that changed). A certificate
// brought by the operator (ca has no key) is only loaded.
func EnsureCert(ca *CA, certPath, keyPath string, spec CertSpec) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err == nil && (ca.Key == nil || covers(cert, ca, spec)) {
		return cert, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return tls.Certificate{}, fmt.Errorf("load certificate %s: %w", certPath, err)
	}
	if ca.Key == nil {
		return tls.Certificate{}, fmt.Errorf("no certificate at %s and no CA key to issue one: put %s and %s there (signed by your CA) or the CA key at %s",
			certPath, filepath.Base(certPath), filepath.Base(keyPath), CAKeyFile)
	}
	certPEM, keyPEM, err := IssueCert(ca, spec)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writeSecret(keyPath, keyPEM); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// IssueCert issues a certificate for spec from ca, which must hold its
// key, and returns it and its new key as PEM.
func IssueCert(ca *CA, spec CertSpec) (certPEM, keyPEM []byte, err error) {
	if ca.Key == nil {
		return nil, nil, errors.New("issue certificate: the CA's key is not here")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: []string{"GRID"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range spec.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	for _, u := range spec.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate URI %q: %w", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode certificate key: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return certPEM, keyPEM, nil
}

// covers reports whether cert is signed by ca, valid for a while yet, and
// names every host and URI of spec.
func covers(cert tls.Certificate, ca *CA, spec CertSpec) bool {
	if len(cert.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil || time.Until(leaf.NotAfter) < renewBefore {
		return false
	}
	if leaf.CheckSignatureFrom(ca.Cert) != nil {
		return false
	}
	for _, h := range spec.Hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(leaf.DNSNames, h) {
			return false
		}
	}
	for _, u := range spec.URIs {
		if !HasURI(leaf, u) {
			return false
		}
	}
	return true
}

// HasURI reports whether the certificate carries the URI SAN.
func HasURI(c *x509.Certificate, uri string) bool {
	return slices.ContainsFunc(c.URIs, func(u *url.URL) bool { return u.String() == uri })
}

// ServerHosts are the names a server certificate needs for listen
// addresses (host:port): each host, and for a wildcard listen address every
// address of the machine; always localhost, 127.0.0.1, ::1 and the
// hostname; plus extra.
func ServerHosts(listen []string, extra []string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	for _, a := range listen {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		if h == "" || h == "0.0.0.0" || h == "::" {
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, ad := range addrs {
					if ipn, ok := ad.(*net.IPNet); ok {
						hosts = append(hosts, ipn.IP.String())
					}
				}
			}
			continue
		}
		hosts = append(hosts, h)
	}
	hosts = append(hosts, extra...)
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// EnsureToken returns the token in path, creating a random one (32 bytes,
// hex) when the file does not exist.
func EnsureToken(path string) (string, error) {
	if t, err := ReadToken(path); err == nil {
		return t, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("join token: %w", err)
	}
	t := hex.EncodeToString(b)
	if err := writeSecret(path, []byte(t+"\n")); err != nil {
		return "", err
	}
	return t, nil
}

// ReadToken reads a token file (surrounding whitespace ignored).
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return t, nil
}

// TokenEqual compares tokens in constant time.
func TokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// EnsureUserKey loads the NKey user seed at path or creates one (0600).
func EnsureUserKey(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("NKey seed %s: %w", path, err)
		}
		return kp, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read NKey seed: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("create NKey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("NKey seed: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := writeSecret(path, append(seed, '\n')); err != nil {
		return nil, err
	}
	return kp, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key is %T; GRID signs with ECDSA keys only", k)
	}
	return ek, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeSecret(path string, data []byte) error { return writeFile(path, data, 0o600) }

// writeFile writes through a temporary file and a rename, so a reader never
// sees half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
