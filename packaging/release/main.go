// Command release packs the provider binaries `make release` built into the
// files a Terraform registry takes, and into a provider mirror:
//
//   - terraform-provider-grid_VERSION_OS_ARCH.zip per platform, holding the
//     binary as terraform-provider-grid_vVERSION (.exe on windows);
//   - terraform-provider-grid_VERSION_manifest.json (the registry manifest);
//   - terraform-provider-grid_VERSION_SHA256SUMS over the zips and the
//     manifest, and its detached GPG signature _SHA256SUMS.sig when a key is
//     configured;
//   - a mirror directory, HOST/gridfleet/grid/ for registry.terraform.io and
//     registry.opentofu.org, with the zips beside the index.json and
//     VERSION.json of the provider network mirror protocol: a static web
//     server serving it is a network mirror, and the directory itself is a
//     filesystem mirror in its packed layout.
//
// Usage (the Makefile runs it):
//
//	go run ./packaging/release -version 1.2.3 -bin-dir dist/release/build \
//	    -out dist/release -mirror dist/mirror -platforms linux_amd64,darwin_arm64
//
// The binaries are read from BIN-DIR/OS_ARCH/terraform-provider-grid_vVERSION[.exe].
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	var (
		o         Options
		platforms string
		mtime     int64
		checkOnly bool
		hosts     string
	)
	flag.StringVar(&o.Version, "version", "", "the release's version, X.Y.Z (semantic, no leading v)")
	flag.StringVar(&o.BinDir, "bin-dir", "", "directory with one OS_ARCH/ subdirectory of binaries per platform")
	flag.StringVar(&o.OutDir, "out", "", "directory the registry files are written to")
	flag.StringVar(&o.MirrorDir, "mirror", "", "root of the provider mirror to add this version to (empty: none)")
	flag.StringVar(&hosts, "mirror-hosts", strings.Join(DefaultMirrorHosts, ","), "comma- or space-separated registry hosts the mirror serves the provider under")
	flag.StringVar(&o.Manifest, "manifest", "terraform-registry-manifest.json", "the registry manifest")
	flag.StringVar(&platforms, "platforms", "", "comma- or space-separated OS_ARCH list")
	flag.Int64Var(&mtime, "mtime", 0, "modification time of the files in the zips, Unix seconds (0: 1980-01-01, the zip epoch)")
	flag.StringVar(&o.GPGKey, "gpg-key", os.Getenv("RELEASE_GPG_KEY"), "key id or fingerprint to sign SHA256SUMS with (default $RELEASE_GPG_KEY)")
	flag.StringVar(&o.GPGKeyFile, "gpg-key-file", os.Getenv("RELEASE_GPG_KEY_FILE"), "armored secret key file to sign with, imported into a throwaway keyring (default $RELEASE_GPG_KEY_FILE)")
	flag.BoolVar(&o.RequireSignature, "require-signature", os.Getenv("RELEASE_REQUIRE_SIGNATURE") == "1", "fail when no signing key is configured (default $RELEASE_REQUIRE_SIGNATURE=1)")
	flag.BoolVar(&checkOnly, "check", false, "only check -version and -platforms (before the binaries are built)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	o.Platforms = strings.FieldsFunc(platforms, func(r rune) bool { return r == ',' || r == ' ' })
	o.MirrorHosts = strings.FieldsFunc(hosts, func(r rune) bool { return r == ',' || r == ' ' })
	if mtime > 0 {
		o.ModTime = time.Unix(mtime, 0).UTC()
	}
	if checkOnly {
		if err := o.checkNames(); err != nil {
			fail(err)
		}
		return
	}
	o.Log = os.Stdout
	res, err := Release(o)
	if err != nil {
		fail(err)
	}
	if res.Signature == "" {
		fmt.Println("release: SHA256SUMS NOT signed: no key configured (set RELEASE_GPG_KEY to a key id in your keyring, or RELEASE_GPG_KEY_FILE to an armored secret key); the Terraform registry and signed mirrors need the signature")
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "release: %v\n", err)
	os.Exit(1)
}
