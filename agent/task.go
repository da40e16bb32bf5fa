package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/internal/bus"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

const (
	// progressEvery rate-limits progress reports per task: a backend may
	// report in a tight loop, the controller needs only a trickle.
	progressEvery = 200 * time.Millisecond
	// abandonAfter is how long a backend may ignore its cancelled context
	// before the agent reports the failure without it.
	abandonAfter = 5 * time.Second
	// publishFor bounds how long a final result is retried: long enough
	// for a clustered results stream to elect a new leader after a server
	// fails (several seconds, during which a publish finds no stream).
	publishFor = 30 * time.Second
	// publishBackoffMax caps the wait between tries.
	publishBackoffMax = 2 * time.Second
	// runningAfter is how long a task runs before the agent reports it
	// running. A task that ends sooner sends only its final result (with
	// started_at): at a thousand agents one message less each is a good
	// part of a fan-out. It is far below the controller's first catch-up
	// re-send (2s), which waits to hear from the node.
	runningAfter = 100 * time.Millisecond
)

// task is one accepted command.
type task struct {
	cmd api.Command
	// agentLog is the agent's logger; log() adds the task's attributes
	// the first time the task logs, as a task that succeeds logs nothing
	// at the default level.
	agentLog *slog.Logger
	logOnce  sync.Once
	logger   *slog.Logger
	ctx      context.Context
	cancel   context.CancelCauseFunc
	// parent is the trace context the command carried; span is the task's.
	parent  context.Context
	span    trace.Span
	spanCtx context.Context
	// secrets are the sensitive values opened for this task, scrubbed
	// from its output and error.
	secrets []string
	// started is when the backend started (zero if it never did); running
	// sends the "running" report at most once, and never after the final
	// result.
	started time.Time
	running sync.Once
	// prog forwards the backend's progress reports.
	prog progress
}

// newTask gives a task with its command decoded its context and registers
// it under its job so a cancel finds it. Callers hold a.mu.
func (a *Agent) newTask(t *task) {
	t.ctx, t.cancel = context.WithCancelCause(a.taskCtx)
	a.running[t] = struct{}{}
}

// log is the task's logger: the agent's with the job, step, attempt and
// the trace id the command carried.
func (t *task) log() *slog.Logger {
	t.logOnce.Do(func() { t.logger = commandLogger(t.parent, t.agentLog, &t.cmd) })
	return t.logger
}

func (a *Agent) forget(t *task) {
	a.mu.Lock()
	delete(a.running, t)
	a.mu.Unlock()
	t.cancel(nil)
}

func (a *Agent) runTask(t *task) {
	defer a.tasks.Done()
	defer a.forget(t)
	a.startTaskSpan(t)
	start := time.Now()

	// Wait for a slot; a cancel or shutdown while queued fails the task
	// without running it.
	select {
	case a.slots <- struct{}{}:
	case <-t.ctx.Done():
		a.finish(t, start, nil, fmt.Errorf("not started: %w", context.Cause(t.ctx)))
		return
	case <-a.stopCh:
		a.finish(t, start, nil, errors.New("not started: agent is shutting down"))
		return
	}
	released := false
	release := func() {
		if !released {
			released = true
			<-a.slots
		}
	}
	defer release()
	if err := context.Cause(t.ctx); err != nil {
		a.finish(t, start, nil, fmt.Errorf("not started: %w", err))
		return
	}
	select {
	case <-a.stopCh:
		a.finish(t, start, nil, errors.New("not started: agent is shutting down"))
		return
	default:
	}

	start = time.Now()
	t.started = start
	report := time.AfterFunc(runningAfter, func() { a.reportRunning(t) })
	// Per task at debug level: at info, a fan-out to thousands of nodes
	// would write (and wake for) two lines per node and command.
	if t.agentLog.Enabled(context.Background(), slog.LevelDebug) {
		t.log().Debug("task started", "task", t.cmd.Task.Name(), "check_mode", t.cmd.CheckMode)
	}

	res, abandoned, err := a.execute(t)
	report.Stop()
	// A report already under way finishes before the final result goes
	// out; none is sent after it.
	t.running.Do(func() {})
	if abandoned != nil {
		// The backend still holds its slot until it really returns, so
		// stuck backends cannot push the agent past MaxConcurrent.
		released = true
		go func() {
			<-abandoned
			<-a.slots
		}()
	}
	a.finish(t, start, res, err)
}

// outcome is what a backend run returned.
type outcome struct {
	res *backends.Result
	err error
}

// execute runs the backend with the task's timeout. When the backend ignores
// its cancelled context for abandonAfter, it returns a failure and a channel
// that receives once the backend finally returns.
func (a *Agent) execute(t *task) (*backends.Result, <-chan outcome, error) {
	timeout := a.cfg.TaskTimeout.D()
	if t.cmd.Timeout != "" {
		d, err := time.ParseDuration(t.cmd.Timeout)
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("invalid task timeout %q: want a positive duration such as 30s", t.cmd.Timeout)
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeoutCause(t.ctx, timeout, taskTimeoutError(timeout))
	defer cancel()

	params, err := a.openSealed(t)
	if err != nil {
		return nil, nil, err
	}
	prog := &t.prog
	prog.a, prog.t = a, t
	req := &backends.Request{
		Action:    t.cmd.Task.Action,
		Params:    params,
		CheckMode: t.cmd.CheckMode,
		Progress:  prog.report,
		JobID:     t.cmd.JobID,
		Step:      t.cmd.TaskIndex,
		Node:      a.id,
		Attempt:   t.cmd.Attempt,
	}
	// The backend's goroutine sends exactly one outcome, when it returns
	// or panics; an abandoned backend's slot is released on it.
	out := make(chan outcome, 1)
	go func() {
		defer func() {
			// A panicking backend fails its task, not the agent.
			if p := recover(); p != nil {
				t.log().Error("backend panicked", "panic", t.scrub(fmt.Sprint(p)))
				out <- outcome{err: fmt.Errorf("backend %s panicked: %v", t.cmd.Task.Backend, p)}
			}
		}()
		bctx, span := a.startBackendSpan(ctx, t)
		res, err := a.reg.Run(bctx, t.cmd.Task.Backend, req)
		spanErr := err
		if err != nil && len(t.secrets) > 0 {
			// The span records the error's text: not a sensitive value.
			spanErr = errors.New(t.scrub(err.Error()))
		}
		endSpan(span, spanErr)
		out <- outcome{res, err}
	}()

	var o outcome
	select {
	case o = <-out:
	case <-ctx.Done():
		timer := time.NewTimer(abandonAfter)
		select {
		case o = <-out:
			timer.Stop()
		case <-timer.C:
			prog.stop()
			cause := context.Cause(ctx)
			t.log().Error("backend did not stop after its context ended; abandoning it", "cause", cause)
			return nil, out, fmt.Errorf("%w (the backend did not stop within %s)", cause, abandonAfter)
		}
	}
	prog.stop()
	if o.err != nil {
		// Name the cause when the backend's error does not, so a result
		// says "cancelled" or "timed out" rather than only "context canceled".
		if cause := context.Cause(ctx); cause != nil && !errors.Is(o.err, cause) && !strings.Contains(o.err.Error(), cause.Error()) {
			o.err = fmt.Errorf("%w: %w", cause, o.err)
		}
	}
	return o.res, nil, o.err
}

// taskTimeoutError is the cause of a task's context when its timeout fires:
// "task timed out after 30s". Its text is made only when it is read, not
// for every command that sets it up.
type taskTimeoutError time.Duration

func (e taskTimeoutError) Error() string {
	return "task timed out after " + time.Duration(e).String()
}

// finish publishes the final result of a task.
func (a *Agent) finish(t *task, start time.Time, res *backends.Result, err error) {
	r := api.TaskResult{Status: api.StepSuccess, Duration: api.Duration(time.Since(start))}
	limit := a.cfg.MaxOutputBytes
	if res != nil {
		r.Output = a.truncate(t.scrub(res.Output), &r.Truncated)
		r.Changed = res.Changed
		r.Facts = t.scrubFacts(res.Facts)
	}
	if err != nil {
		r.Status = api.StepFailed
		r.Error = a.truncate(t.scrub(err.Error()), &r.Truncated)
		r.Cancelled = errors.Is(context.Cause(t.ctx), errJobCancelled)
	}
	if r.Facts != nil {
		// Facts count against the same cap: a backend's facts are small
		// by design, so ones that are not are dropped, not cut.
		if fb, ferr := json.Marshal(r.Facts); ferr != nil {
			t.log().Warn("dropping facts that do not encode as JSON", "err", ferr)
			r.Facts = nil
		} else if len(fb) > limit {
			t.log().Warn("dropping facts larger than max_output_bytes", "bytes", len(fb), "max_output_bytes", limit)
			r.Facts = map[string]any{"truncated": fmt.Sprintf("facts of %d bytes dropped (max_output_bytes %d)", len(fb), limit)}
			r.Truncated = true
		}
	}
	if !t.started.IsZero() {
		started := t.started.UTC()
		r.StartedAt = &started
	}
	r.Timestamp = time.Now().UTC()
	// A success is logged at debug level (see runTask), a failure at warn.
	level := slog.LevelDebug
	if err != nil {
		level = slog.LevelWarn
	}
	if t.agentLog.Enabled(context.Background(), level) {
		t.log().Log(context.Background(), level, "task finished", "task", t.cmd.Task.Name(),
			"status", r.Status, "duration", r.Duration.String(), "changed", r.Changed, "err", r.Error)
	}
	a.publishFinal(t, r)
	a.observeTask(t, &r)
}

// truncate caps s at the agent's max_output_bytes, keeping the start (cut
// at a UTF-8 boundary) and saying how much was dropped; it sets *cut when
// it did.
func (a *Agent) truncate(s string, cut *bool) string {
	return truncateTo(s, a.cfg.MaxOutputBytes, cut)
}

func truncateTo(s string, limit int, cut *bool) string {
	if len(s) <= limit {
		return s
	}
	if cut != nil {
		*cut = true
	}
	keep := limit
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf("\n…(truncated: %d bytes, kept the first %d; max_output_bytes)", len(s), keep)
}

func (a *Agent) fill(t *task, r *api.TaskResult) {
	r.JobID = t.cmd.JobID
	r.TaskIndex = t.cmd.TaskIndex
	r.NodeID = a.id
	r.Attempt = t.cmd.Attempt
}

// reportRunning sends the task's "running" report, once.
func (a *Agent) reportRunning(t *task) {
	t.running.Do(func() {
		a.publishCore(t, api.TaskResult{Status: api.ResultRunning, Timestamp: t.started.UTC()})
	})
}

// publishCore sends a running or progress report on the progress subject,
// which no stream stores; losing one is harmless, so it is not
// acknowledged.
func (a *Agent) publishCore(t *task, r api.TaskResult) {
	a.fill(t, &r)
	subject := api.ProgressSubject(r.JobID, r.TaskIndex, r.NodeID)
	data, err := json.Marshal(r)
	if err != nil {
		t.log().Warn("encode result", "err", err)
		return
	}
	msg := &nats.Msg{Subject: subject, Data: data}
	bus.InjectTrace(t.traceCtx(), msg)
	if err := a.nc.PublishMsg(msg); err != nil {
		t.log().Warn("publish result", "status", r.Status, "err", err)
	}
}

// publishFinal sends the final result to the controllers, which store it
// in the results stream, retrying until one answers that it did.
func (a *Agent) publishFinal(t *task, r api.TaskResult) {
	a.fill(t, &r)
	subject := api.ReportSubject(r.JobID, r.TaskIndex, r.NodeID)
	data, err := json.Marshal(r)
	if err != nil {
		t.log().Error("encode final result", "err", err)
		return
	}
	a.mu.Lock()
	a.finals.add(taskKey{job: r.JobID, step: r.TaskIndex, attempt: r.Attempt}, finalResult{subject: subject, data: data}, time.Now())
	a.mu.Unlock()
	a.storeFinal(t.traceCtx(), t.log, subject, data, false)
}

// resendFinal answers a repeated command for a task that already finished
// with the recorded result instead of running it again: a controller that
// restarted (or took over the job) asks again because it never saw the
// answer. It is marked as sent again, so the controller stores it under a
// new message id even within the stream's duplicate window. The caller
// counted it in a.resends.
func (a *Agent) resendFinal(log func() *slog.Logger, f finalResult) {
	defer a.resends.Done()
	a.storeFinal(context.Background(), log, f.subject, f.data, true)
}

// publishPolicy paces the tries of a final result's publish.
var publishPolicy = retry.Policy{
	Initial: 100 * time.Millisecond, Multiplier: 2, Max: publishBackoffMax, Jitter: 0.2, MaxElapsed: publishFor,
}

// storeFinal sends a final result to the controllers' intake as a request;
// traceCtx's span travels in the message headers. It retries (no
// controller answering, a timeout, a controller's error) until publishFor
// has passed, the connection is closed, or the agent stops publishing
// (a.pubCtx). The controller stores the same attempt's result once,
// however often it comes. log is called only when there is something to
// log.
func (a *Agent) storeFinal(traceCtx context.Context, log func() *slog.Logger, subject string, data []byte, resend bool) {
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if resend {
		msg.Header.Set(api.ReportResendHdr, "1")
	}
	bus.InjectTrace(traceCtx, msg)
	err := retry.Do(a.pubCtx, publishPolicy, func(try int) error {
		err := a.publishStored(msg)
		if errors.Is(err, nats.ErrConnectionClosed) {
			return retry.Stop(err)
		}
		if err != nil {
			log().Warn("publishing final result failed", "try", try, "err", err)
		}
		return err
	})
	if err != nil {
		log().Error("final result lost", "subject", subject, "err", err)
	}
}

// publishStored sends msg as a request to the controllers' intake and
// returns nil once a controller answered that it stored it.
func (a *Agent) publishStored(msg *nats.Msg) error {
	ctx, cancel := context.WithTimeout(a.pubCtx, opTimeout)
	defer cancel()
	reply, err := a.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("no controller takes %s: %w", msg.Subject, err)
		}
		return err
	}
	return storeReply(reply.Data)
}

// progress forwards a backend's progress reports, at most one per
// progressEvery, and none after the task ended.
type progress struct {
	a       *Agent
	t       *task
	mu      sync.Mutex
	last    time.Time
	stopped bool
}

func (p *progress) report(pct int, message string) {
	p.mu.Lock()
	now := time.Now()
	if p.stopped || (!p.last.IsZero() && now.Sub(p.last) < progressEvery) {
		p.mu.Unlock()
		return
	}
	p.last = now
	pct = min(max(pct, 0), 100)
	// Running comes first, so the step shows running while it reports.
	p.a.reportRunning(p.t)
	// Publishing under the lock keeps a report from overtaking the final
	// result: stop waits for it.
	p.a.publishCore(p.t, api.TaskResult{Status: api.ResultProgress, Progress: &pct, Output: p.a.truncate(p.t.scrub(message), nil), Timestamp: now.UTC()})
	p.mu.Unlock()
}

func (p *progress) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// openSealed returns the task's params with its sensitive values opened.
// A param that holds api.SensitiveValue without a value sealed for this
// node fails the task, naming the param: running with the placeholder
// would be wrong.
//
// Without a sensitive param (the usual command) it returns the command's
// own params, as the registry copies them anyway when it applies the
// schema's defaults; only a command with sensitive ones gets a copy to
// open them in, so the command keeps the placeholders.
func (a *Agent) openSealed(t *task) (api.Params, error) {
	params := t.cmd.Task.Params
	sensitive := false
	for _, v := range params {
		if v == api.SensitiveValue {
			sensitive = true
			break
		}
	}
	if !sensitive {
		return params, nil
	}
	params = maps.Clone(params)
	for k, v := range params {
		if v != api.SensitiveValue {
			continue
		}
		sealed, ok := t.cmd.Sealed[k]
		if !ok {
			return nil, fmt.Errorf("sensitive param %q did not arrive sealed for this node (the controller could not read it, or this agent registered no seal key)", k)
		}
		plain, err := a.sealKey.Open(sealed, api.SealContext(t.cmd.JobID, t.cmd.TaskIndex, a.id, k))
		if err != nil {
			return nil, fmt.Errorf("sensitive param %q: %w", k, err)
		}
		params[k] = string(plain)
		if len(plain) > 0 {
			t.secrets = append(t.secrets, string(plain))
		}
	}
	return params, nil
}

// scrub replaces the task's sensitive values in text it reports (a
// program's output or error may echo them).
func (t *task) scrub(s string) string {
	for _, v := range t.secrets {
		s = strings.ReplaceAll(s, v, api.SensitiveValue)
	}
	return s
}
