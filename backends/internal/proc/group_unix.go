//go:build !windows

package proc

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Configure puts cmd in its own process group and makes context
// cancellation terminate the whole group: SIGTERM, then SIGKILL after
// Grace. WaitDelay stops Wait from hanging on pipes a grandchild still
// holds open.
func Configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = OwnGroup()
	cmd.Cancel = func() error {
		KillGroup(cmd.Process, Grace)
		return nil
	}
	cmd.WaitDelay = Grace + time.Second
}

// KillGroup sends SIGTERM to p's process group and SIGKILL after grace
// (at once when grace is 0).
func KillGroup(p *os.Process, grace time.Duration) {
	if p == nil {
		return
	}
	pgid := p.Pid
	if grace <= 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	time.AfterFunc(grace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

// OwnGroup makes a program the leader of a process group of its own, so
// that KillGroup reaches its children too.
func OwnGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
