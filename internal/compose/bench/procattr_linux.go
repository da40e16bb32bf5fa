package bench

import "syscall"

// childProcAttr makes a child get SIGTERM when the bench dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
