//go:build !windows

package proc

import "syscall"

// Signals are the signals signal sends, by name.
var Signals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "HUP": syscall.SIGHUP, "INT": syscall.SIGINT,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

// errGone is kill's error for a process that no longer exists.
var errGone = syscall.ESRCH

func kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
