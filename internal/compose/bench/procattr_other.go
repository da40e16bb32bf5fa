//go:build !linux

package bench

import "syscall"

// childProcAttr: only Linux has a parent-death signal; the bench measures
// agents through /proc, so it runs on Linux, and elsewhere it only builds.
func childProcAttr() *syscall.SysProcAttr { return nil }
