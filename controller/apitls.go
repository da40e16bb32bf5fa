package controller

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// apiTLSConfig is the HTTPS configuration of the API, nil when insecure.
// The certificate is the operator's (api_tls_cert/api_tls_key) or the data
// dir's server certificate, issued by the controller's CA: the same CA as
// the bus, so DATA_DIR/ca.pem is the one file clients trust. With
// api_client_ca the API requires a client certificate of that CA: a
// certificate that is only verified when given would add nothing to the
// bearer token, so it is all or nothing.
func (c *Controller) apiTLSConfig() (*tls.Config, error) {
	if c.cfg.Insecure {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case c.cfg.APITLSCert != "":
		cert, err := tls.LoadX509KeyPair(c.cfg.APITLSCert, c.cfg.APITLSKey)
		if err != nil {
			return nil, fmt.Errorf("api_tls_cert/api_tls_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case c.sec != nil:
		tc.Certificates = c.sec.serverTLS.Certificates
	default:
		// nats_urls: no embedded server, but the API still gets a
		// certificate of the data dir's CA.
		dir := c.cfg.DataDir
		ca, err := pki.EnsureCA(dir)
		if err != nil {
			return nil, fmt.Errorf("API CA: %w", err)
		}
		cert, err := pki.EnsureCert(ca, filepath.Join(dir, pki.ServerCertFile), filepath.Join(dir, pki.ServerKeyFile),
			pki.CertSpec{CommonName: "grid controller", Hosts: pki.ServerHosts([]string{c.cfg.APIAddr}, c.cfg.TLSHosts), Server: true, Client: true})
		if err != nil {
			return nil, fmt.Errorf("API certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.cfg.APIClientCA != "" {
		pool, err := pki.LoadCAPool(c.cfg.APIClientCA)
		if err != nil {
			return nil, fmt.Errorf("api_client_ca: %w", err)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// CAFile is the CA certificate that verifies the API's HTTPS certificate:
// DATA_DIR/ca.pem, or "" when the API is plain HTTP (insecure) or serves
// the operator's certificate (api_tls_cert; its CA is the operator's).
func (c *Controller) CAFile() string {
	if c.cfg.Insecure || c.cfg.APITLSCert != "" {
		return ""
	}
	return filepath.Join(c.cfg.DataDir, pki.CAFile)
}

// APIClientConfig is an API client config for this controller that sends
// tok and trusts CAFile.
func (c *Controller) APIClientConfig(tok string) api.ClientConfig {
	return api.ClientConfig{Address: c.APIURL(), Token: tok, CAFile: c.CAFile(), Timeout: 30 * time.Second}
}

// APIHTTPClient is an *http.Client that trusts CAFile, for callers of the
// API's raw routes (it sends no token). It is made once, so its
// connections are reused.
func (c *Controller) APIHTTPClient() (*http.Client, error) {
	c.apiHTTP.once.Do(func() {
		tc, err := c.APIClientConfig("").TLSConfig()
		if err != nil {
			c.apiHTTP.err = err
			return
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		c.apiHTTP.hc = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	})
	return c.apiHTTP.hc, c.apiHTTP.err
}

// apiHTTPClient holds the client APIHTTPClient makes once.
type apiHTTPClient struct {
	once sync.Once
	hc   *http.Client
	err  error
}
