// Package rke2 is the rke2 backend: install a pinned RKE2 release from a
// mirror of its release artifacts, start, stop and restart its systemd
// units, report its state, and uninstall it. No install script runs: the
// backend fetches the release's checksum file and tarball itself, checks
// the tarball's sha256 before a byte of it is unpacked, and unpacks it
// under the install root (/usr/local by default, as RKE2's own tarball
// install does). The units go through systemctl with argument vectors.
package rke2

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
	"github.com/gridfleet/terraform-provider-grid/backends/systemd"
)

// VersionPattern is an RKE2 release tag, e.g. v1.30.4+rke2r1 or
// v1.31.0-rc1+rke2r1.
const VersionPattern = `^v[0-9]+\.[0-9]+\.[0-9]+(-rc[0-9]+)?\+rke2r[0-9]+$`

// manifestPath, under the install root, records what the backend
// installed: the version, the tarball's sha256 and every file it wrote, so
// that a second install is no change and uninstall removes exactly those.
const manifestPath = "share/rke2/grid-install.json"

// maxChecksums bounds the checksum file read (RKE2's is a few KiB).
const maxChecksums = 1 << 20

// Options configure the backend.
type Options struct {
	// ArtifactURL is the base URL of a mirror laid out as RKE2's GitHub
	// releases are: <ArtifactURL>/<version>/rke2.linux-<arch>.tar.gz and
	// <ArtifactURL>/<version>/sha256sum-<arch>.txt. Empty: install refuses.
	ArtifactURL string
	// InstallRoot is where the tarball is unpacked; default /usr/local.
	InstallRoot string
	// Arch is the release architecture; default the agent's (amd64, arm64).
	Arch string
	// SystemctlPath defaults to systemctl from PATH.
	SystemctlPath string
	// Client fetches the artifacts; default http.DefaultClient.
	Client *http.Client
	// MaxDownloadBytes bounds the tarball download, and MaxUnpackBytes
	// what it unpacks to; defaults DefaultMaxDownloadBytes and
	// DefaultMaxUnpackBytes. The mirror publishes the checksum of what it
	// serves, so the checksum alone does not stop a mirror (or whoever
	// answers for its name over http) filling the disk.
	MaxDownloadBytes, MaxUnpackBytes int64
}

// Default limits: an RKE2 tarball is some 40 MiB and unpacks to some
// 150 MiB.
const (
	DefaultMaxDownloadBytes = 1 << 30
	DefaultMaxUnpackBytes   = 4 << 30
)

// Backend is the rke2 backend.
type Backend struct {
	base      *url.URL
	baseErr   error
	root      string
	arch      string
	systemctl string
	units     *systemd.Backend
	client    *http.Client
	maxDown   int64
	maxUnpack int64
	// mu serializes install and uninstall: two at once on one node would
	// interleave their files and records.
	mu sync.Mutex
}

// New returns the backend. A malformed ArtifactURL is reported by install,
// so an agent with a bad value still starts and says why on first use.
func New(opts Options) *Backend {
	b := &Backend{root: opts.InstallRoot, arch: opts.Arch, systemctl: opts.SystemctlPath, client: opts.Client}
	if b.root == "" {
		b.root = "/usr/local"
	}
	if b.arch == "" {
		b.arch = runtime.GOARCH
	}
	if b.systemctl == "" {
		b.systemctl = "systemctl"
	}
	if b.client == nil {
		b.client = http.DefaultClient
	}
	b.maxDown, b.maxUnpack = opts.MaxDownloadBytes, opts.MaxUnpackBytes
	if b.maxDown <= 0 {
		b.maxDown = DefaultMaxDownloadBytes
	}
	if b.maxUnpack <= 0 {
		b.maxUnpack = DefaultMaxUnpackBytes
	}
	b.units = systemd.New(systemd.Options{SystemctlPath: b.systemctl})
	switch u, err := url.Parse(opts.ArtifactURL); {
	case opts.ArtifactURL == "":
		b.baseErr = errors.New("no rke2 artifact URL is configured on this agent (backends.rke2.artifact_url)")
	case err != nil:
		b.baseErr = fmt.Errorf("rke2 artifact URL: %w", err)
	case u.Scheme != "https" && u.Scheme != "http" || u.Host == "":
		b.baseErr = fmt.Errorf("rke2 artifact URL %q: want an http(s) URL", opts.ArtifactURL)
	default:
		b.base = u
	}
	return b
}

// Root is the directory releases are unpacked under.
func (b *Backend) Root() string { return b.root }

// Schema declares the actions.
func (*Backend) Schema() api.BackendSchema {
	mode := api.ParamSchema{Name: "mode", Type: api.TypeString, Default: "server", Enum: []string{"server", "agent"},
		Description: "Which RKE2 unit: rke2-server or rke2-agent."}
	act := func(name, desc string) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{mode}}
	}
	stop := act("stop", "Stop the unit; no change when it is stopped.")
	stop.Dangerous = true
	status := act("status", "Report the installed version and the unit's state.")
	status.ReadOnly, status.CheckMode = true, false
	return api.BackendSchema{
		Name:        "rke2",
		Description: "RKE2 (Rancher Kubernetes Engine 2) from a mirror of its release artifacts, checksum verified, and its systemd units.",
		Actions: []api.ActionSchema{
			{Name: "install", Description: "Install a pinned release: fetch the checksum file and tarball from the configured mirror, verify the sha256, unpack under the install root, reload systemd; no change when that version is installed.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{{Name: "version", Type: api.TypeString, Required: true, Pattern: VersionPattern,
					Description: "Release tag, e.g. v1.30.4+rke2r1."}}},
			act("start", "Start the unit; no change when it is running."),
			stop,
			act("restart", "Restart the unit; always a change."),
			status,
			{Name: "uninstall", Description: "Stop both units and remove every file the install wrote; no change when nothing is installed.",
				Idempotent: true, CheckMode: true, Dangerous: true},
		},
	}
}

// Manifest is what an install recorded.
type Manifest struct {
	Version string   `json:"version"`
	SHA256  string   `json:"sha256"`
	Files   []string `json:"files"`
}

// Installed reads the manifest; nil when nothing is installed.
func (b *Backend) Installed() (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(b.root, manifestPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rke2 install record: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("rke2 install record %s: %w", filepath.Join(b.root, manifestPath), err)
	}
	return &m, nil
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "install":
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.install(ctx, req)
	case "uninstall":
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.uninstall(ctx, req)
	case "start", "stop", "restart", "status":
		return b.unit(ctx, req)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

func (b *Backend) unitName(req *backends.Request) string {
	m := req.Params["mode"]
	if m == "" {
		m = "server"
	}
	return "rke2-" + m + ".service"
}

// unit hands start/stop/restart/status to the systemd backend, after
// checking RKE2 is installed (a missing unit would fail less clearly).
func (b *Backend) unit(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	m, err := b.Installed()
	if err != nil {
		return nil, err
	}
	unit := b.unitName(req)
	if m == nil {
		if req.Action == "status" {
			return &backends.Result{Output: "rke2 is not installed", Facts: map[string]any{"installed": false, "version": "", "unit": unit}}, nil
		}
		if req.Action == "stop" {
			return &backends.Result{Output: "rke2 is not installed; nothing to stop", Facts: map[string]any{"installed": false, "version": "", "unit": unit}}, nil
		}
		return nil, fmt.Errorf("rke2.%s: rke2 is not installed under %s (run rke2.install first)", req.Action, b.root)
	}
	sub := *req
	sub.Params = api.Params{"unit": unit}
	res, err := b.units.Run(ctx, &sub)
	if res != nil {
		if res.Facts == nil {
			res.Facts = map[string]any{}
		}
		res.Facts["installed"], res.Facts["version"] = true, m.Version
	}
	return res, err
}

func (b *Backend) artifact(version, file string) string {
	u := *b.base
	// The tag's '+' is escaped as GitHub's own release links do.
	u.Path = path.Join(u.Path, version, file)
	u.RawPath = path.Join(b.base.EscapedPath(), strings.ReplaceAll(url.PathEscape(version), "+", "%2B"), url.PathEscape(file))
	return u.String()
}

func (b *Backend) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	// An https mirror's redirects stay on https: one to http would let
	// anyone on the path serve the checksum file and the tarball.
	client := *b.client
	if b.base.Scheme == "https" {
		next := client.CheckRedirect
		client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if r.URL.Scheme != "https" {
				return fmt.Errorf("redirect to %s refused: the mirror is https", r.URL.Redacted())
			}
			if next != nil {
				return next(r, via)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fetch %s: %w", u, context.Cause(ctx))
		}
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fetch %s: %s", u, resp.Status)
	}
	return resp, nil
}

// checksum fetches the release's checksum file and returns the sha256 it
// publishes for the tarball.
func (b *Backend) checksum(ctx context.Context, version, tarball string) (string, error) {
	resp, err := b.get(ctx, b.artifact(version, "sha256sum-"+b.arch+".txt"))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxChecksums))
	for sc.Scan() {
		// sha256sum's format: "<hex>  <name>" (or " *<name>" in binary mode).
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.TrimPrefix(f[1], "*") == tarball {
			sum := strings.ToLower(f[0])
			if _, err := hex.DecodeString(sum); err != nil || len(sum) != 64 {
				return "", fmt.Errorf("checksum file for %s: %q is not a sha256", version, f[0])
			}
			return sum, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read checksum file for %s: %w", version, err)
	}
	return "", fmt.Errorf("checksum file for %s lists no %s", version, tarball)
}

func (b *Backend) install(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	version := req.Params["version"]
	old, err := b.Installed()
	if err != nil {
		return nil, err
	}
	if old != nil && old.Version == version {
		return &backends.Result{Output: "rke2 " + version + " is already installed",
			Facts: map[string]any{"version": version, "sha256": old.SHA256, "installed": true}}, nil
	}
	if b.base == nil {
		return nil, fmt.Errorf("rke2.install: %w", b.baseErr)
	}
	tarball := "rke2.linux-" + b.arch + ".tar.gz"
	want, err := b.checksum(ctx, version, tarball)
	if err != nil {
		return nil, err
	}
	from := ""
	if old != nil {
		from = old.Version
	}
	facts := map[string]any{"version": version, "sha256": want, "previous_version": from}
	if req.CheckMode {
		// The checksum file answered, so the mirror has the release; the
		// tarball itself is fetched only to install.
		msg := "check mode: would install rke2 " + version
		if from != "" {
			msg += " over " + from
		}
		facts["installed"] = old != nil
		return &backends.Result{Output: msg, Changed: true, Facts: facts}, nil
	}
	req.Progress(0, "fetching "+tarball)
	tmp, err := b.fetchVerified(ctx, version, tarball, want)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	req.Progress(60, "unpacking")
	files, err := b.unpack(tmp)
	if err != nil {
		return &backends.Result{Changed: len(files) > 0}, err
	}
	// Files of the previous version that this one no longer ships go.
	if old != nil {
		for _, f := range old.Files {
			if !slices.Contains(files, f) {
				_ = os.Remove(filepath.Join(b.root, f))
			}
		}
	}
	if err := b.writeManifest(Manifest{Version: version, SHA256: want, Files: files}); err != nil {
		return &backends.Result{Changed: true}, err
	}
	out, err := b.daemonReload(ctx)
	facts["installed"], facts["files"] = true, len(files)
	return &backends.Result{Output: fmt.Sprintf("installed rke2 %s (%d files under %s)\n%s", version, len(files), b.root, out),
		Changed: true, Facts: facts}, err
}

// fetchVerified downloads the tarball to a temporary file, hashing as it
// goes, and returns the file only when the sha256 is the published one.
func (b *Backend) fetchVerified(ctx context.Context, version, tarball, want string) (string, error) {
	resp, err := b.get(ctx, b.artifact(version, tarball))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp("", "grid-rke2-*.tar.gz")
	if err != nil {
		return "", fmt.Errorf("rke2 download: %w", err)
	}
	h := sha256.New()
	// One byte past the limit tells a tarball too large from one that
	// fits exactly.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, b.maxDown+1))
	if err == nil && n > b.maxDown {
		err = fmt.Errorf("%s is more than %d bytes", tarball, b.maxDown)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		if ctx.Err() != nil {
			return "", fmt.Errorf("rke2 download: %w", context.Cause(ctx))
		}
		return "", fmt.Errorf("rke2 download: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("rke2 %s: %s has sha256 %s, the release publishes %s: refusing to install", version, tarball, got, want)
	}
	return f.Name(), nil
}

// unpack extracts the verified tarball under the install root and returns
// the files written (relative, sorted). Every path is opened through an
// os.Root, so no entry ("../x", an absolute path, a symlinked directory)
// can write outside it; only directories and regular files are accepted.
func (b *Backend) unpack(tarPath string) ([]string, error) {
	if err := os.MkdirAll(b.root, 0o755); err != nil {
		return nil, fmt.Errorf("rke2 install root: %w", err)
	}
	root, err := os.OpenRoot(b.root)
	if err != nil {
		return nil, fmt.Errorf("rke2 install root: %w", err)
	}
	defer root.Close()
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("rke2 unpack: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("rke2 unpack: %w", err)
	}
	var files []string
	// left bounds what the entries unpack to, all together: a small
	// tarball can hold terabytes of zeros.
	left := b.maxUnpack
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return files, fmt.Errorf("rke2 unpack: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if !fs.ValidPath(name) {
			return files, fmt.Errorf("rke2 unpack: entry %q leaves the install root", h.Name)
		}
		rel := filepath.FromSlash(name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(rel, 0o755); err != nil {
				return files, fmt.Errorf("rke2 unpack %s: %w", name, err)
			}
		case tar.TypeReg:
			if h.Size > left {
				return files, fmt.Errorf("rke2 unpack: the tarball unpacks to more than %d bytes", b.maxUnpack)
			}
			left -= h.Size
			if err := writeFile(root, rel, tr, h.FileInfo().Mode().Perm()); err != nil {
				return files, fmt.Errorf("rke2 unpack %s: %w", name, err)
			}
			files = append(files, name)
		default:
			return files, fmt.Errorf("rke2 unpack: entry %q is neither a file nor a directory", h.Name)
		}
	}
	slices.Sort(files)
	return files, nil
}

// writeFile replaces rel with r's content by a rename, so a running rke2
// binary keeps its old inode and a crash leaves old or new, never half.
func writeFile(root *os.Root, rel string, r io.Reader, mode fs.FileMode) error {
	if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".grid-tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

func (b *Backend) writeManifest(m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("rke2 install record: %w", err)
	}
	root, err := os.OpenRoot(b.root)
	if err != nil {
		return fmt.Errorf("rke2 install record: %w", err)
	}
	defer root.Close()
	if err := writeFile(root, filepath.FromSlash(manifestPath), strings.NewReader(string(data)), 0o644); err != nil {
		return fmt.Errorf("rke2 install record: %w", err)
	}
	return nil
}

func (b *Backend) daemonReload(ctx context.Context) (string, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: b.systemctl, Args: []string{"--no-ask-password", "daemon-reload"}})
	if err != nil {
		return out.Stdout + out.Stderr, fmt.Errorf("systemctl daemon-reload: %w", err)
	}
	return out.Stdout, nil
}

func (b *Backend) uninstall(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	m, err := b.Installed()
	if err != nil {
		return nil, err
	}
	if m == nil {
		return &backends.Result{Output: "rke2 is not installed", Facts: map[string]any{"installed": false}}, nil
	}
	facts := map[string]any{"version": m.Version, "files": len(m.Files)}
	if req.CheckMode {
		facts["installed"] = true
		return &backends.Result{Output: fmt.Sprintf("check mode: would stop rke2-server and rke2-agent and remove rke2 %s (%d files under %s)",
			m.Version, len(m.Files), b.root), Changed: true, Facts: facts}, nil
	}
	var out strings.Builder
	for _, mode := range []string{"server", "agent"} {
		unit := "rke2-" + mode + ".service"
		st, err := b.units.State(ctx, unit)
		if err != nil {
			// A unit systemd does not know is not running.
			continue
		}
		if st.Active == "inactive" || st.Active == "failed" {
			continue
		}
		o, err := proc.Run(ctx, proc.Cmd{Path: b.systemctl, Args: []string{"--no-ask-password", "stop", "--", unit}})
		out.WriteString(o.Stdout)
		if err != nil {
			return &backends.Result{Output: out.String()}, fmt.Errorf("systemctl stop %s: %w", unit, err)
		}
		fmt.Fprintf(&out, "stopped %s\n", unit)
	}
	root, err := os.OpenRoot(b.root)
	if err != nil {
		return nil, fmt.Errorf("rke2 install root: %w", err)
	}
	defer root.Close()
	for _, f := range m.Files {
		if err := root.Remove(filepath.FromSlash(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &backends.Result{Output: out.String(), Changed: true}, fmt.Errorf("rke2 uninstall: %w", err)
		}
	}
	if err := root.Remove(filepath.FromSlash(manifestPath)); err != nil {
		return &backends.Result{Output: out.String(), Changed: true}, fmt.Errorf("rke2 uninstall: %w", err)
	}
	// RKE2's own directories (share/rke2, …) go too when left empty,
	// deepest first; shared ones such as bin or lib/systemd/system stay,
	// empty or not, since the install root is /usr/local.
	dirs := map[string]bool{}
	for _, f := range append(m.Files, manifestPath) {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			if strings.Contains(path.Base(d), "rke2") {
				dirs[d] = true
			}
		}
	}
	sorted := slices.Collect(func(yield func(string) bool) {
		for d := range dirs {
			if !yield(d) {
				return
			}
		}
	})
	slices.SortFunc(sorted, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range sorted {
		_ = root.Remove(filepath.FromSlash(d)) // fails, as it should, when not empty
	}
	o, err := b.daemonReload(ctx)
	out.WriteString(o)
	fmt.Fprintf(&out, "removed rke2 %s (%s files)\n", m.Version, strconv.Itoa(len(m.Files)))
	facts["installed"] = false
	return &backends.Result{Output: out.String(), Changed: true, Facts: facts}, err
}
