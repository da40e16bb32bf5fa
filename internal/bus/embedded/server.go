// Package embedded starts the NATS server a controller embeds. It is apart
// from package bus, which agents use too, so that an agent's binary does not
// hold the NATS server.
package embedded

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an embedded NATS server.
type ServerConfig struct {
	// Name identifies the server in a cluster.
	Name string
	// Host and Port to listen on for clients; Port -1 picks a free port.
	Host string
	Port int
	// DataDir is where JetStream keeps its file store.
	DataDir string
	// ClusterName, ClusterHost/ClusterPort and Routes join a NATS cluster.
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string
	// Debug turns on the server's own logging.
	Debug bool
	// TLS, when set, is required of every client. ClusterTLS, when set,
	// secures and authenticates the routes (mutual TLS).
	TLS        *tls.Config
	ClusterTLS *tls.Config
	// Auth, when set, decides on every client connection and assigns its
	// permissions; nil admits anyone. It decides on leaf connections too.
	Auth server.Authentication
	// LeafHost and LeafPort, when LeafPort is not 0, accept the leaf
	// connections of sites' relays (-1 picks a free port), over LeafTLS.
	LeafHost string
	LeafPort int
	LeafTLS  *tls.Config
	// LeafSend and LeafHear are the subjects that cross between
	// LeafAccount, where Auth binds the leaf connections, and the global
	// account of everyone else: what leafs send in, what they hear. The
	// server lets a leaf publish some subjects whatever its permissions
	// (JetStream acknowledgements, service import replies, routing
	// subjects to it); in their own account, which has no JetStream and
	// imports only these, they reach nothing.
	LeafSend []string
	LeafHear []string
}

// LeafAccount is the account of the leaf connections (see LeafSend).
const LeafAccount = "GRID_LEAFS"

// StartServer starts an embedded NATS server with JetStream and returns once
// it accepts connections. The server shuts down when ctx ends.
func StartServer(ctx context.Context, cfg ServerConfig) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded NATS: data dir is required")
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		Host:               cfg.Host,
		Port:               cfg.Port,
		JetStream:          true,
		StoreDir:           cfg.DataDir,
		NoSigs:             true,
		NoLog:              !cfg.Debug,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, cfg.TLS, 5
	}
	if cfg.Auth != nil {
		opts.CustomClientAuthentication = cfg.Auth
		// A nonce lets NKey clients prove they hold their key.
		opts.AlwaysEnableNonce = true
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if cfg.LeafPort != 0 {
		if cfg.LeafTLS == nil || cfg.Auth == nil {
			return nil, errors.New("embedded NATS: a leaf port needs TLS and authentication")
		}
		// NoAdvertise: a relay connects to the URLs of its site's
		// credential (leaf_advertise where set) and no others. Left to
		// advertise, a server hands relays its listen addresses, which
		// may not be reachable from a site (NAT, a proxy on the link),
		// and relays would fail over to them.
		opts.LeafNode = server.LeafNodeOpts{Host: cfg.LeafHost, Port: cfg.LeafPort, TLSConfig: cfg.LeafTLS, TLSTimeout: 5,
			NoAdvertise: true}
	}
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort}
		if cfg.ClusterTLS != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = cfg.ClusterTLS, 5
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded NATS: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if cfg.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS: not ready to accept connections on %s:%d within 15s%s", opts.Host, opts.Port, bindHint(opts))
	}
	if cfg.LeafPort != 0 {
		// Before anyone connects: imports apply to the subscriptions made
		// after them.
		if err := leafAccount(s, cfg); err != nil {
			s.Shutdown()
			return nil, fmt.Errorf("embedded NATS: leaf account: %w", err)
		}
	}
	go func() {
		<-ctx.Done()
		s.Shutdown()
	}()
	return s, nil
}

// leafAccount makes LeafAccount and its stream imports and exports with
// the global account.
func leafAccount(s *server.Server, cfg ServerConfig) error {
	leaf, err := s.RegisterAccount(LeafAccount)
	if err != nil {
		return err
	}
	g := s.GlobalAccount()
	cross := func(from, to *server.Account, subjects []string) error {
		for _, subj := range subjects {
			if err := from.AddStreamExport(subj, []*server.Account{to}); err != nil {
				return fmt.Errorf("export %s: %w", subj, err)
			}
			if err := to.AddStreamImport(from, subj, ""); err != nil {
				return fmt.Errorf("import %s: %w", subj, err)
			}
		}
		return nil
	}
	if err := cross(leaf, g, cfg.LeafSend); err != nil {
		return err
	}
	return cross(g, leaf, cfg.LeafHear)
}

// bindHint says which of the server's addresses another process holds,
// the usual reason a server is never ready: the server itself only logs
// it.
func bindHint(opts *server.Options) string {
	for _, a := range []struct {
		what string
		host string
		port int
	}{{"client", opts.Host, opts.Port}, {"cluster", opts.Cluster.Host, opts.Cluster.Port}, {"leaf", opts.LeafNode.Host, opts.LeafNode.Port}} {
		if a.port <= 0 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(a.host, strconv.Itoa(a.port)))
		if err != nil {
			return fmt.Sprintf(" (its %s address: %v)", a.what, err)
		}
		_ = ln.Close()
	}
	return ""
}
