package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// maxExclude bounds the exclude list a broadcast carries; beyond it the
// step goes out as one command per node instead.
const maxExclude = 256

func (c *Controller) taskTimeout(t api.Task) time.Duration {
	if t.Timeout != "" {
		if d, err := time.ParseDuration(t.Timeout); err == nil && d > 0 {
			return d
		}
	}
	return c.cfg.DefaultTaskTimeout.D()
}

// backoff is the delay before retry number attempt+1: the configured base,
// doubled per attempt, capped.
func (c *Controller) backoff(attempt int) time.Duration {
	p := retry.Policy{Initial: c.cfg.RetryBackoff.D(), Multiplier: 2, Max: c.cfg.RetryBackoffMax.D()}
	return min(p.Delay(attempt), c.cfg.RetryBackoffMax.D())
}

// publishCommandPolicy paces the tries of one command's publish.
var publishCommandPolicy = retry.Policy{Initial: 100 * time.Millisecond, Step: 100 * time.Millisecond, Tries: 3}

func (r *run) command(s api.FlatStep, attempt int) api.Command {
	return api.Command{
		JobID: r.job.ID, TaskIndex: s.Index, Attempt: attempt, Task: s.Task,
		CheckMode: r.job.CheckMode, Timeout: r.c.taskTimeout(s.Task).String(), ResolvedAt: r.resolvedAt,
	}
}

// dispatchMany sends the first attempt of a barrier step to nodes: one
// broadcast on the target's subject when that reaches exactly these nodes
// (give or take a short exclude list), else one command per node.
func (r *run) dispatchMany(s api.FlatStep, nodes []*nodeRun, attempt int) {
	t := r.job.Target
	// A job narrowed to some nodes (a retry of the failed ones) is sent
	// node by node: a broadcast would reach the target's other nodes too.
	// So is a step with sensitive values, to each node on its own subject,
	// sealed for that node.
	// So is a group narrowed to one site (group:web@paris): its subject
	// is the group's at every site, and the relays of the others, which
	// hold their nodes' rights to it, would hear the step.
	broadcast := t.Scope == api.ScopeAll || (t.Scope == api.ScopeGroup && t.Site == "") || t.Scope == api.ScopeSite
	if len(r.job.Nodes) == 0 && broadcast && len(r.secrets[s.Index]) == 0 {
		active := make(map[string]bool, len(nodes))
		for _, n := range nodes {
			active[n.id] = true
		}
		var exclude []string
		for _, id := range r.job.Expected {
			if !active[id] {
				exclude = append(exclude, id)
			}
		}
		if len(exclude) <= maxExclude {
			cmd := r.command(s, attempt)
			cmd.Exclude = exclude
			r.markDispatched(s, nodes, attempt)
			r.c.publishCommand(r.stepCtx(s), api.CommandSubject(t, s.Task.Backend, s.Task.Action), &cmd)
			return
		}
	}
	for _, n := range nodes {
		r.dispatchOne(s, n, attempt)
	}
}

// dispatchOne sends one attempt of a step to one node.
func (r *run) dispatchOne(s api.FlatStep, n *nodeRun, attempt int) {
	cmd := r.command(s, attempt)
	r.sealFor(&cmd, n.id)
	r.markDispatched(s, []*nodeRun{n}, attempt)
	r.c.publishCommand(r.stepCtx(s), api.NodeCommandSubject(n.id, s.Task.Backend, s.Task.Action), &cmd)
}

func (r *run) markDispatched(s api.FlatStep, nodes []*nodeRun, attempt int) {
	now := time.Now()
	deadline := now.Add(r.c.taskTimeout(s.Task) + r.c.cfg.ResultGrace.D())
	for _, n := range nodes {
		n.attempt = attempt
		n.waiting = true
		n.deadline = deadline
		n.sentAt, n.heard = now, false
	}
	ts := now.UTC()
	r.update(func(j *api.Job) {
		m := ensureStep(j, s.Index)
		for _, n := range nodes {
			res := m[n.id]
			if res == nil {
				res = &api.NodeResult{}
				m[n.id] = res
			}
			res.Status = api.StepDispatched
			res.StatusReason = ""
			res.Attempts = attempt
			res.Events = append(res.Events, api.Event{Status: api.StepDispatched, Time: ts, Attempt: attempt})
		}
		if j.Step < s.Index {
			j.Step = s.Index
		}
	})
}

// publishCommand stores the command in the commands stream (which also
// delivers it to the agents' core subscriptions). A failed publish is
// logged; the step's deadline then fails the nodes.
func (c *Controller) publishCommand(ctx context.Context, subject string, cmd *api.Command) {
	ctx, span := c.tracer.Start(ctx, "dispatch "+cmd.Task.Name(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.destination.name", subject),
			attribute.Int("grid.step", cmd.TaskIndex), attribute.Int("grid.attempt", cmd.Attempt)))
	defer span.End()
	data, err := json.Marshal(cmd)
	if err != nil {
		c.log.Error("encode command", "err", err)
		return
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	// The message id lets JetStream drop a duplicate publish of the same
	// attempt within its duplicate window.
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/%d/%d/%s", cmd.JobID, cmd.TaskIndex, cmd.Attempt, subject))
	bus.InjectTrace(ctx, msg)
	err = retry.Do(ctx, publishCommandPolicy, func(int) error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.js.PublishMsg(pctx, msg)
		return err
	})
	if err == nil || ctx.Err() != nil {
		return
	}
	span.SetStatus(codes.Error, err.Error())
	c.log.Error("publish command", "subject", subject, "job", cmd.JobID, "step", cmd.TaskIndex, "err", err)
}
