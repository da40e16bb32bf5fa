package proc

import (
	"errors"
	"syscall"
)

// Signals are the signals signal sends, by name. Windows has no USR1 and
// USR2; the agent runs on Linux, and this lets the binary (the Terraform
// provider there) build.
var Signals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "HUP": syscall.SIGHUP, "INT": syscall.SIGINT,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.Signal(0x1e), "USR2": syscall.Signal(0x1f),
}

// errGone is kill's error for a process that no longer exists.
var errGone = errors.New("no such process")

func kill(int, syscall.Signal) error { return errors.New("signal is not supported on windows") }
