//go:build !linux

package sysinfo

import "runtime"

// uname: the agent runs on Linux; on other systems (where the one binary
// is built as the Terraform provider) the kernel is unknown and the
// machine is the one Go was built for.
func uname() (kernel, arch string) { return "", runtime.GOARCH }
