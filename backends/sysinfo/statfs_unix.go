//go:build !windows

package sysinfo

import "syscall"

// fsStats are the numbers of statfs(2) disk reports, in blocks of bsize.
type fsStats struct {
	bsize, blocks, bfree, bavail, files, ffree uint64
}

func statfs(path string) (fsStats, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsStats{}, err
	}
	// Bsize's type differs between systems (int64 on Linux, uint32 on
	// macOS); the counts are uint64 on both.
	return fsStats{
		bsize: uint64(st.Bsize), blocks: st.Blocks, bfree: st.Bfree,
		bavail: st.Bavail, files: st.Files, ffree: st.Ffree,
	}, nil
}
