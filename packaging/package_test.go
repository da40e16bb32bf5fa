// Package packaging_test checks the files the packages are built from and,
// after `make package` (run by `make package-test`), the packages
// themselves. The package checks skip unless GRID_PACKAGE_DIR names the
// directory holding them; each skips when the tool it needs is missing.
package packaging_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/controller"
)

// The shipped config files load and validate as they are, so enabling a
// unit with an untouched file starts a service rather than failing on its
// config.
func TestConfigFilesValidate(t *testing.T) {
	acfg := agent.DefaultConfig()
	if err := agent.LoadConfig("etc/agent.yaml", &acfg); err != nil {
		t.Fatal(err)
	}
	if err := acfg.Validate(); err != nil {
		t.Errorf("etc/agent.yaml: %v", err)
	}
	if acfg.DataDir != "/var/lib/grid-agent" || acfg.CAFile != "/etc/grid/ca.pem" || acfg.JoinTokenFile != "/etc/grid/join-token" {
		t.Errorf("etc/agent.yaml: data_dir %q, ca_file %q, join_token_file %q: want the package's paths", acfg.DataDir, acfg.CAFile, acfg.JoinTokenFile)
	}
	ccfg := controller.DefaultConfig()
	if err := controller.LoadConfig("etc/controller.yaml", &ccfg); err != nil {
		t.Fatal(err)
	}
	if err := ccfg.Validate(); err != nil {
		t.Errorf("etc/controller.yaml: %v", err)
	}
	if ccfg.DataDir != "/var/lib/grid/controller" {
		t.Errorf("etc/controller.yaml: data_dir %q, want /var/lib/grid/controller (the unit may write /var/lib/grid only)", ccfg.DataDir)
	}
	// Values the file spells out must be the defaults, as its comments say.
	def := controller.DefaultConfig()
	ccfg.APIAddr, ccfg.NATSAddr, ccfg.DataDir = def.APIAddr, def.NATSAddr, def.DataDir
	ccfg.AutoAdmit = nil
	ccfg.TLSHosts, ccfg.Routes, ccfg.NATSURLs, ccfg.Allow = nil, nil, nil, nil
	if !reflect.DeepEqual(ccfg, def) {
		t.Errorf("etc/controller.yaml sets values other than the defaults:\n got %+v\nwant %+v", ccfg, def)
	}
}

// Every key of the configs is in its file, set or commented out, so the
// file documents them all; a key added to a Config must be added there.
func TestConfigFilesNameEveryKey(t *testing.T) {
	for _, c := range []struct {
		file string
		typ  reflect.Type
	}{
		{"etc/agent.yaml", reflect.TypeOf(agent.Config{})},
		{"etc/controller.yaml", reflect.TypeOf(controller.Config{})},
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range yamlKeys(c.typ) {
			re := regexp.MustCompile(`(?m)^\s*#?\s*` + regexp.QuoteMeta(key) + `:`)
			if !re.Match(data) {
				t.Errorf("%s does not mention the key %q: add it with its default and what it does", c.file, key)
			}
		}
	}
}

// yamlKeys are the yaml keys of a config struct, nested structs' included.
func yamlKeys(typ reflect.Type) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, name)
		ft := f.Type
		if ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			keys = append(keys, yamlKeys(ft)...)
		}
	}
	return keys
}

// packages returns the directory and version of the built packages, or
// skips.
func packages(t *testing.T) (dir, version string) {
	t.Helper()
	dir, version = os.Getenv("GRID_PACKAGE_DIR"), os.Getenv("GRID_PACKAGE_VERSION")
	if dir == "" || version == "" {
		t.Skip("GRID_PACKAGE_DIR and GRID_PACKAGE_VERSION unset: run make package-test")
	}
	return dir, version
}

func need(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not installed", tool)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The contract the fleet's images and the README rely on, per package.
var debs = []struct {
	pkg       string
	files     map[string]string // path: mode as dpkg-deb -c shows it
	conffiles []string
	units     []string
	binary    string
}{
	{
		pkg: "grid",
		files: map[string]string{
			"./usr/bin/grid": "-rwxr-xr-x",
			"./lib/systemd/system/grid-controller.service": "-rw-r--r--",
			"./lib/systemd/system/grid-site-relay.service": "-rw-r--r--",
			"./etc/grid/controller.yaml":                   "-rw-r-----",
		},
		conffiles: []string{"/etc/grid/controller.yaml"},
		units:     []string{"grid-controller.service", "grid-site-relay.service"},
		binary:    "grid",
	},
	{
		pkg: "grid-agent",
		files: map[string]string{
			"./usr/bin/grid-agent":                    "-rwxr-xr-x",
			"./lib/systemd/system/grid-agent.service": "-rw-r--r--",
			"./etc/grid/agent.yaml":                   "-rw-r-----",
		},
		conffiles: []string{"/etc/grid/agent.yaml"},
		units:     []string{"grid-agent.service"},
		binary:    "grid-agent",
	},
}

func TestDebPackages(t *testing.T) {
	dir, version := packages(t)
	need(t, "dpkg-deb")
	for _, d := range debs {
		t.Run(d.pkg, func(t *testing.T) {
			deb := filepath.Join(dir, d.pkg+"_"+version+"_amd64.deb")
			if _, err := os.Stat(deb); err != nil {
				t.Fatal(err)
			}
			fields := run(t, "dpkg-deb", "-f", deb, "Package", "Version", "Architecture")
			want := "Package: " + d.pkg + "\nVersion: " + version + "\nArchitecture: amd64\n"
			if fields != want {
				t.Errorf("control fields:\n%s\nwant:\n%s", fields, want)
			}
			listing := run(t, "dpkg-deb", "-c", deb)
			for path, mode := range d.files {
				re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(mode) + `\s+root/root\s+\d+\s+\S+\s+\S+\s+` + regexp.QuoteMeta(path) + `$`)
				if !re.MatchString(listing) {
					t.Errorf("%s: want %s %s root/root in:\n%s", deb, mode, path, listing)
				}
			}

			ctl := t.TempDir()
			run(t, "dpkg-deb", "-e", deb, ctl)
			conffiles, err := os.ReadFile(filepath.Join(ctl, "conffiles"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(string(conffiles)); !reflect.DeepEqual(got, d.conffiles) {
				t.Errorf("conffiles %v, want %v (an upgrade must keep the operator's config)", got, d.conffiles)
			}
			for _, script := range []string{"postinst", "prerm", "postrm"} {
				data, err := os.ReadFile(filepath.Join(ctl, script))
				if err != nil {
					t.Fatalf("maintainer script %s: %v", script, err)
				}
				// Installing starts nothing: only prerm, on removal, stops
				// and disables the unit.
				if script != "prerm" && regexp.MustCompile(`(?m)^[^#\n]*systemctl[^\n]*\b(enable|start|restart)\b`).Match(data) {
					t.Errorf("%s enables or starts a unit:\n%s", script, data)
				}
			}

			root := t.TempDir()
			run(t, "dpkg-deb", "-x", deb, root)
			bin := filepath.Join(root, "usr/bin", d.binary)
			if out := run(t, bin, "version"); !strings.HasPrefix(out, d.binary+" "+version+" ") {
				t.Errorf("%s version = %q, want the package's version %s", d.binary, out, version)
			}
			for _, name := range d.units {
				unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system", name))
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range []string{"ExecStart=/usr/bin/" + d.binary + " ", "ConditionPathExists=/etc/grid/"} {
					if !bytes.Contains(unit, []byte(line)) {
						t.Errorf("%s lacks %q", name, line)
					}
				}
				verifyUnit(t, filepath.Join(root, "lib/systemd/system", name))
			}
		})
	}
}

// The agent package's binary holds none of what the slim build leaves out:
// its build info lists every module linked in.
func TestAgentBinaryIsSlim(t *testing.T) {
	dir, version := packages(t)
	need(t, "dpkg-deb")
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", filepath.Join(dir, "grid-agent_"+version+"_amd64.deb"), root)
	info := run(t, "go", "version", "-m", filepath.Join(root, "usr/bin/grid-agent"))
	for _, mod := range []string{"nats-server", "grpc", "hashicorp/terraform", "prometheus/client_golang", "otlptrace", "google.golang.org/protobuf"} {
		if strings.Contains(info, mod) {
			t.Errorf("grid-agent links %s:\n%s", mod, info)
		}
	}
	if !strings.Contains(info, "-tags=grid_slim") {
		t.Errorf("grid-agent was not built with -tags grid_slim:\n%s", info)
	}
}

// verifyUnit runs systemd-analyze verify on a unit. The binaries are not
// installed on this machine, which it reports; anything else fails.
func verifyUnit(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: unit not verified")
		return
	}
	out, _ := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.Contains(line, "is not executable: No such file or directory") {
			continue
		}
		t.Errorf("systemd-analyze verify %s: %s", filepath.Base(path), line)
	}
}

func TestRPMPackages(t *testing.T) {
	dir, version := packages(t)
	for _, p := range []string{"grid", "grid-agent"} {
		if fi, err := os.Stat(filepath.Join(dir, p+"_"+version+"_amd64.rpm")); err != nil || fi.Size() == 0 {
			t.Errorf("rpm of %s: %v", p, err)
		}
	}
	need(t, "rpm")
	for _, d := range debs {
		rpm := filepath.Join(dir, d.pkg+"_"+version+"_amd64.rpm")
		list := run(t, "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILEFLAGS:fflags} %{FILENAMES}\n]", rpm)
		for path := range d.files {
			if !strings.Contains(list, strings.TrimPrefix(path, ".")) {
				t.Errorf("%s lacks %s:\n%s", rpm, path, list)
			}
		}
		for _, cf := range d.conffiles {
			if !regexp.MustCompile(`(?m) cn ` + regexp.QuoteMeta(cf) + `$`).MatchString(list) {
				t.Errorf("%s: %s is not %%config(noreplace):\n%s", rpm, cf, list)
			}
		}
	}
}
