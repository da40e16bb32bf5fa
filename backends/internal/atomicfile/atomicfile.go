// Package atomicfile replaces files so that a reader sees either the old
// content or the new, never a torn write, even across a crash.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Write replaces path with data: a temp file in the same directory (so the
// rename cannot cross filesystems), chmod to mode (explicitly, so the umask
// does not matter), optional chown (uid/gid -1 leave it), fsync, rename,
// fsync of the directory so the rename itself is durable.
func Write(path string, data []byte, mode os.FileMode, uid, gid int) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := os.Rename(name, path); err != nil {
		// A bind-mounted file (a container's /etc/resolv.conf) cannot be
		// renamed over; rewriting it in place is the only way left.
		if errors.Is(err, syscall.EBUSY) {
			_ = os.Remove(name)
			ok = true
			return writeInPlace(path, data)
		}
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	return syncDir(dir)
}

func writeInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("rewrite in place: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("rewrite in place: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}

// WriteIn is Write for a path beneath root: every step (the temp file, the
// mode and owner, set on the open file, the rename and the directory sync)
// goes through root, so a directory swapped for a symlink while it runs
// cannot lead the write outside root.
func WriteIn(root *os.Root, rel string, data []byte, mode os.FileMode, uid, gid int) error {
	dir := filepath.Dir(rel)
	tmp, name, err := createTempIn(root, rel)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = root.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := root.Rename(name, rel); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			_ = root.Remove(name)
			ok = true
			return writeInPlaceIn(root, rel, data)
		}
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	d, err := root.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}

func writeInPlaceIn(root *os.Root, rel string, data []byte) error {
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("rewrite in place: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("rewrite in place: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	return f.Close()
}

// StreamIn is WriteIn for content read from r, too large to hold in memory
// (a download). verify runs once all of r is in the temp file and before
// the rename: an error from it (a checksum that does not match) leaves the
// old file in place and removes the temp file. A bind-mounted target that
// cannot be renamed over is an error here: rewriting in place would
// expose a half-written file.
func StreamIn(root *os.Root, rel string, r io.Reader, mode os.FileMode, uid, gid int, verify func() error) error {
	dir := filepath.Dir(rel)
	tmp, name, err := createTempIn(root, rel)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = root.Remove(name)
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if verify != nil {
		if err := verify(); err != nil {
			return err
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := root.Rename(name, rel); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	d, err := root.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}

// createTempIn makes a new temp file beside rel, beneath root, readable by
// its owner only until its mode is set.
func createTempIn(root *os.Root, rel string) (*os.File, string, error) {
	dir := filepath.Dir(rel)
	for try := 0; ; try++ {
		name := filepath.Join(dir, "."+filepath.Base(rel)+".tmp-"+strconv.FormatUint(rand.Uint64(), 36)) //nolint:gosec // a temp name, not a secret
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, os.ErrExist) || try == 10 {
			return nil, "", fmt.Errorf("create temp file: %w", err)
		}
	}
}
