// Package proc runs one program with an argument vector — never through a
// shell — in its own process group, so that a cancelled or timed-out task
// takes every child the program started (apt-get's dpkg, a processor's
// workers) down with it.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// MaxOutput bounds what is kept of stdout and stderr each: the tail, since
// the end of a program's output is where it explains a failure.
const MaxOutput = 64 << 10

// Grace is how long a cancelled program has between SIGTERM and SIGKILL.
const Grace = 3 * time.Second

// Cmd is one program to run.
type Cmd struct {
	Path string
	Args []string
	// Env is added to the agent's environment.
	Env   []string
	Stdin []byte
	Dir   string
}

// Output is what a finished program left behind.
type Output struct {
	Stdout, Stderr string
	ExitCode       int
}

// ExitError is a program that ran and exited non-zero.
type ExitError struct {
	Path     string
	ExitCode int
	Stderr   string
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s exited with status %d", e.Path, e.ExitCode)
	if s := bytes.TrimSpace([]byte(e.Stderr)); len(s) > 0 {
		msg += ": " + string(s)
	}
	return msg
}

// Run runs c and waits for it. A non-zero exit is an *ExitError (with the
// output still returned); a cancelled context kills the process group and
// returns an error wrapping the context's cause.
func Run(ctx context.Context, c Cmd) (Output, error) {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	stdout, stderr := NewTail(MaxOutput), NewTail(MaxOutput)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	Configure(cmd)
	err := cmd.Run()
	out := Output{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: %w", c.Path, context.Cause(ctx))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, &ExitError{Path: c.Path, ExitCode: ee.ExitCode(), Stderr: out.Stderr}
	}
	if err != nil {
		return out, fmt.Errorf("run %s: %w", c.Path, err)
	}
	return out, nil
}
