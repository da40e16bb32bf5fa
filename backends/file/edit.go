package file

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/atomicfile"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/fsowner"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/textdiff"
)

// Limits and patterns of read, line, block and copy.
const (
	// DefaultMaxReadBytes is read's limit when the agent sets none; it is
	// the agent's default max_output_bytes.
	DefaultMaxReadBytes = 64 << 10
	// MaxEditBytes is the largest file line and block edit: they hold the
	// file in memory and diff it, which is for config files, not data.
	MaxEditBytes = 16 << 20
	// DefaultMaxCopyBytes is copy's default size cap.
	DefaultMaxCopyBytes = 256 << 20
	// LinePattern is one line: no line breaks.
	LinePattern = `^[^\n\r]*$`
	// MarkerPattern is a block marker: one line holding {mark}, which
	// becomes BEGIN and END.
	MarkerPattern = `^[^\n\r]*\{mark\}[^\n\r]*$`
	// URLPattern is an https URL with no blanks in it.
	URLPattern    = `^https://[^\s]+$`
	SHA256Pattern = `^[0-9a-fA-F]{64}$`
	// DefaultMarker is block's marker when a job names none.
	DefaultMarker = "# {mark} GRID MANAGED BLOCK"
)

func (b *Backend) editActions(path, owner, group api.ParamSchema) []api.ActionSchema {
	state := api.ParamSchema{Name: "state", Type: api.TypeString, Enum: []string{"present", "absent"}, Default: "present", Description: "present ensures it is in the file, absent that it is not."}
	create := api.ParamSchema{Name: "create", Type: api.TypeBool, Default: "false", Description: "With state present, create the file when it does not exist (otherwise that is an error)."}
	mode := api.ParamSchema{Name: "mode", Type: api.TypeString, Pattern: ModePattern, Default: "0644", Description: "Permission bits in octal of a file created here; an existing file keeps its own."}
	return []api.ActionSchema{
		{Name: "read", Description: fmt.Sprintf("Return a file's content (at most max_output_bytes, %d by default) with its size and sha256.", b.maxRead),
			ReadOnly: true, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
				{Name: "encoding", Type: api.TypeString, Enum: []string{"text", "base64"}, Default: "text", Description: "How the content is returned: text as is, or base64 for binary data."}}},
		{Name: "line", Description: "Ensure one line is present (replacing the last line matching regexp, else added) or absent (every matching line removed), leaving the rest of the file as it is; check mode shows the diff.",
			Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
				{Name: "line", Type: api.TypeString, Pattern: LinePattern, Description: "The line's content (required for state present; for state absent without regexp, the line to remove)."},
				{Name: "regexp", Type: api.TypeString, Pattern: LinePattern, Description: "RE2 regular expression matching the line to replace (present) or the lines to remove (absent)."},
				{Name: "insert_after", Type: api.TypeString, Pattern: LinePattern, Description: "RE2 regular expression: a new line goes after the last line matching it (default and when nothing matches: at the end)."},
				state, create, mode}},
		{Name: "block", Description: "Ensure a block of lines between BEGIN and END marker lines is present with the given content, or absent; the rest of the file is left as it is; check mode shows the diff.",
			Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
				{Name: "block", Type: api.TypeString, Description: "The block's content, lines separated by newlines (the markers are added around it)."},
				{Name: "marker", Type: api.TypeString, Pattern: MarkerPattern, Default: DefaultMarker, Description: "The marker line; {mark} becomes BEGIN and END. Distinct markers keep several blocks apart in one file."},
				state, create, mode}},
		{Name: "copy", Description: "Download an https URL to a file, verifying its sha256 before the file is replaced (atomically); no download when the file already has that sha256.",
			Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path,
				{Name: "url", Type: api.TypeString, Required: true, Pattern: URLPattern, Description: "https URL to download (redirects must stay on https)."},
				{Name: "sha256", Type: api.TypeString, Required: true, Pattern: SHA256Pattern, Description: "The content's sha256 in hex; a download that does not match is discarded."},
				{Name: "max_bytes", Type: api.TypeInt, Default: strconv.Itoa(DefaultMaxCopyBytes), Description: "Refuse a download larger than this many bytes."},
				{Name: "mode", Type: api.TypeString, Pattern: ModePattern, Default: "0644", Description: "Permission bits in octal."},
				owner, group}},
	}
}

func (b *Backend) read(req *backends.Request, root *os.Root, rel string) (*backends.Result, error) {
	name := req.Params["path"]
	f, err := openRegular(root, rel)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	limit := b.maxRead
	b64 := req.Params["encoding"] == "base64"
	if b64 {
		limit = base64.StdEncoding.DecodedLen(limit)
	}
	// Read at most one byte past the limit: a file that grows while it is
	// read is refused as surely as one that was large to begin with.
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d read returns here (the agent's max_output_bytes); file stat gives its sha256", name, fi.Size(), limit)
	}
	s := sha256.Sum256(data)
	facts := map[string]any{"path": name, "size": len(data), "sha256": hex.EncodeToString(s[:]), "mode": fmtMode(fi.Mode())}
	out := string(data)
	if b64 {
		out = base64.StdEncoding.EncodeToString(data)
	}
	return &backends.Result{Output: out, Facts: facts}, nil
}

// current is a file's content and attributes before an edit.
type current struct {
	exists   bool
	data     string
	mode     os.FileMode
	uid, gid int
}

// load reads the file an edit starts from, refusing directories and files
// too large to edit in memory.
func load(root *os.Root, rel, name string) (current, error) {
	f, err := openRegular(root, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return current{uid: -1, gid: -1}, nil
	}
	if err != nil {
		return current{}, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return current{}, fmt.Errorf("stat %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return current{}, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxEditBytes+1))
	if err != nil {
		return current{}, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > MaxEditBytes {
		return current{}, fmt.Errorf("%s is larger than the %d bytes line and block edit", name, MaxEditBytes)
	}
	c := current{exists: true, data: string(data), mode: fi.Mode().Perm(), uid: -1, gid: -1}
	if uid, gid, ok := fsowner.Of(fi); ok {
		c.uid, c.gid = uid, gid
	}
	return c, nil
}

// apply writes an edit's result: nothing when the content is unchanged, a
// diff in check mode, else an atomic replace keeping the file's mode and
// owner (a new file gets mode from the params, 0644 without one).
func apply(req *backends.Request, root *os.Root, rel string, old current, updated string) (*backends.Result, error) {
	name := req.Params["path"]
	facts := map[string]any{"path": name}
	if old.exists && updated == old.data {
		s := sha256.Sum256([]byte(updated))
		facts["sha256"] = hex.EncodeToString(s[:])
		return &backends.Result{Output: name + " is up to date", Facts: facts}, nil
	}
	diff := textdiff.Unified(name, old.data, updated)
	facts["diff"] = diff
	s := sha256.Sum256([]byte(updated))
	facts["sha256"] = hex.EncodeToString(s[:])
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would change " + name + "\n" + diff, Changed: true, Facts: facts}, nil
	}
	mode := old.mode
	if !old.exists {
		mode = 0o644
		if req.Params["mode"] != "" {
			m, err := parseMode(req.Params["mode"])
			if err != nil {
				return nil, err
			}
			mode = m
		}
		if _, err := root.Stat(filepath.Dir(rel)); err != nil {
			return nil, fmt.Errorf("parent directory of %s: %w (create it with mkdir first)", name, err)
		}
	}
	if err := atomicfile.WriteIn(root, rel, []byte(updated), mode, old.uid, old.gid); err != nil {
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	return &backends.Result{Output: "changed " + name + "\n" + diff, Changed: true, Facts: facts}, nil
}

// EditFunc computes a file's new content from its old (exists false: no
// file, old ""). write false leaves the file as it is (nothing to do).
type EditFunc func(old string, exists bool) (updated string, write bool, err error)

// Edit edits the file named by req.Params["path"] with fn, confined like
// every other action: the path is resolved under an allowed prefix and
// read and replaced through an os.Root. The file keeps its mode and owner;
// a new one gets req.Params["mode"] (default 0644). Check mode reports the
// diff and writes nothing; an unchanged result reports no change. Other
// backends that edit files in place (config) go through it so they are
// confined the same way.
func (b *Backend) Edit(ctx context.Context, req *backends.Request, fn EditFunc) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("edit: %w", context.Cause(ctx))
	}
	root, rel, err := b.openBeneath(req.Params["path"], true)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	res, err := b.edit(req, root, rel, fn)
	return res, confined(err)
}

// ReadFile returns the content of a file under an allowed prefix (at most
// MaxEditBytes); exists is false when there is no file.
func (b *Backend) ReadFile(path string) (data string, exists bool, err error) {
	root, rel, err := b.openBeneath(path, true)
	if err != nil {
		return "", false, err
	}
	defer root.Close()
	c, err := load(root, rel, path)
	return c.data, c.exists, confined(err)
}

func (b *Backend) edit(req *backends.Request, root *os.Root, rel string, fn EditFunc) (*backends.Result, error) {
	name := req.Params["path"]
	old, err := load(root, rel, name)
	if err != nil {
		return nil, err
	}
	updated, write, err := fn(old.data, old.exists)
	if err != nil {
		return nil, err
	}
	if !write {
		out := name + " is up to date"
		if !old.exists {
			out = name + " does not exist"
		}
		return &backends.Result{Output: out, Facts: map[string]any{"path": name}}, nil
	}
	return apply(req, root, rel, old, updated)
}

// lineOrBlock is the EditFunc of line and block.
func lineOrBlock(req *backends.Request) EditFunc {
	return func(old string, exists bool) (string, bool, error) {
		name := req.Params["path"]
		present := req.Params["state"] != "absent"
		if !exists {
			if !present {
				return "", false, nil
			}
			if c, _ := strconv.ParseBool(req.Params["create"]); !c {
				return "", false, fmt.Errorf("%s does not exist (set create=true to create it)", name)
			}
		}
		var updated string
		var err error
		if req.Action == "line" {
			updated, err = editLine(old, req.Params, present)
		} else {
			updated, err = editBlock(old, req.Params, present)
		}
		if err != nil {
			return "", false, err
		}
		return updated, !exists || updated != old, nil
	}
}

// lines splits content into lines without their newlines.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// join is lines' inverse; the result ends in a newline unless the file
// had content without one and no line was added (a file's last line is
// left as the file had it).
func join(ls []string, old string) string {
	if len(ls) == 0 {
		return ""
	}
	s := strings.Join(ls, "\n")
	if old == "" || strings.HasSuffix(old, "\n") || len(ls) != len(lines(old)) {
		s += "\n"
	}
	return s
}

func compile(params api.Params, name string) (*regexp.Regexp, error) {
	v, ok := params[name]
	if !ok || v == "" {
		return nil, nil
	}
	re, err := regexp.Compile(v)
	if err != nil {
		return nil, fmt.Errorf("param %s: %w", name, err)
	}
	return re, nil
}

func editLine(data string, params api.Params, present bool) (string, error) {
	re, err := compile(params, "regexp")
	if err != nil {
		return "", err
	}
	after, err := compile(params, "insert_after")
	if err != nil {
		return "", err
	}
	line, hasLine := params["line"]
	ls := lines(data)
	if !present {
		if re == nil && !hasLine {
			return "", fmt.Errorf("state absent needs regexp or line to say which lines to remove")
		}
		var kept []string
		for _, l := range ls {
			if (re != nil && re.MatchString(l)) || (re == nil && l == line) {
				continue
			}
			kept = append(kept, l)
		}
		if len(kept) == len(ls) {
			return data, nil
		}
		return join(kept, data), nil
	}
	if !hasLine {
		return "", fmt.Errorf("state present needs line")
	}
	if re != nil {
		for i := len(ls) - 1; i >= 0; i-- {
			if re.MatchString(ls[i]) {
				if ls[i] == line {
					return data, nil
				}
				ls[i] = line
				return join(ls, data), nil
			}
		}
	}
	for _, l := range ls {
		if l == line {
			return data, nil
		}
	}
	at := len(ls)
	if after != nil {
		for i := len(ls) - 1; i >= 0; i-- {
			if after.MatchString(ls[i]) {
				at = i + 1
				break
			}
		}
	}
	ls = append(ls[:at], append([]string{line}, ls[at:]...)...)
	return join(ls, data), nil
}

func editBlock(data string, params api.Params, present bool) (string, error) {
	marker := params["marker"]
	if marker == "" {
		marker = DefaultMarker
	}
	begin := strings.ReplaceAll(marker, "{mark}", "BEGIN")
	end := strings.ReplaceAll(marker, "{mark}", "END")
	ls := lines(data)
	bi, ei := -1, -1
	for i, l := range ls {
		if l == begin && bi < 0 {
			bi = i
		} else if l == end && bi >= 0 {
			ei = i
			break
		}
	}
	if bi >= 0 && ei < 0 {
		return "", fmt.Errorf("the file has the line %q but no %q after it: fix the block by hand", begin, end)
	}
	if !present {
		if bi < 0 {
			return data, nil
		}
		return join(append(ls[:bi:bi], ls[ei+1:]...), data), nil
	}
	blk := append([]string{begin}, lines(strings.ReplaceAll(params["block"], "\r\n", "\n"))...)
	blk = append(blk, end)
	var out []string
	if bi >= 0 {
		out = append(append(append(out, ls[:bi]...), blk...), ls[ei+1:]...)
	} else {
		out = append(append(out, ls...), blk...)
	}
	return join(out, data), nil
}

func (b *Backend) copy(ctx context.Context, req *backends.Request, root *os.Root, rel string) (*backends.Result, error) {
	name := req.Params["path"]
	want := strings.ToLower(req.Params["sha256"])
	u, err := url.Parse(req.Params["url"])
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("url %q is not an https URL", req.Params["url"])
	}
	limit, err := strconv.ParseInt(req.Params["max_bytes"], 10, 64)
	if err != nil || limit <= 0 {
		return nil, fmt.Errorf("max_bytes %q is not a positive number", req.Params["max_bytes"])
	}
	mode, err := parseMode(req.Params["mode"])
	if err != nil {
		return nil, err
	}
	uid, gid, err := lookupOwner(req.Params["owner"], req.Params["group"])
	if err != nil {
		return nil, err
	}
	facts := map[string]any{"path": name, "sha256": want, "url": u.Redacted()}
	fi, err := root.Stat(rel)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s exists and is not a regular file", name)
	case err == nil:
		have, herr := hashFile(root, rel)
		if herr != nil {
			return nil, herr
		}
		if have == want {
			return fixAttrs(req, root, rel, fi, mode, uid, gid, facts)
		}
		facts["old_sha256"] = have
	case errors.Is(err, fs.ErrNotExist):
		if _, perr := root.Stat(filepath.Dir(rel)); perr != nil {
			return nil, fmt.Errorf("parent directory of %s: %w (create it with mkdir first)", name, perr)
		}
	default:
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if req.CheckMode {
		return &backends.Result{Output: fmt.Sprintf("check mode: would download %s to %s (sha256 %s)", u.Redacted(), name, want), Changed: true, Facts: facts}, nil
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("copy: %w", err)
	}
	client := *b.client
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if r.URL.Scheme != "https" {
			return fmt.Errorf("redirect to %s refused: copy fetches over https only", r.URL.Redacted())
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	resp, err := client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("download %s: %w", u.Redacted(), context.Cause(ctx))
		}
		return nil, fmt.Errorf("download %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download %s: HTTP %s", u.Redacted(), resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("download %s: %d bytes is more than max_bytes %d", u.Redacted(), resp.ContentLength, limit)
	}
	h := sha256.New()
	n := int64(0)
	body := io.TeeReader(io.LimitReader(resp.Body, limit+1), h)
	counted := readerFunc(func(p []byte) (int, error) {
		k, err := body.Read(p)
		n += int64(k)
		return k, err
	})
	err = atomicfile.StreamIn(root, rel, counted, mode, uid, gid, func() error {
		if n > limit {
			return fmt.Errorf("download %s: more than max_bytes %d; nothing was written", u.Redacted(), limit)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("download %s: sha256 is %s, want %s; nothing was written", u.Redacted(), got, want)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("download %s: %w", u.Redacted(), context.Cause(ctx))
		}
		return nil, err
	}
	facts["size"] = n
	return &backends.Result{Output: fmt.Sprintf("downloaded %s to %s (%d bytes, sha256 verified)", u.Redacted(), name, n), Changed: true, Facts: facts}, nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// fixAttrs sets mode and owner on a file whose content is already right,
// through the opened file so a swap cannot redirect it.
func fixAttrs(req *backends.Request, root *os.Root, rel string, fi os.FileInfo, mode os.FileMode, uid, gid int, facts map[string]any) (*backends.Result, error) {
	name := req.Params["path"]
	if fi.Mode().Perm() == mode && ownedBy(fi, uid, gid) {
		return &backends.Result{Output: name + " is up to date", Facts: facts}, nil
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would set the mode or owner of " + name, Changed: true, Facts: facts}, nil
	}
	f, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	if err := f.Chmod(mode); err != nil {
		return nil, fmt.Errorf("chmod %s: %w", name, err)
	}
	if uid >= 0 || gid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return nil, fmt.Errorf("chown %s: %w", name, err)
		}
	}
	return &backends.Result{Output: "set the mode and owner of " + name, Changed: true, Facts: facts}, nil
}
