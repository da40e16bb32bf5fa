package user

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/atomicfile"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/fsowner"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/textdiff"
)

// maxKeysFile bounds the authorized_keys file read: thousands of keys.
const maxKeysFile = 4 << 20

// keyLine is one parsed key: its identity (the wire-format key, comments
// and options aside) and the line as written.
type keyLine struct {
	id, line string
}

func parseKeys(text string) ([]keyLine, error) {
	var out []keyLine
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l))
		if err != nil {
			return nil, fmt.Errorf("key %.40q…: %w", l, err)
		}
		out = append(out, keyLine{id: string(pub.Marshal()), line: l})
	}
	if len(out) == 0 {
		return nil, errors.New("no key given")
	}
	return out, nil
}

// identity of an existing line ("" for comments, blanks and lines that do
// not parse, which are kept as they are, except by exclusive).
func identity(l string) string {
	t := strings.TrimSpace(l)
	if t == "" || strings.HasPrefix(t, "#") {
		return ""
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t))
	if err != nil {
		return ""
	}
	return string(pub.Marshal())
}

// editKeys returns the new authorized_keys content.
func editKeys(old string, want []keyLine, state string) string {
	if state == "exclusive" {
		var b strings.Builder
		for _, k := range want {
			b.WriteString(k.line + "\n")
		}
		return b.String()
	}
	var lines []string
	if old != "" {
		lines = strings.Split(strings.TrimSuffix(old, "\n"), "\n")
	}
	have := map[string]bool{}
	wanted := map[string]bool{}
	for _, k := range want {
		wanted[k.id] = true
	}
	var kept []string
	for _, l := range lines {
		id := identity(l)
		if state == "absent" && id != "" && wanted[id] {
			continue
		}
		have[id] = true
		kept = append(kept, l)
	}
	if state == "present" {
		for _, k := range want {
			if !have[k.id] {
				kept = append(kept, k.line)
				have[k.id] = true
			}
		}
	}
	if len(kept) == 0 {
		return ""
	}
	if len(kept) == len(lines) && state == "absent" {
		return old
	}
	if len(kept) == len(lines) && state == "present" {
		return old
	}
	return strings.Join(kept, "\n") + "\n"
}

func (b *Backend) authorizedKey(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	name, state := req.Params["user"], req.Params["state"]
	want, err := parseKeys(req.Params["key"])
	if err != nil {
		return nil, err
	}
	acct, err := b.lookupUser(ctx, name)
	if err != nil {
		return nil, err
	}
	if acct == nil {
		return nil, fmt.Errorf("user %s does not exist", name)
	}
	if err := notRoot(acct, ""); err != nil {
		return nil, err
	}
	return writeKeys(req, acct, want, state)
}

// writeKeys edits the keys file beneath the user's home. Everything goes
// through an os.Root on the home, and .ssh or the file being a symlink is
// refused, so a user cannot point them at a file of root's.
func writeKeys(req *backends.Request, acct *account, want []keyLine, state string) (*backends.Result, error) {
	root, err := os.OpenRoot(acct.home)
	if err != nil {
		return nil, fmt.Errorf("home of %s: %w", acct.name, err)
	}
	defer root.Close()
	// ~/.ssh is made or chowned to the user: in a home the user does not
	// own (daemon's /usr/sbin, or home=/root given to a new user) that
	// would hand them a directory inside someone else's.
	if hfi, err := root.Stat("."); err != nil {
		return nil, fmt.Errorf("home of %s: %w", acct.name, err)
	} else if uid, _, ok := fsowner.Of(hfi); ok && uid != acct.uid {
		return nil, fmt.Errorf("home %s of %s is not owned by it (uid %d): refusing to write ~/.ssh there", acct.home, acct.name, uid)
	}
	const dir, file = ".ssh", ".ssh/authorized_keys"
	path := acct.home + "/" + file
	facts := map[string]any{"user": acct.name, "path": path}

	dirFI, err := root.Lstat(dir)
	dirExists := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("stat %s/.ssh: %w", acct.home, err)
	case dirFI.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%s/.ssh is a symlink: refusing to follow it", acct.home)
	case !dirFI.IsDir():
		return nil, fmt.Errorf("%s/.ssh is not a directory", acct.home)
	}
	var old string
	var fileFI os.FileInfo
	if dirExists {
		fileFI, err = root.Lstat(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fileFI = nil
		case err != nil:
			return nil, fmt.Errorf("stat %s: %w", path, err)
		case !fileFI.Mode().IsRegular():
			return nil, fmt.Errorf("%s is not a regular file (a symlink is refused)", path)
		default:
			f, err := root.Open(file)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			data, err := io.ReadAll(io.LimitReader(f, maxKeysFile+1))
			_ = f.Close()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			if len(data) > maxKeysFile {
				return nil, fmt.Errorf("%s is larger than %d bytes", path, maxKeysFile)
			}
			old = string(data)
		}
	}
	if state == "absent" && fileFI == nil {
		return &backends.Result{Output: path + " does not exist", Facts: facts}, nil
	}
	updated := editKeys(old, want, state)
	content := fileFI == nil || updated != old
	attrs := !dirExists || !attrsOK(dirFI, sshDirMode, acct) || (fileFI != nil && !attrsOK(fileFI, keyFileMode, acct))
	facts["keys"] = len(want)
	if !content && !attrs {
		return &backends.Result{Output: path + " is up to date", Facts: facts}, nil
	}
	diff := textdiff.Unified(path, old, updated)
	if diff != "" {
		facts["diff"] = diff
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would change " + path + "\n" + diff, Changed: true, Facts: facts}, nil
	}
	if !dirExists {
		if err := root.Mkdir(dir, sshDirMode); err != nil {
			return nil, fmt.Errorf("mkdir %s/.ssh: %w", acct.home, err)
		}
	}
	// Mode and owner are set on the opened directory, so a swap after the
	// Lstat cannot redirect them.
	d, err := root.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s/.ssh: %w", acct.home, err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s/.ssh is no longer a directory", acct.home)
	}
	if err := d.Chmod(sshDirMode); err != nil {
		return nil, fmt.Errorf("chmod %s/.ssh: %w", acct.home, err)
	}
	if err := d.Chown(acct.uid, acct.gid); err != nil {
		return nil, fmt.Errorf("chown %s/.ssh: %w", acct.home, err)
	}
	if err := atomicfile.WriteIn(root, file, []byte(updated), keyFileMode, acct.uid, acct.gid); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &backends.Result{Output: "changed " + path + "\n" + diff, Changed: true, Facts: facts}, nil
}

func attrsOK(fi os.FileInfo, mode os.FileMode, a *account) bool {
	if fi.Mode().Perm() != mode {
		return false
	}
	uid, gid, ok := fsowner.Of(fi)
	return !ok || (uid == a.uid && gid == a.gid)
}
