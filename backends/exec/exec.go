// Package exec is the exec backend: it runs programs that the agent's own
// configuration registers under a name — a job names the program, never a
// path — and talks to them with JSON over stdin and stdout:
//
//	→ {"job_id":"job-…","step":0,"node":"web-1","attempt":1,"request_id":"r1","type":"<program>","payload":<input>}
//	← {"status":"progress","pct":45,"message":"rendering frame 12/27"}
//	← {"status":"done","result":{"changed":true,"output":"…",…}}
//	← {"status":"error","error":"out of memory"}
//
// A oneshot program is started for each request and reads one request
// line; a daemon is started once and reads one request per line, answering
// each before the next is sent. Every program runs in its own process
// group, killed as a whole on timeout or cancellation.
package exec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
)

// Program modes.
const (
	Oneshot = "oneshot"
	Daemon  = "daemon"
)

// MaxLine bounds one line of a program's stdout.
const MaxLine = 4 << 20

// exitGrace is how long a oneshot program may take to exit after its final
// line before its process group is killed.
const exitGrace = 5 * time.Second

// stderrSettle is how long a daemon's error waits for its stderr.
const stderrSettle = 50 * time.Millisecond

// ProgramSpec registers one program.
type ProgramSpec struct {
	// Path is the executable, absolute.
	Path string
	// Args are fixed arguments; jobs cannot add any.
	Args []string
	// Mode is Oneshot (default) or Daemon.
	Mode string
	// Timeout bounds each request; 0 leaves only the task's own timeout.
	Timeout time.Duration
}

// Options configure the backend.
type Options struct {
	// Programs maps the names jobs use to programs.
	Programs map[string]ProgramSpec
}

// Backend is the exec backend.
type Backend struct {
	names    []string
	programs map[string]ProgramSpec
	daemons  map[string]*daemon
	seq      atomic.Uint64
}

// New checks the programs and returns the backend. Daemons start on their
// first request.
func New(opts Options) (*Backend, error) {
	b := &Backend{programs: map[string]ProgramSpec{}, daemons: map[string]*daemon{}}
	for name, spec := range opts.Programs {
		if !api.ValidToken(name) {
			return nil, fmt.Errorf("exec: program name %q: want letters, digits, - and _", name)
		}
		if !filepath.IsAbs(spec.Path) {
			return nil, fmt.Errorf("exec: program %s: path %q is not absolute", name, spec.Path)
		}
		switch spec.Mode {
		case "":
			spec.Mode = Oneshot
		case Oneshot, Daemon:
		default:
			return nil, fmt.Errorf("exec: program %s: mode %q is not %s or %s", name, spec.Mode, Oneshot, Daemon)
		}
		if spec.Timeout < 0 {
			return nil, fmt.Errorf("exec: program %s: negative timeout", name)
		}
		b.programs[name] = spec
		b.names = append(b.names, name)
		if spec.Mode == Daemon {
			b.daemons[name] = &daemon{name: name, spec: spec}
		}
	}
	slices.Sort(b.names)
	return b, nil
}

// Schema declares run. The program enum is the registered names, so the
// controller rejects a job naming a program this node does not have.
func (b *Backend) Schema() api.BackendSchema {
	return api.BackendSchema{
		Name:        "exec",
		Description: "Run a program registered in the agent's configuration, with JSON over stdin and stdout.",
		Actions: []api.ActionSchema{{
			Name:        "run",
			Description: "Send input to the program and return its result; changed comes from the result's \"changed\" field (true when absent).",
			Params: []api.ParamSchema{
				{Name: "program", Type: api.TypeString, Required: true, Enum: slices.Clone(b.names), Description: "Name of a program registered on the node."},
				{Name: "input", Type: api.TypeString, Default: "{}", Description: "A JSON document, passed to the program as the request's payload."},
				{Name: "secret", Type: api.TypeString, Sensitive: true, Description: "A credential for the program (token, password), passed as the request's \"secret\" field; never stored, logged or shown in clear."},
			},
		}},
	}
}

// Close stops every running daemon.
func (b *Backend) Close() error {
	for _, d := range b.daemons {
		d.mu.Lock()
		d.stop()
		d.mu.Unlock()
	}
	return nil
}

// request is the line a program reads. job_id, step, node and attempt
// name the task (job_id is the job's id; called outside a job it is the
// request id); request_id counts this backend's requests.
type request struct {
	JobID     string          `json:"job_id"`
	Step      int             `json:"step"`
	Node      string          `json:"node,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	RequestID string          `json:"request_id"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	// Secret is the run's sensitive "secret" param, when set.
	Secret string `json:"secret,omitempty"`
}

// response is one line a program writes.
type response struct {
	JobID   string          `json:"job_id,omitempty"`
	Status  string          `json:"status"`
	Pct     float64         `json:"pct"`
	Message string          `json:"message"`
	Msg     string          `json:"msg"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
}

// Run executes one request.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if req.Action != "run" {
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	name := req.Params["program"]
	spec, ok := b.programs[name]
	if !ok {
		return nil, fmt.Errorf("exec: no program %q on this node (registered: %s)", name, strings.Join(b.names, ", "))
	}
	input := req.Params["input"]
	if input == "" {
		input = "{}"
	}
	if !json.Valid([]byte(input)) {
		return nil, fmt.Errorf("exec: input is not a JSON document")
	}
	rid := "r" + strconv.FormatUint(b.seq.Add(1), 10)
	jobID := req.JobID
	if jobID == "" {
		jobID = rid
	}
	line, err := json.Marshal(request{JobID: jobID, Step: req.Step, Node: req.Node, Attempt: req.Attempt, RequestID: rid, //nolint:gosec // the program is sent its secret on purpose (run.secret), over its own stdin
		Type: name, Payload: json.RawMessage(input), Secret: req.Params["secret"]})
	if err != nil {
		return nil, fmt.Errorf("exec: encode request: %w", err)
	}
	line = append(line, '\n')
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.Timeout, fmt.Errorf("program %s timed out after %s: %w", name, spec.Timeout, context.DeadlineExceeded))
		defer cancel()
	}
	progress := req.Progress
	if progress == nil {
		progress = func(int, string) {}
	}
	if spec.Mode == Daemon {
		return b.daemons[name].run(ctx, line, progress)
	}
	return runOneshot(ctx, name, spec, line, progress)
}

// session reads one request's answer from lines.
type session struct {
	name     string
	progress func(int, string)
	other    *proc.Tail // stdout lines that are not protocol messages
}

// handle processes one stdout line and returns the final result or error
// once the program has given one (done is then true).
func (s *session) handle(line []byte) (res *backends.Result, done bool, err error) {
	var r response
	if json.Unmarshal(line, &r) != nil || r.Status == "" {
		// Not protocol: keep it as log output rather than failing on a
		// stray print.
		_, _ = s.other.Write(append(line, '\n'))
		return nil, false, nil
	}
	switch r.Status {
	case "progress":
		msg := r.Message
		if msg == "" {
			msg = r.Msg
		}
		s.progress(max(0, min(100, int(r.Pct))), msg)
		return nil, false, nil
	case "done":
		return s.result(r.Result), true, nil
	case "error":
		if r.Error == "" {
			r.Error = "failed without a message"
		}
		return &backends.Result{Output: s.other.String()}, true, errors.New(r.Error)
	}
	_, _ = s.other.Write(append(line, '\n'))
	return nil, false, nil
}

func (s *session) result(raw json.RawMessage) *backends.Result {
	res := &backends.Result{Changed: true}
	var obj map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &obj) == nil && obj != nil {
		res.Facts = obj
		if c, ok := obj["changed"].(bool); ok {
			res.Changed = c
		}
		if o, ok := obj["output"].(string); ok {
			res.Output = o
		}
	} else if len(raw) > 0 && string(raw) != "null" {
		var v any
		_ = json.Unmarshal(raw, &v)
		res.Facts = map[string]any{"result": v}
	}
	if res.Output == "" {
		res.Output = strings.TrimSpace(s.other.String())
	}
	if res.Output == "" && len(raw) > 0 {
		res.Output = string(raw)
	}
	return res
}

// failure builds the error for a program that stopped answering, with the
// tail of its stderr.
func failure(name string, cause error, stderr *proc.Tail) error {
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > 2048 {
		msg = "…" + msg[len(msg)-2048:]
	}
	if msg == "" {
		return fmt.Errorf("program %s: %w", name, cause)
	}
	return fmt.Errorf("program %s: %w; stderr: %s", name, cause, msg)
}

func runOneshot(ctx context.Context, name string, spec ProgramSpec, line []byte, progress func(int, string)) (*backends.Result, error) {
	cmd := osexec.CommandContext(ctx, spec.Path, spec.Args...)
	proc.Configure(cmd)
	cmd.Stdin = strings.NewReader(string(line))
	stderr := proc.NewTail(proc.MaxOutput)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("program %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("program %s: start: %w", name, err)
	}
	s := &session{name: name, progress: progress, other: proc.NewTail(proc.MaxOutput)}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var (
		res     *backends.Result
		runErr  error
		final   bool
		timer   *time.Timer
		scanErr error
	)
	for sc.Scan() {
		if res, final, runErr = s.handle(sc.Bytes()); final {
			// The answer is in; the program gets a moment to exit, then
			// its group is killed so that Wait cannot hang.
			timer = time.AfterFunc(exitGrace, func() { proc.KillGroup(cmd.Process, 0) })
			_, _ = io.Copy(io.Discard, stdout)
			break
		}
	}
	if !final {
		scanErr = sc.Err()
		if scanErr != nil {
			proc.KillGroup(cmd.Process, 0)
		}
	}
	waitErr := cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	if ctx.Err() != nil {
		return &backends.Result{Output: stderr.String()}, failure(name, context.Cause(ctx), stderr)
	}
	if final {
		if runErr != nil {
			res.Output = strings.TrimSpace(res.Output + "\n" + stderr.String())
			return res, failure(name, runErr, stderr)
		}
		return res, nil
	}
	if scanErr != nil {
		return &backends.Result{Output: stderr.String()}, failure(name, fmt.Errorf("read stdout: %w", scanErr), stderr)
	}
	return &backends.Result{Output: s.other.String() + stderr.String()},
		failure(name, fmt.Errorf("exited without a result (%v)", exitStatus(waitErr)), stderr)
}

func exitStatus(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// daemon is one long-running program.
type daemon struct {
	name string
	spec ProgramSpec

	mu     sync.Mutex // one request at a time; guards the fields below
	cmd    *osexec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte // closed when stdout ends
	readEr error       // why stdout ended; read after lines is closed
	exited chan struct{}
	stderr *proc.Tail
}

// start launches the program. Not bound to any request's context: it
// outlives them.
func (d *daemon) start() error {
	cmd := osexec.Command(d.spec.Path, d.spec.Args...)
	cmd.SysProcAttr = proc.OwnGroup()
	d.stderr = proc.NewTail(proc.MaxOutput)
	cmd.Stderr = d.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	d.cmd, d.stdin = cmd, stdin
	lines := make(chan []byte, 64)
	exited := make(chan struct{})
	d.lines, d.exited = lines, exited
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), MaxLine)
		for sc.Scan() {
			lines <- slices.Clone(sc.Bytes())
		}
		d.readEr = sc.Err()
		close(lines)
		_ = cmd.Wait()
		close(exited)
	}()
	return nil
}

// stop kills the daemon's process group and waits for it. Callers hold mu.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.stdin.Close()
	proc.KillGroup(d.cmd.Process, 0)
	// Drain so the reader goroutine can finish.
	go func(lines chan []byte) {
		for range lines {
		}
	}(d.lines)
	<-d.exited
	d.cmd = nil
}

func (d *daemon) run(ctx context.Context, line []byte, progress func(int, string)) (*backends.Result, error) {
	// Wait for our turn, but not past the task's deadline.
	locked := make(chan struct{})
	go func() {
		d.mu.Lock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-ctx.Done():
		go func() { <-locked; d.mu.Unlock() }()
		return nil, fmt.Errorf("program %s: waiting for the daemon: %w", d.name, context.Cause(ctx))
	}
	defer d.mu.Unlock()

	if d.cmd != nil {
		select {
		case <-d.exited:
			d.cmd = nil // died between requests; start a fresh one
		default:
		}
	}
	if d.cmd == nil {
		if err := d.start(); err != nil {
			return nil, fmt.Errorf("program %s: %w", d.name, err)
		}
	}
	// Lines written between requests answer nobody.
	for drained := false; !drained; {
		select {
		case <-d.lines:
		default:
			drained = true
		}
	}
	d.stderr.Reset()
	if _, err := d.stdin.Write(line); err != nil {
		d.stop()
		return nil, failure(d.name, fmt.Errorf("write request: %w", err), d.stderr)
	}
	s := &session{name: d.name, progress: progress, other: proc.NewTail(proc.MaxOutput)}
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				cause := d.readEr
				if cause == nil {
					cause = errors.New("exited without a result")
				}
				<-d.exited
				err := failure(d.name, fmt.Errorf("%w (%s)", cause, exitStatus(exitErr(d.cmd))), d.stderr)
				d.cmd = nil
				return &backends.Result{Output: s.other.String() + d.stderr.String()}, err
			}
			res, final, err := s.handle(l)
			if !final {
				continue
			}
			if err != nil {
				// stderr travels on its own pipe: give what the program
				// wrote there before its error line a moment to arrive.
				time.Sleep(stderrSettle)
				res.Output = strings.TrimSpace(res.Output + "\n" + d.stderr.String())
				return res, failure(d.name, err, d.stderr)
			}
			return res, nil
		case <-ctx.Done():
			// The daemon is mid-request; its state is unknown, so it is
			// replaced rather than reused.
			d.stop()
			return &backends.Result{Output: d.stderr.String()}, failure(d.name, context.Cause(ctx), d.stderr)
		}
	}
}

func exitErr(cmd *osexec.Cmd) error {
	if cmd == nil || cmd.ProcessState == nil {
		return nil
	}
	if cmd.ProcessState.Success() {
		return nil
	}
	return errors.New(cmd.ProcessState.String())
}
