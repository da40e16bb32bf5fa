// Package debrepo builds Debian packages with dpkg-deb and the flat apt
// repository that serves them ("deb [trusted=yes] file:DIR ./"), for the
// tests that install them on real Debian systems (test/hosttest, test/e2e).
package debrepo

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Package is one package of architecture all.
type Package struct {
	Name, Version, Description string
	// Files maps paths (relative to /) to content. Paths under DEBIAN/ are
	// the control scripts (made executable); DEBIAN/control is written
	// from the fields above. A path ending in "/" is an empty directory.
	Files map[string]string
}

// control is the package's control paragraph without the repository's
// fields.
func (p Package) control() []string {
	return []string{
		"Package: " + p.Name, "Version: " + p.Version, "Architecture: all",
		"Maintainer: GRID tests <grid@example.invalid>",
		"Section: misc", "Priority: optional",
		"Description: " + p.Description,
	}
}

// Write builds each package into repo (created if missing) and writes the
// repository's Packages index listing them all; a package already in repo
// at the same version is built again. work holds the packages' trees.
func Write(t testing.TB, work, repo string, pkgs ...Package) {
	t.Helper()
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	var index []string
	for _, p := range pkgs {
		src := filepath.Join(work, p.Name+"_"+p.Version)
		if err := os.RemoveAll(src); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{"DEBIAN/control": strings.Join(p.control(), "\n") + "\n A test package.\n"}
		for name, content := range p.Files {
			files[name] = content
		}
		for name, content := range files {
			path := filepath.Join(src, name)
			if strings.HasSuffix(name, "/") {
				if err := os.MkdirAll(path, 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if strings.HasPrefix(name, "DEBIAN/") && name != "DEBIAN/control" {
				mode = 0o755
			}
			if err := os.WriteFile(path, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
		deb := fmt.Sprintf("%s_%s_all.deb", p.Name, p.Version)
		if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", src, filepath.Join(repo, deb)).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb --build %s: %v\n%s", p.Name, err, out)
		}
		data, err := os.ReadFile(filepath.Join(repo, deb))
		if err != nil {
			t.Fatal(err)
		}
		md := md5.Sum(data)
		sha := sha256.Sum256(data)
		index = append(index, strings.Join(append(p.control(),
			"Filename: ./"+deb,
			fmt.Sprintf("Size: %d", len(data)),
			"MD5sum: "+hex.EncodeToString(md[:]),
			"SHA256: "+hex.EncodeToString(sha[:]),
		), "\n")+"\n")
	}
	if err := os.WriteFile(filepath.Join(repo, "Packages"), []byte(strings.Join(index, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Available reports why packages cannot be built here ("" when they can).
func Available() string {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		return "dpkg-deb is not installed; it builds the test packages"
	}
	return ""
}
