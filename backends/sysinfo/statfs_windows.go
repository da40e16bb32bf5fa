package sysinfo

import (
	"errors"
	"fmt"
)

// fsStats are the numbers of statfs(2) disk reports, in blocks of bsize.
type fsStats struct {
	bsize, blocks, bfree, bavail, files, ffree uint64
}

// statfs: the agent runs on Linux; the Windows build of the binary is the
// Terraform provider, where disk is never asked.
func statfs(string) (fsStats, error) {
	return fsStats{}, fmt.Errorf("statfs: %w on windows", errors.ErrUnsupported)
}
