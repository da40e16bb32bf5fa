//go:build !linux

package regularfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotRegular is a path that names a directory, device, FIFO or socket.
var ErrNotRegular = errors.New("not a regular file")

// Read returns the content of the regular file at path, refusing one
// larger than max bytes. Without Linux's O_PATH the check is a stat before
// the open, so a swap in between is not caught; agents run on Linux, and
// this lets the binary (the Terraform provider elsewhere) build.
func Read(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
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
