package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// Headers a dead letter carries besides the request's own.
const (
	dlqReasonHeader     = "Grid-Dead-Letter-Reason"
	dlqSubjectHeader    = "Grid-Dead-Letter-Subject"
	dlqDeliveriesHeader = "Grid-Dead-Letter-Deliveries"
)

// ensureDLQ finds the dead-letter stream, making it again (with the
// topology's caps) if it is gone. It is a Limits stream that refuses new
// dead letters when full (dlq_max_bytes): a dead letter stays until
// replayed or dropped, and one that cannot be stored leaves its request
// queued.
func (c *Controller) ensureDLQ(ctx context.Context) (jetstream.Stream, error) {
	s, err := c.js.Stream(ctx, api.StreamDeadLetters)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return s, err
	}
	if err := bus.EnsureStream(ctx, c.js, c.topo, api.StreamDeadLetters); err != nil {
		return nil, err
	}
	return c.js.Stream(ctx, api.StreamDeadLetters)
}

// crashedClaim says why a request must not be tried again before the claim
// starts: it was delivered more than max_deliveries times, after the grace
// in which a missing job is retried, while its job is pending (not
// waiting, whose request is put back on purpose). Each such delivery is a
// claim that never ended: a controller that crashed or stalled on it.
func (c *Controller) crashedClaim(m jetstream.Msg, carried *api.Job) string {
	md, err := m.Metadata()
	if err != nil || carried == nil || carried.Status != api.JobPending {
		return ""
	}
	if md.NumDelivered <= uint64(c.cfg.MaxDeliveries) || time.Since(md.Timestamp) < missingJobGrace {
		return ""
	}
	return fmt.Sprintf("delivered %d times without a claim finishing (a controller crashed or stalled while claiming it)", md.NumDelivered-1)
}

// lastDelivery reports whether a request that failed to be claimed has
// used up its deliveries.
func (c *Controller) lastDelivery(m jetstream.Msg) bool {
	md, err := m.Metadata()
	return err == nil && md.NumDelivered >= uint64(c.cfg.MaxDeliveries)
}

// busUnavailable reports an error of the bus itself, not of what was asked
// of it: no stream or responder answered in time, or the connection is down.
func busUnavailable(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// deadLetter moves a request to the dead-letter stream with the reason,
// marks its job failed (if it can be read) and removes the request. If the
// dead letter cannot be stored the request is put back instead: it is
// never lost.
func (c *Controller) deadLetter(ctx context.Context, m jetstream.Msg, id, reason string) {
	md, _ := m.Metadata()
	var delivered uint64
	if md != nil {
		delivered = md.NumDelivered
	}
	dl := &nats.Msg{Subject: api.DeadLetterSubject(id), Data: m.Data(), Header: nats.Header{}}
	for k, v := range m.Headers() {
		dl.Header[k] = v
	}
	dl.Header.Del(jetstream.MsgIDHeader)
	dl.Header.Set(dlqReasonHeader, reason)
	dl.Header.Set(dlqSubjectHeader, m.Subject())
	dl.Header.Set(dlqDeliveriesHeader, strconv.FormatUint(delivered, 10))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.ensureDLQ(pctx); err != nil {
		c.log.Error("dead-letter stream; putting the request back", "job", id, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	if _, err := c.js.PublishMsg(pctx, dl); err != nil {
		c.log.Error("store dead letter; putting the request back", "job", id, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	_, _, _ = c.jobs.mutate(pctx, id, func(j *api.Job) bool {
		if j.Status != api.JobPending && j.Status != api.JobWaiting {
			return false
		}
		now := time.Now().UTC()
		j.Status, j.Error, j.FinishedAt, j.UpdatedAt = api.JobFailed, api.DeadLetterPrefix+reason, &now, now
		return true
	})
	if err := m.Term(); err != nil {
		c.log.Warn("remove dead-lettered request", "job", id, "err", err)
	}
	c.metrics.deadLettered.Inc()
	c.log.Error("job request moved to the dead-letter stream", "job", id, "reason", reason, "deliveries", delivered)
}

// handleDLQList serves GET /dlq (role read; replay and drop need
// operator).
func (c *Controller) handleDLQList(w http.ResponseWriter, r *http.Request) {
	out, err := c.deadLetters(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetters reads every dead letter, oldest first.
func (c *Controller) deadLetters(ctx context.Context) ([]api.DeadLetter, error) {
	s, err := c.ensureDLQ(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	out := []api.DeadLetter{}
	for n := info.State.Msgs; n > 0; n-- {
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, nats.ErrTimeout) {
				break
			}
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		md, _ := m.Metadata()
		dl := api.DeadLetter{JobID: api.RequestJobID(m.Subject()), Reason: m.Headers().Get(dlqReasonHeader),
			Subject: m.Headers().Get(dlqSubjectHeader)}
		dl.Deliveries, _ = strconv.Atoi(m.Headers().Get(dlqDeliveriesHeader))
		if md != nil {
			dl.Seq, dl.Time = md.Sequence.Stream, md.Timestamp.UTC()
		}
		out = append(out, dl)
	}
	return out, nil
}

// handleDLQReplay queues a dead letter's request again (with its job
// pending again when the dead letter had failed it) and removes the dead
// letter.
func (c *Controller) handleDLQReplay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s, raw, ok := c.deadLetterOf(w, r, id)
	if !ok {
		return
	}
	// A replay runs the job again (a crashed claim may have run some of
	// it): the caller's policy applies as to a retry.
	if j, err := c.currentJob(r.Context(), id); err == nil {
		if err := c.checkPolicy(c.catalog(), j, principalFrom(r.Context())); err != nil {
			writeRefusal(w, refuse(errRefused, err))
			return
		}
	}
	_, _, err := c.jobs.mutate(r.Context(), id, func(j *api.Job) bool {
		if j.Status != api.JobFailed || !strings.HasPrefix(j.Error, api.DeadLetterPrefix) {
			return false
		}
		j.Status, j.Error, j.FinishedAt, j.UpdatedAt = api.JobPending, "", nil, time.Now().UTC()
		return true
	})
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	subject := raw.Header.Get(dlqSubjectHeader)
	if subject == "" {
		subject = api.PriorityRequestSubject(api.DefaultPriority, id)
	}
	// The request is replayed with the job's id only: the job changed
	// since (failed, pending again), so the claim reads it.
	req := &nats.Msg{Subject: subject, Data: []byte(id)}
	// A fresh message id: the stream would drop a second request with the
	// job's id within its duplicate window.
	if _, err := c.js.PublishMsg(r.Context(), req, jetstream.WithMsgID(fmt.Sprintf("%s-replay-%d", id, raw.Sequence))); err != nil {
		writeError(w, http.StatusServiceUnavailable, "queue job: "+err.Error())
		return
	}
	if err := s.DeleteMsg(r.Context(), raw.Sequence); err != nil {
		c.log.Warn("remove replayed dead letter", "job", id, "err", err)
	}
	c.log.Info("dead letter replayed", "job", id)
	writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "status": "replayed"})
}

// handleDLQDrop removes a dead letter for good.
func (c *Controller) handleDLQDrop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s, raw, ok := c.deadLetterOf(w, r, id)
	if !ok {
		return
	}
	if err := s.DeleteMsg(r.Context(), raw.Sequence); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("dead letter dropped", "job", id)
	w.WriteHeader(http.StatusNoContent)
}

// deadLetterOf finds a job's dead letter, answering 404 or 503 itself.
func (c *Controller) deadLetterOf(w http.ResponseWriter, r *http.Request, id string) (jetstream.Stream, *jetstream.RawStreamMsg, bool) {
	if !api.ValidToken(id) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no dead letter for job %s", id))
		return nil, nil, false
	}
	s, err := c.ensureDLQ(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return nil, nil, false
	}
	raw, err := s.GetLastMsgForSubject(r.Context(), api.DeadLetterSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no dead letter for job %s", id))
		return nil, nil, false
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return nil, nil, false
	}
	return s, raw, true
}
