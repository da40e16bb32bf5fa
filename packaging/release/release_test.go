package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/dirhash"

	"github.com/gridfleet/terraform-provider-grid/internal/gpgtest"
)

// fakeBinaries writes a distinct small file per platform where `make
// release` puts the binaries, and returns their contents by platform.
func fakeBinaries(t *testing.T, dir, version string, platforms []string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range platforms {
		goos, _, _ := strings.Cut(p, "_")
		data := []byte("binary of " + p + " " + version)
		path := filepath.Join(dir, p, BinaryName(version, goos))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
		out[p] = data
	}
	return out
}

func testOptions(t *testing.T, version string, platforms ...string) (Options, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	bins := fakeBinaries(t, filepath.Join(dir, "build"), version, platforms)
	return Options{
		Version:   version,
		Platforms: platforms,
		BinDir:    filepath.Join(dir, "build"),
		OutDir:    filepath.Join(dir, "release"),
		MirrorDir: filepath.Join(dir, "mirror"),
		Manifest:  "../../terraform-registry-manifest.json",
	}, bins
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The files are named and laid out as the registry expects: one zip per
// platform holding the executable binary alone under its versioned name,
// the manifest copied, SHA256SUMS over the zips and the manifest; and the
// mirror's VERSION.json hashes are those of the zips, as Terraform computes
// them.
func TestReleaseLayout(t *testing.T) {
	o, bins := testOptions(t, "1.2.3", "linux_amd64", "windows_arm64", "darwin_arm64")
	res, err := Release(o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, err := os.ReadDir(o.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{
		"terraform-provider-grid_1.2.3_SHA256SUMS",
		"terraform-provider-grid_1.2.3_darwin_arm64.zip",
		"terraform-provider-grid_1.2.3_linux_amd64.zip",
		"terraform-provider-grid_1.2.3_manifest.json",
		"terraform-provider-grid_1.2.3_windows_arm64.zip",
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("release files %q, want %q", names, want)
	}
	if res.Signature != "" {
		t.Errorf("signed without a key: %s", res.Signature)
	}

	for p, inner := range map[string]string{
		"linux_amd64":   "terraform-provider-grid_v1.2.3",
		"darwin_arm64":  "terraform-provider-grid_v1.2.3",
		"windows_arm64": "terraform-provider-grid_v1.2.3.exe",
	} {
		zr, err := zip.OpenReader(filepath.Join(o.OutDir, "terraform-provider-grid_1.2.3_"+p+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 1 || zr.File[0].Name != inner {
			t.Errorf("%s: zip holds %v, want %s alone", p, zr.File, inner)
		} else {
			f := zr.File[0]
			if f.Mode().Perm() != 0o755 {
				t.Errorf("%s: %s has mode %v, want 0755", p, inner, f.Mode())
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, bins[p]) {
				t.Errorf("%s: zip content %q, want %q", p, got, bins[p])
			}
		}
		zr.Close()
	}

	manifest, _ := os.ReadFile(o.Manifest)
	if got, _ := os.ReadFile(res.Manifest); !bytes.Equal(got, manifest) {
		t.Errorf("manifest copy differs:\n%s", got)
	}

	sums, err := os.ReadFile(res.Sums)
	if err != nil {
		t.Fatal(err)
	}
	zh := map[string]string{} // file name => hex
	lines := strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n")
	for _, l := range lines {
		hexSum, name, ok := strings.Cut(l, "  ")
		if !ok || len(hexSum) != 64 {
			t.Fatalf("SHA256SUMS line %q is not \"HEX  NAME\"", l)
		}
		got, err := fileSHA256(filepath.Join(o.OutDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got != hexSum {
			t.Errorf("SHA256SUMS says %s for %s, the file's is %s", hexSum, name, got)
		}
		zh[name] = hexSum
	}
	if got := slices.Sorted(mapKeys(zh)); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("SHA256SUMS covers %q, want %q", got, want[1:])
	}

	dir := filepath.Join(o.MirrorDir, "registry.terraform.io", "gridfleet", "grid")
	tofuDir := filepath.Join(o.MirrorDir, "registry.opentofu.org", "gridfleet", "grid")
	if want := []string{dir, tofuDir}; !reflect.DeepEqual(res.MirrorDirs, want) {
		t.Errorf("mirror dirs %q, want %q", res.MirrorDirs, want)
	}
	for _, name := range []string{"index.json", "1.2.3.json", "terraform-provider-grid_1.2.3_linux_amd64.zip"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, err := os.ReadFile(filepath.Join(tofuDir, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the two hosts' mirrors (%v)", name, err)
		}
	}
	var index struct {
		Versions map[string]struct{} `json:"versions"`
	}
	readJSON(t, filepath.Join(dir, "index.json"), &index)
	if !reflect.DeepEqual(slices.Sorted(mapKeys(index.Versions)), []string{"1.2.3"}) {
		t.Errorf("index.json versions %v, want 1.2.3", index.Versions)
	}
	var ver struct {
		Archives map[string]mirrorArchive `json:"archives"`
	}
	readJSON(t, filepath.Join(dir, "1.2.3.json"), &ver)
	if len(ver.Archives) != 3 {
		t.Errorf("1.2.3.json has %d archives, want 3", len(ver.Archives))
	}
	for p, a := range ver.Archives {
		name := "terraform-provider-grid_1.2.3_" + p + ".zip"
		if a.URL != name {
			t.Errorf("%s: url %q, want %q (beside the JSON)", p, a.URL, name)
		}
		h1, err := dirhash.HashZip(filepath.Join(o.OutDir, name), dirhash.Hash1)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{h1, "zh:" + zh[name]}; !reflect.DeepEqual(a.Hashes, want) {
			t.Errorf("%s: hashes %q, want %q", p, a.Hashes, want)
		}
		if got, _ := fileSHA256(filepath.Join(dir, name)); got != zh[name] {
			t.Errorf("%s: the mirror's zip is not the release's", p)
		}
	}

	// A second version released into the same mirror: both are listed.
	o2, _ := testOptions(t, "1.3.0-rc.1", "linux_amd64")
	o2.MirrorDir = o.MirrorDir
	if _, err := Release(o2); err != nil {
		t.Fatal(err)
	}
	index.Versions = nil
	readJSON(t, filepath.Join(dir, "index.json"), &index)
	if got := slices.Sorted(mapKeys(index.Versions)); !reflect.DeepEqual(got, []string{"1.2.3", "1.3.0-rc.1"}) {
		t.Errorf("index.json after a second release lists %q", got)
	}

	// The same binaries give the same zips.
	again, _ := testOptions(t, "1.2.3", "linux_amd64")
	res2, err := Release(again)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := zh["terraform-provider-grid_1.2.3_linux_amd64.zip"], mustSHA(t, res2.Zips[0]); a != b {
		t.Errorf("the same binary gave two zips: %s and %s", a, b)
	}
}

func mustSHA(t *testing.T, path string) string {
	t.Helper()
	s, err := fileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Bad input is refused with an error that says what is wrong.
func TestReleaseRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(o *Options)
		want   string
	}{
		{"leading v", func(o *Options) { o.Version = "v1.2.3" }, "not a semantic version"},
		{"two parts", func(o *Options) { o.Version = "1.2" }, "not a semantic version"},
		{"git hash", func(o *Options) { o.Version = "87343b2" }, "not a semantic version"},
		{"platform with a dash", func(o *Options) { o.Platforms = []string{"linux-amd64"} }, `platform "linux-amd64" is not OS_ARCH`},
		{"platform twice", func(o *Options) { o.Platforms = []string{"linux_amd64", "linux_amd64"} }, "given twice"},
		{"no platforms", func(o *Options) { o.Platforms = nil }, "no platforms"},
		{"binary missing", func(o *Options) { o.Platforms = []string{"linux_arm64"} }, "linux_arm64: provider binary"},
		{"manifest missing", func(o *Options) { o.Manifest = "nope.json" }, "registry manifest"},
		{"signature required", func(o *Options) { o.RequireSignature = true }, "no key is configured"},
		{"mirror host with a path", func(o *Options) { o.MirrorHosts = []string{"example.com/x"} }, "not a lower-case host name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := testOptions(t, "1.0.0", "linux_amd64")
			tc.change(&o)
			_, err := Release(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	o, _ := testOptions(t, "1.0.0", "linux_amd64")
	bad := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "metadata": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Manifest = bad
	if _, err := Release(o); err == nil || !strings.Contains(err.Error(), "protocol_versions") {
		t.Errorf("a manifest without protocol versions: %v", err)
	}
}

// With a key file, SHA256SUMS gets a detached binary signature that gpg
// verifies with the public key, and that fails on altered checksums.
func TestReleaseSignsWithKeyFile(t *testing.T) {
	key := gpgtest.New(t)
	o, _ := testOptions(t, "2.0.0", "linux_amd64")
	o.GPGKeyFile = key.SecretFile
	o.RequireSignature = true
	res, err := Release(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := res.Sums + ".sig"; res.Signature != want {
		t.Fatalf("signature %q, want %q", res.Signature, want)
	}
	sig, err := os.ReadFile(res.Signature)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(sig, []byte("-----BEGIN")) {
		t.Error("the signature is armored; the registry takes a binary one")
	}
	if err := gpgtest.Verify(key.Home, res.Signature, res.Sums); err != nil {
		t.Fatal(err)
	}
	altered := filepath.Join(t.TempDir(), "SUMS")
	sums, _ := os.ReadFile(res.Sums)
	if err := os.WriteFile(altered, bytes.Replace(sums, []byte("linux_amd64"), []byte("linux_arm64"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gpgtest.Verify(key.Home, res.Signature, altered); err == nil {
		t.Error("the signature verifies altered checksums")
	}

	// Released again without a key: the earlier signature is gone rather
	// than left beside checksums it does not sign.
	o.GPGKeyFile, o.RequireSignature = "", false
	if _, err := Release(o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(res.Signature); !os.IsNotExist(err) {
		t.Errorf("a stale signature stays: %v", err)
	}
}

// With a key id, the key is taken from the keyring GNUPGHOME names.
func TestReleaseSignsWithKeyring(t *testing.T) {
	key := gpgtest.New(t)
	t.Setenv("GNUPGHOME", key.Home)
	o, _ := testOptions(t, "2.0.1", "linux_amd64")
	o.GPGKey = key.Fingerprint
	res, err := Release(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := gpgtest.Verify(key.Home, res.Signature, res.Sums); err != nil {
		t.Fatal(err)
	}
	o.GPGKey = "0000000000000000000000000000000000000000"
	if _, err := Release(o); err == nil || !strings.Contains(err.Error(), "gpg --detach-sign") {
		t.Errorf("an unknown key: %v", err)
	}
}
