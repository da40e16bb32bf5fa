package proc

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Configure: Windows has no process groups to signal; the agent runs on
// Linux, and the Windows build of the binary is the Terraform provider,
// which runs no programs. Cancellation kills the program itself.
func Configure(cmd *exec.Cmd) {
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = Grace + time.Second
}

// KillGroup kills p at once (see Configure).
func KillGroup(p *os.Process, _ time.Duration) {
	if p != nil {
		_ = p.Kill()
	}
}

// OwnGroup: no process groups here (see Configure).
func OwnGroup() *syscall.SysProcAttr { return nil }
