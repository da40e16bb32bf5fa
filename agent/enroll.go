package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// enrollRetry is how often an agent asks again while its enrollment is
// pending or no controller answers.
const enrollRetry = 2 * time.Second

// revokedCheckEvery spaces the agent's questions about its enrollment
// (the controller limits each key to one a second).
const revokedCheckEvery = 3 * time.Second

// errNotAdmitted is a refusal from a controller: retrying will not help.
var errNotAdmitted = errors.New("enrollment refused")

// ErrRevoked ends an agent whose key was revoked (Agent.Err): no operator
// action brings the key back; the agent must enroll a new one.
var ErrRevoked = errors.New("agent revoked")

// secureOptions returns the connection options of a secured bus (TLS with
// the CA, the agent's NKey, replies under its own inbox prefix), enrolling
// the agent first if it is not admitted yet; nil without a CA file.
func (a *Agent) secureOptions(ctx context.Context) ([]nats.Option, error) {
	if a.cfg.CAFile == "" {
		return nil, nil
	}
	kp, err := pki.EnsureUserKey(filepath.Join(a.cfg.DataDir, pki.AgentKeyFile))
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	a.pub = pub
	opts := []nats.Option{
		nats.RootCAs(a.cfg.CAFile),
		nats.Nkey(pub, kp.Sign),
		nats.CustomInboxPrefix(api.AgentInboxPrefix(pub)),
	}
	token := a.cfg.JoinToken
	if a.cfg.JoinTokenFile != "" {
		if token, err = pki.ReadToken(a.cfg.JoinTokenFile); err != nil {
			return nil, fmt.Errorf("join token: %w", err)
		}
	}
	if err := a.enroll(ctx, pub, token, opts); err != nil {
		return nil, err
	}
	return opts, nil
}

// enroll asks the controllers, on a connection that may do nothing else,
// to admit this key as this node with these groups, and waits while the
// enrollment is pending. An agent already admitted is answered at once.
func (a *Agent) enroll(ctx context.Context, pub, token string, opts []nats.Option) error {
	nc, err := bus.Connect(api.EnrollConnName+a.id, a.cfg.NATSURLs, a.log, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	req, _ := json.Marshal(api.EnrollRequest{NodeID: a.id, Groups: a.cfg.Groups, Token: token})
	waiting := false
	for {
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		msg, err := nc.RequestWithContext(rctx, api.EnrollSubject(pub), req)
		cancel()
		var reply api.EnrollReply
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("enroll: %w", ctx.Err())
			}
			if errors.Is(nc.LastError(), nats.ErrAuthorization) {
				return fmt.Errorf("%w: the server refuses this agent's key (revoked?)", errNotAdmitted)
			}
			a.log.Info("enrollment: no controller answered yet", "err", err)
		case json.Unmarshal(msg.Data, &reply) != nil:
			a.log.Warn("enrollment: malformed reply")
		case reply.Status == api.EnrollRevoked:
			return a.revokedErr(reply.Error)
		case reply.Error != "":
			return fmt.Errorf("%w: %s", errNotAdmitted, reply.Error)
		case reply.Status == api.EnrollAdmitted:
			a.site = reply.Site
			a.log.Info("agent admitted", "public_key", pub, "site", api.SiteOf(reply.Site))
			return nil
		case reply.Status == api.EnrollPending && !waiting:
			waiting = true
			a.log.Warn("agent enrollment pending: an operator must run 'grid node approve "+a.id+"'", "public_key", pub)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enroll: %w", ctx.Err())
		case <-time.After(enrollRetry):
		}
	}
}

func (a *Agent) revokedErr(why string) error {
	return fmt.Errorf("%w (%w): node %s: %s (key file %s)", errNotAdmitted, ErrRevoked, a.id, why,
		filepath.Join(a.cfg.DataDir, pki.AgentKeyFile))
}

// checkRevoked asks, on the agent's own connection, how its enrollment
// stands, and returns an ErrRevoked error when it was revoked; nil
// otherwise (including when no controller answers).
func (a *Agent) checkRevoked(ctx context.Context) error {
	// Only while connected (a request made while disconnected would wait
	// in the reconnect buffer and reach the controller with the others),
	// and at most once per revokedCheckEvery.
	if a.pub == "" || !a.nc.IsConnected() || time.Since(a.lastRevokedCheck) < revokedCheckEvery {
		return nil
	}
	a.lastRevokedCheck = time.Now()
	req, _ := json.Marshal(api.EnrollRequest{NodeID: a.id, Groups: a.cfg.Groups})
	// Within a beat: the heartbeat waits for the answer.
	rctx, cancel := context.WithTimeout(ctx, min(opTimeout, a.cfg.HeartbeatInterval.D()))
	defer cancel()
	msg, err := a.nc.RequestWithContext(rctx, api.EnrollSubject(a.pub), req)
	if err != nil {
		return nil
	}
	var reply api.EnrollReply
	if json.Unmarshal(msg.Data, &reply) == nil && reply.Status == api.EnrollRevoked {
		return a.revokedErr(reply.Error)
	}
	return nil
}
