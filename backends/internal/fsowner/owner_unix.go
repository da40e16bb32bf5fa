//go:build !windows

// Package fsowner reads a file's owner where the system has one.
package fsowner

import (
	"os"
	"syscall"
)

// Of is the owner and group of fi; ok is false when the system does not say.
func Of(fi os.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
