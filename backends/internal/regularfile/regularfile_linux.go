//go:build linux

// Package regularfile reads a file that a job names anywhere on the host
// (a CA bundle, a certificate) for a read-only action, refusing anything
// but a regular file before it is opened for reading.
//
// The check cannot be a stat followed by an open: between the two a
// symlink could be swapped for one to a device, and opening some devices
// acts (opening /dev/watchdog arms the watchdog, and closing it unwritten
// reboots the host), while a FIFO's open waits for a writer and /dev/zero
// never ends. So the path is opened with O_PATH, which reaches the inode
// without opening it (no driver, no wait); that descriptor is checked with
// fstat, and only a regular file is then opened for reading, through
// /proc/self/fd, which reopens that same inode whatever the path names by
// then.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is a path that names a directory, device, FIFO or socket.
var ErrNotRegular = errors.New("not a regular file")

// Read returns the content of the regular file at path, refusing one
// larger than max bytes.
func Read(path string, max int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, nil
}
