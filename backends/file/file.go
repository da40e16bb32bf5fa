// Package file is the file backend: write, remove, stat, mkdir, read, line,
// block and copy (from an https URL, checked against a sha256), confined
// to configured path prefixes. Paths are resolved through symlinks before
// the prefix check, so a link inside the prefix cannot lead a write out of
// it, and every file operation then goes through an os.Root opened on the
// prefix (openat with RESOLVE_BENEATH-like checks at each step), so a
// directory swapped for a symlink between the check and the write cannot
// either. Mode and owner are set on the opened file, not by name. Writes
// are atomic (temp file, fsync, rename) and report no change when content
// and mode already match.
//
// With no prefixes configured the backend refuses every path: a node must
// say where files may be touched, there is no default that is safe on
// every host.
package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/atomicfile"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/fsowner"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/textdiff"
)

// Param patterns. Modes are plain permission bits: setuid, setgid and
// sticky bits are not something a fleet job should hand out.
const (
	PathPattern  = `^/`
	ModePattern  = `^0?[0-7]{3}$`
	OwnerPattern = `^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})$`
)

// ErrOutside is a path outside every allowed prefix.
var ErrOutside = errors.New("path is outside the allowed prefixes")

// Options configure the backend.
type Options struct {
	// AllowedPrefixes are the absolute directories under which the backend
	// may work. None: every path is refused.
	AllowedPrefixes []string
	// MaxReadBytes is the largest file read returns (the agent passes its
	// max_output_bytes, so what read returns is never truncated);
	// default DefaultMaxReadBytes.
	MaxReadBytes int
	// HTTPClient fetches copy's URLs; default: one that honours the proxy
	// environment and the system's CA roots.
	HTTPClient *http.Client
	// DeniedPrefixes are paths no action may reach even under an allowed
	// prefix, nor remove a directory holding: the agent's own data
	// directory and secrets (its key, its join token), which would let
	// whoever reads them act as the node.
	DeniedPrefixes []string
}

// Backend is the file backend.
type Backend struct {
	prefixes []string
	denied   []string
	maxRead  int
	client   *http.Client
}

// New returns the file backend; every prefix must be absolute.
func New(opts Options) (*Backend, error) {
	b := &Backend{maxRead: opts.MaxReadBytes, client: opts.HTTPClient}
	if b.maxRead <= 0 {
		b.maxRead = DefaultMaxReadBytes
	}
	if b.client == nil {
		b.client = &http.Client{Transport: http.DefaultTransport}
	}
	for _, p := range opts.AllowedPrefixes {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("file backend: allowed prefix %q is not an absolute path", p)
		}
		b.prefixes = append(b.prefixes, filepath.Clean(p))
	}
	for _, p := range opts.DeniedPrefixes {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("file backend: denied path %q is not an absolute path", p)
		}
		// Resolved, as the paths it is compared with are.
		p = filepath.Clean(p)
		if rp, err := filepath.EvalSymlinks(p); err == nil {
			p = rp
		}
		b.denied = append(b.denied, p)
	}
	return b, nil
}

// Schema declares write, remove, stat, mkdir, read, line, block and copy.
func (b *Backend) Schema() api.BackendSchema {
	path := api.ParamSchema{Name: "path", Type: api.TypeString, Required: true, Pattern: PathPattern,
		Description: "Absolute path; must lie under one of the node's allowed prefixes."}
	owner := api.ParamSchema{Name: "owner", Type: api.TypeString, Pattern: OwnerPattern, Description: "User name or uid; default: leave as is (new files: the agent's user)."}
	group := api.ParamSchema{Name: "group", Type: api.TypeString, Pattern: OwnerPattern, Description: "Group name or gid; default: leave as is."}
	return api.BackendSchema{
		Name:        "file",
		Description: "Files under the node's allowed path prefixes.",
		Actions: append([]api.ActionSchema{
			{Name: "write", Description: "Write a file atomically; no change when content and mode already match; check mode shows the diff of text content.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
					{Name: "content", Type: api.TypeString, Description: "File content (empty by default)."},
					{Name: "encoding", Type: api.TypeString, Enum: []string{"text", "base64"}, Default: "text", Description: "How content is encoded: text as is, or base64 for binary data."},
					{Name: "mode", Type: api.TypeString, Pattern: ModePattern, Default: "0644", Description: "Permission bits in octal."},
					owner, group}},
			{Name: "remove", Description: "Remove a file or directory; no change when it does not exist.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
					{Name: "recursive", Type: api.TypeBool, Default: "false", Description: "Remove a non-empty directory and everything in it."}}},
			{Name: "stat", Description: "Report whether the path exists, its type, size, mode, owner and (files) sha256.",
				ReadOnly: true, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path}},
			{Name: "mkdir", Description: "Create a directory; no change when it exists with the mode.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
					{Name: "mode", Type: api.TypeString, Pattern: ModePattern, Default: "0755", Description: "Permission bits in octal."},
					{Name: "parents", Type: api.TypeBool, Default: "true", Description: "Create missing parent directories too."},
					owner, group}},
		}, b.editActions(path, owner, group)...),
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "write", "remove", "stat", "mkdir", "read", "line", "block", "copy":
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file %s: %w", req.Action, context.Cause(ctx))
	}
	// remove works on the entry itself, a symlink included; the others
	// follow a final symlink to what it names.
	root, rel, err := b.openBeneath(req.Params["path"], req.Action != "remove")
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var res *backends.Result
	switch req.Action {
	case "write":
		res, err = b.write(req, root, rel)
	case "remove":
		res, err = b.remove(req, root, rel)
	case "stat":
		res, err = stat(req.Params["path"], root, rel)
	case "read":
		res, err = b.read(req, root, rel)
	case "line", "block":
		res, err = b.edit(req, root, rel, lineOrBlock(req))
	case "copy":
		res, err = b.copy(ctx, req, root, rel)
	default:
		res, err = b.mkdir(req, root, rel)
	}
	return res, confined(err)
}

// allowedWithin reports whether resolved lies under an allowed prefix that
// is itself strictly inside the denied path d.
func (b *Backend) allowedWithin(resolved, d string) bool {
	for _, pr := range b.prefixes {
		if rp, err := filepath.EvalSymlinks(pr); err == nil {
			pr = rp
		}
		if pr != d && within(pr, d) && within(resolved, pr) {
			return true
		}
	}
	return false
}

// openBeneath resolves p like Resolve and opens the allowed prefix it lies
// under as an os.Root; rel is the resolved path relative to that root.
// Resolving first keeps symlinks that stay inside a prefix working (os.Root
// refuses absolute links); the root then refuses whatever changed since.
func (b *Backend) openBeneath(p string, followFinal bool) (*os.Root, string, error) {
	resolved, err := b.Resolve(p, followFinal)
	if err != nil {
		return nil, "", err
	}
	for _, d := range b.denied {
		// Only remove does not follow the final link, and only remove
		// takes a directory's whole tree with it. An allowed prefix inside
		// a denied one (the sandbox grid dev and tests keep in the agent's
		// data directory) was given on purpose: what lies under it is the
		// jobs'.
		if (within(resolved, d) && !b.allowedWithin(resolved, d)) || (!followFinal && within(d, resolved)) {
			return nil, "", fmt.Errorf("%s: %w: %s is the agent's own and never touched by jobs", p, ErrOutside, d)
		}
	}
	best := ""
	for _, pr := range b.prefixes {
		if rp, err := filepath.EvalSymlinks(pr); err == nil {
			pr = rp
		}
		if within(resolved, pr) && len(pr) > len(best) {
			best = pr
		}
	}
	if best == "" {
		return nil, "", fmt.Errorf("%s: %w %s", p, ErrOutside, strings.Join(b.prefixes, ", "))
	}
	rel, err := filepath.Rel(best, resolved)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w %s", p, ErrOutside, strings.Join(b.prefixes, ", "))
	}
	root, err := os.OpenRoot(best)
	if err != nil {
		return nil, "", fmt.Errorf("open allowed prefix %s: %w", best, err)
	}
	return root, rel, nil
}

// confined marks an os.Root refusal (a path that, by the time it was
// opened, led outside the prefix) as ErrOutside. The os package does not
// export that error, so it is recognised by its text.
func confined(err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w: %w (a symlink changed while the action ran)", ErrOutside, err)
	}
	return err
}

// Resolve cleans p, resolves symlinks in its deepest existing ancestor (and
// in p itself when followFinal), and returns the real path if it lies under
// an allowed prefix. A path under a prefix that does not exist yet is
// judged by its existing part.
func (b *Backend) Resolve(p string, followFinal bool) (string, error) {
	if len(b.prefixes) == 0 {
		return "", fmt.Errorf("file backend: no allowed path prefixes are configured on this node, so every path is refused")
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	clean := filepath.Clean(p)
	existing, rest := clean, ""
	if !followFinal && clean != "/" {
		existing, rest = filepath.Dir(clean), filepath.Base(clean)
	}
	var target string
	for {
		r, err := filepath.EvalSymlinks(existing)
		if err == nil {
			target = r
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolve %s: %w", p, err)
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	resolved := filepath.Join(target, rest)
	for _, pr := range b.prefixes {
		if rp, err := filepath.EvalSymlinks(pr); err == nil {
			pr = rp
		}
		if within(resolved, pr) {
			return resolved, nil
		}
	}
	if resolved != clean {
		return "", fmt.Errorf("%s (resolves to %s): %w %s", p, resolved, ErrOutside, strings.Join(b.prefixes, ", "))
	}
	return "", fmt.Errorf("%s: %w %s", p, ErrOutside, strings.Join(b.prefixes, ", "))
}

func within(p, prefix string) bool {
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix+string(filepath.Separator))
}

func (b *Backend) write(req *backends.Request, root *os.Root, rel string) (*backends.Result, error) {
	data := []byte(req.Params["content"])
	if req.Params["encoding"] == "base64" {
		d, err := base64.StdEncoding.DecodeString(req.Params["content"])
		if err != nil {
			return nil, fmt.Errorf("content is not valid base64: %w", err)
		}
		data = d
	}
	mode, err := parseMode(req.Params["mode"])
	if err != nil {
		return nil, err
	}
	uid, gid, err := lookupOwner(req.Params["owner"], req.Params["group"])
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	facts := map[string]any{"path": req.Params["path"], "sha256": want, "size": len(data), "mode": fmtMode(mode)}

	fi, err := root.Stat(rel)
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", req.Params["path"])
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s exists and is not a regular file", req.Params["path"])
	case err == nil:
		have, herr := hashFile(root, rel)
		if herr != nil {
			return nil, herr
		}
		if have == want && fi.Mode().Perm() == mode && ownedBy(fi, uid, gid) {
			return &backends.Result{Output: req.Params["path"] + " is up to date", Facts: facts}, nil
		}
	case errors.Is(err, fs.ErrNotExist):
		if _, perr := root.Stat(filepath.Dir(rel)); perr != nil {
			return nil, fmt.Errorf("parent directory of %s: %w (create it with mkdir first)", req.Params["path"], perr)
		}
	default:
		return nil, fmt.Errorf("stat %s: %w", req.Params["path"], err)
	}
	if req.CheckMode {
		out := "check mode: would write " + req.Params["path"]
		if d := textDiff(root, rel, req.Params["path"], data); d != "" {
			out += "\n" + d
			facts["diff"] = d
		}
		return &backends.Result{Output: out, Changed: true, Facts: facts}, nil
	}
	if err := atomicfile.WriteIn(root, rel, data, mode, uid, gid); err != nil {
		return nil, fmt.Errorf("write %s: %w", req.Params["path"], err)
	}
	return &backends.Result{Output: fmt.Sprintf("wrote %s (%d bytes)", req.Params["path"], len(data)), Changed: true, Facts: facts}, nil
}

func (b *Backend) remove(req *backends.Request, root *os.Root, rel string) (*backends.Result, error) {
	facts := map[string]any{"path": req.Params["path"]}
	if rel == "." {
		return nil, fmt.Errorf("refusing to remove %s: it is an allowed prefix itself", req.Params["path"])
	}
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return &backends.Result{Output: req.Params["path"] + " does not exist", Facts: facts}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", req.Params["path"], err)
	}
	recursive, _ := strconv.ParseBool(req.Params["recursive"])
	if fi.IsDir() && !recursive {
		ents, err := fs.ReadDir(root.FS(), rel)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", req.Params["path"], err)
		}
		if len(ents) > 0 {
			return nil, fmt.Errorf("%s is a non-empty directory (set recursive=true to remove it)", req.Params["path"])
		}
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would remove " + req.Params["path"], Changed: true, Facts: facts}, nil
	}
	// RemoveAll does not follow symlinks inside the tree, and the root
	// keeps it beneath the prefix.
	if err := root.RemoveAll(rel); err != nil {
		return nil, fmt.Errorf("remove %s: %w", req.Params["path"], err)
	}
	return &backends.Result{Output: "removed " + req.Params["path"], Changed: true, Facts: facts}, nil
}

func (b *Backend) mkdir(req *backends.Request, root *os.Root, rel string) (*backends.Result, error) {
	mode, err := parseMode(req.Params["mode"])
	if err != nil {
		return nil, err
	}
	uid, gid, err := lookupOwner(req.Params["owner"], req.Params["group"])
	if err != nil {
		return nil, err
	}
	facts := map[string]any{"path": req.Params["path"], "mode": fmtMode(mode)}
	fi, err := root.Stat(rel)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("%s exists and is not a directory", req.Params["path"])
	case err == nil && fi.Mode().Perm() == mode && ownedBy(fi, uid, gid):
		return &backends.Result{Output: req.Params["path"] + " exists", Facts: facts}, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("stat %s: %w", req.Params["path"], err)
	}
	parents, _ := strconv.ParseBool(req.Params["parents"])
	if !parents {
		if _, err := root.Stat(filepath.Dir(rel)); err != nil {
			return nil, fmt.Errorf("parent of %s: %w (set parents=true to create it)", req.Params["path"], err)
		}
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would create or update " + req.Params["path"], Changed: true, Facts: facts}, nil
	}
	if err := root.MkdirAll(rel, mode); err != nil {
		return nil, fmt.Errorf("mkdir %s: %w", req.Params["path"], err)
	}
	// MkdirAll's mode passes through the umask; set it exactly, on the
	// opened directory so a swap after the mkdir cannot redirect it.
	d, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", req.Params["path"], err)
	}
	defer d.Close()
	if dfi, err := d.Stat(); err != nil || !dfi.IsDir() {
		return nil, fmt.Errorf("%s is no longer a directory", req.Params["path"])
	}
	if err := d.Chmod(mode); err != nil {
		return nil, fmt.Errorf("chmod %s: %w", req.Params["path"], err)
	}
	if uid >= 0 || gid >= 0 {
		if err := d.Chown(uid, gid); err != nil {
			return nil, fmt.Errorf("chown %s: %w", req.Params["path"], err)
		}
	}
	return &backends.Result{Output: "created " + req.Params["path"], Changed: true, Facts: facts}, nil
}

func stat(name string, root *os.Root, rel string) (*backends.Result, error) {
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return &backends.Result{Output: name + " does not exist", Facts: map[string]any{"path": name, "exists": false}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	facts := map[string]any{
		"path":   name,
		"exists": true,
		"size":   fi.Size(),
		"mode":   fmtMode(fi.Mode().Perm()),
		"mtime":  fi.ModTime().UTC().Format("2006-01-02T15:04:05.999999999Z"),
	}
	if uid, gid, ok := fsowner.Of(fi); ok {
		facts["uid"], facts["gid"] = uid, gid
	}
	switch {
	case fi.Mode().IsRegular():
		facts["type"] = "file"
		sum, err := hashFile(root, rel)
		if err != nil {
			return nil, err
		}
		facts["sha256"] = sum
	case fi.IsDir():
		facts["type"] = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		// Only a dangling link gets here: Resolve followed the others.
		facts["type"] = "symlink"
	default:
		facts["type"] = "other"
	}
	return &backends.Result{Output: fmt.Sprintf("%s: %s, %d bytes, mode %s", name, facts["type"], fi.Size(), facts["mode"]), Facts: facts}, nil
}

// openRegular opens a file for reading without waiting on it: O_NONBLOCK
// makes opening a FIFO return at once (a blocking open waits for a writer,
// hanging the action past its timeout), and callers then refuse anything
// but a regular file, where the flag changes nothing.
func openRegular(root *os.Root, rel string) (*os.File, error) {
	return root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func hashFile(root *os.Root, path string) (string, error) {
	f, err := openRegular(root, path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("read %s: not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func parseMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %q: %w", s, err)
	}
	return os.FileMode(m).Perm(), nil
}

func fmtMode(m os.FileMode) string { return fmt.Sprintf("%04o", uint32(m.Perm())) }

// lookupOwner maps owner and group (names or ids) to uid and gid; -1 for
// "leave as is".
func lookupOwner(owner, group string) (uid, gid int, err error) {
	uid, gid = -1, -1
	if owner != "" {
		if uid, err = strconv.Atoi(owner); err != nil {
			u, lerr := user.Lookup(owner)
			if lerr != nil {
				return 0, 0, fmt.Errorf("owner: %w", lerr)
			}
			uid, _ = strconv.Atoi(u.Uid)
		}
	}
	if group != "" {
		if gid, err = strconv.Atoi(group); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return 0, 0, fmt.Errorf("group: %w", lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return uid, gid, nil
}

func ownedBy(fi os.FileInfo, uid, gid int) bool {
	fuid, fgid, ok := fsowner.Of(fi)
	if !ok {
		return true
	}
	return (uid < 0 || fuid == uid) && (gid < 0 || fgid == gid)
}

// textDiff is the unified diff a write would make, when both the old
// content (if any) and the new are text small enough to edit; "" for
// binary data, where a diff means nothing.
func textDiff(root *os.Root, rel, name string, data []byte) string {
	if len(data) > MaxEditBytes || !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return ""
	}
	old, err := load(root, rel, name)
	if err != nil || !utf8.ValidString(old.data) || strings.IndexByte(old.data, 0) >= 0 {
		return ""
	}
	return textdiff.Unified(name, old.data, string(data))
}
