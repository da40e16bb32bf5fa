package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/dirhash"
)

const (
	// providerType is the provider's type name: the "grid" of gridfleet/grid.
	providerType = "grid"
	// mirrorPath is where the mirror files sit below the mirror's root and
	// a host: the provider's source address without its host.
	mirrorPath = "gridfleet/" + providerType
)

// DefaultMirrorHosts are the registry hosts the mirror serves the provider
// under: the one Terraform gives "gridfleet/grid" and the one OpenTofu
// gives it, so that one mirror serves configurations written for either.
var DefaultMirrorHosts = []string{"registry.terraform.io", "registry.opentofu.org"}

// Options says what Release packs and where it writes.
type Options struct {
	Version   string
	Platforms []string // OS_ARCH
	BinDir    string
	OutDir    string
	MirrorDir string
	// MirrorHosts are the hosts of the provider's addresses in the mirror
	// (none: DefaultMirrorHosts).
	MirrorHosts []string
	Manifest    string
	// ModTime is the time of the binary inside each zip; the zero time
	// means the zip epoch, so that the same binaries give the same zips.
	ModTime time.Time
	// GPGKey signs with a key of the current keyring (GNUPGHOME);
	// GPGKeyFile imports an armored secret key into a throwaway keyring and
	// signs with it (with GPGKey, if both are set, picking among its keys).
	GPGKey, GPGKeyFile string
	// RequireSignature fails the release when neither is set.
	RequireSignature bool
	Log              io.Writer
}

// Result names what Release wrote.
type Result struct {
	Zips      []string // paths, in platform order
	Manifest  string
	Sums      string
	Signature string // empty when not signed
	// MirrorDirs are the directories with index.json, VERSION.json and the
	// zips, one per mirror host (none when no mirror was asked for).
	MirrorDirs []string
}

// semverRE is a semantic version without the leading "v", as the registry
// and provider mirrors name versions.
var semverRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

var (
	platformRE = regexp.MustCompile(`^[a-z0-9]+_[a-z0-9]+$`)
	hostRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?$`)
)

// BinaryName is the provider binary's name inside a zip for goos, as the
// registry expects it.
func BinaryName(version, goos string) string {
	name := "terraform-provider-" + providerType + "_v" + version
	if goos == "windows" {
		name += ".exe"
	}
	return name
}

// prefix starts the name of every release file.
func prefix(version string) string { return "terraform-provider-" + providerType + "_" + version }

// checkNames checks the version and the platforms.
func (o Options) checkNames() error {
	if !semverRE.MatchString(o.Version) {
		return fmt.Errorf("version %q is not a semantic version X.Y.Z[-pre][+build] (without a leading v)", o.Version)
	}
	if len(o.Platforms) == 0 {
		return errors.New("no platforms given")
	}
	seen := map[string]bool{}
	for _, p := range o.Platforms {
		if !platformRE.MatchString(p) {
			return fmt.Errorf("platform %q is not OS_ARCH (linux_amd64)", p)
		}
		if seen[p] {
			return fmt.Errorf("platform %q is given twice", p)
		}
		seen[p] = true
	}
	for _, h := range o.MirrorHosts {
		if !hostRE.MatchString(h) {
			return fmt.Errorf("mirror host %q is not a lower-case host name", h)
		}
	}
	return nil
}

func (o Options) check() error {
	if err := o.checkNames(); err != nil {
		return err
	}
	if o.BinDir == "" || o.OutDir == "" {
		return errors.New("-bin-dir and -out are required")
	}
	return nil
}

// Release writes the registry files and the mirror for o.
func Release(o Options) (Result, error) {
	var res Result
	if err := o.check(); err != nil {
		return res, err
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.ModTime.IsZero() {
		o.ModTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return res, err
	}
	var sumFiles []string
	for _, p := range o.Platforms {
		goos, _, _ := strings.Cut(p, "_")
		bin := filepath.Join(o.BinDir, p, BinaryName(o.Version, goos))
		zipPath := filepath.Join(o.OutDir, prefix(o.Version)+"_"+p+".zip")
		if err := writeZip(zipPath, bin, BinaryName(o.Version, goos), o.ModTime); err != nil {
			return res, fmt.Errorf("%s: %w", p, err)
		}
		fmt.Fprintf(o.Log, "%s\n", zipPath)
		res.Zips = append(res.Zips, zipPath)
		sumFiles = append(sumFiles, zipPath)
	}

	manifest, err := os.ReadFile(o.Manifest)
	if err != nil {
		return res, fmt.Errorf("registry manifest: %w", err)
	}
	if err := checkManifest(manifest); err != nil {
		return res, fmt.Errorf("registry manifest %s: %w", o.Manifest, err)
	}
	res.Manifest = filepath.Join(o.OutDir, prefix(o.Version)+"_manifest.json")
	if err := os.WriteFile(res.Manifest, manifest, 0o644); err != nil {
		return res, err
	}
	sumFiles = append(sumFiles, res.Manifest)

	res.Sums = filepath.Join(o.OutDir, prefix(o.Version)+"_SHA256SUMS")
	sums, err := sha256Sums(sumFiles)
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(res.Sums, sums, 0o644); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "%s\n", res.Sums)

	// A stale signature of an earlier SHA256SUMS must not sit beside this one.
	sig := res.Sums + ".sig"
	if err := os.Remove(sig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, err
	}
	switch {
	case o.GPGKey != "" || o.GPGKeyFile != "":
		if err := sign(res.Sums, sig, o.GPGKey, o.GPGKeyFile); err != nil {
			return res, err
		}
		res.Signature = sig
		fmt.Fprintf(o.Log, "%s\n", sig)
	case o.RequireSignature:
		return res, errors.New("a signature is required and no key is configured: set RELEASE_GPG_KEY or RELEASE_GPG_KEY_FILE")
	}

	if o.MirrorDir != "" {
		hosts := o.MirrorHosts
		if len(hosts) == 0 {
			hosts = DefaultMirrorHosts
		}
		for _, h := range hosts {
			dir := filepath.Join(o.MirrorDir, h, filepath.FromSlash(mirrorPath))
			if err := addToMirror(dir, o.Version, o.Platforms, res.Zips); err != nil {
				return res, fmt.Errorf("mirror: %w", err)
			}
			res.MirrorDirs = append(res.MirrorDirs, dir)
			fmt.Fprintf(o.Log, "%s/ (index.json, %s.json)\n", dir, o.Version)
		}
	}
	return res, nil
}

// writeZip writes a zip holding the file bin alone, as name, executable.
func writeZip(zipPath, bin, name string, mtime time.Time) (err error) {
	src, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("provider binary: %w", err)
	}
	defer src.Close()
	tmp := zipPath + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	zw := zip.NewWriter(f)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: mtime}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, src); err != nil {
		return fmt.Errorf("zip %s: %w", zipPath, err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, zipPath)
}

// checkManifest refuses a manifest the registry would not take: it must
// be JSON with version 1 and the plugin protocol versions served.
func checkManifest(data []byte) error {
	var m struct {
		Version  int `json:"version"`
		Metadata struct {
			ProtocolVersions []string `json:"protocol_versions"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m.Version != 1 || len(m.Metadata.ProtocolVersions) == 0 {
		return fmt.Errorf("want version 1 and metadata.protocol_versions, got version %d and %q", m.Version, m.Metadata.ProtocolVersions)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sha256Sums is the SHA256SUMS file of files, as sha256sum writes it
// ("HEX  NAME", by name), so `sha256sum -c` checks it.
func sha256Sums(files []string) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	var b bytes.Buffer
	for _, f := range files {
		sum, err := fileSHA256(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.Base(f))
	}
	return b.Bytes(), nil
}

// sign writes sig, the binary detached signature of file (the registry
// takes this form), made with gpg run directly, never through a shell.
// A key file is imported into a keyring of its own that is removed after.
// RELEASE_GPG_PASSPHRASE unlocks a key that has a passphrase.
func sign(file, sig, key, keyFile string) error {
	var home []string
	if keyFile != "" {
		dir, err := os.MkdirTemp("", "grid-release-gnupg-")
		if err != nil {
			return err
		}
		// gpg-agent serves this keyring while gpg uses it; stopping it lets
		// the directory, and the secret key in it, go.
		defer func() {
			_ = exec.Command("gpgconf", "--homedir", dir, "--kill", "gpg-agent").Run()
			os.RemoveAll(dir)
		}()
		home = []string{"--homedir", dir}
		if out, err := exec.Command("gpg", append(home, "--batch", "--import", keyFile)...).CombinedOutput(); err != nil {
			return fmt.Errorf("gpg --import %s: %w: %s", keyFile, err, bytes.TrimSpace(out))
		}
	}
	args := append(home, "--batch", "--yes")
	var stdin io.Reader
	if pass, ok := os.LookupEnv("RELEASE_GPG_PASSPHRASE"); ok {
		args = append(args, "--pinentry-mode", "loopback", "--passphrase-fd", "0")
		stdin = strings.NewReader(pass)
	}
	if key != "" {
		args = append(args, "--local-user", key)
	}
	args = append(args, "--detach-sign", "--output", sig, file)
	cmd := exec.Command("gpg", args...)
	cmd.Stdin = stdin
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gpg --detach-sign: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// mirrorArchive is one platform's entry in VERSION.json.
type mirrorArchive struct {
	URL    string   `json:"url"`
	Hashes []string `json:"hashes"`
}

// addToMirror puts the zips in dir (hard links where it can) and writes
// VERSION.json for them, then index.json listing every version whose
// VERSION.json is in dir, so releases made into the same mirror add up.
// The URLs are relative: they resolve beside VERSION.json wherever the
// directory is served.
func addToMirror(dir, version string, platforms, zips []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archives := map[string]mirrorArchive{}
	for i, z := range zips {
		dst := filepath.Join(dir, filepath.Base(z))
		if err := linkOrCopy(z, dst); err != nil {
			return err
		}
		// h1: is what Terraform records in .terraform.lock.hcl for a package
		// it installed; zh: is the zip's SHA-256 (its SHA256SUMS line).
		h1, err := dirhash.HashZip(dst, dirhash.Hash1)
		if err != nil {
			return fmt.Errorf("hash %s: %w", dst, err)
		}
		sum, err := fileSHA256(dst)
		if err != nil {
			return err
		}
		archives[platforms[i]] = mirrorArchive{URL: filepath.Base(z), Hashes: []string{h1, "zh:" + sum}}
	}
	if err := writeJSON(filepath.Join(dir, version+".json"), map[string]any{"archives": archives}); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	versions := map[string]struct{}{}
	for _, e := range entries {
		if v, ok := strings.CutSuffix(e.Name(), ".json"); ok && semverRE.MatchString(v) {
			versions[v] = struct{}{}
		}
	}
	return writeJSON(filepath.Join(dir, "index.json"), map[string]any{"versions": versions})
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
