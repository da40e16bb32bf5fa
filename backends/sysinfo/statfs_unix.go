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
	// The fields' types differ between systems (Bsize is int64 on Linux,
	// uint32 on macOS), hence the conversions.
	return fsStats{
		bsize: uint64(st.Bsize), blocks: uint64(st.Blocks), bfree: uint64(st.Bfree),
		bavail: uint64(st.Bavail), files: uint64(st.Files), ffree: uint64(st.Ffree),
	}, nil
}
