package compose

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gridfleet/terraform-provider-grid"

// TestLayers: GRID's packages import downwards only. The composition
// roots (this package's children, cli, the binaries and the end-to-end
// tests) may import controller and agent together; controller and agent do
// not import each other; api imports nothing of GRID; nothing but a
// composition root imports one.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...").Output()
	if err != nil {
		t.Skipf("go list: %v (the go command is needed to read the imports)", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	root := func(p string) bool {
		for _, r := range []string{"internal/compose/", "cli", "cmd/", "test/"} {
			if strings.HasPrefix(p, r) {
				return true
			}
		}
		return p == "" // the module's main package
	}
	seen := 0
	for dec.More() {
		var pkg struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		seen++
		p := strings.TrimPrefix(strings.TrimPrefix(pkg.ImportPath, module), "/")
		var grid []string
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				grid = append(grid, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		has := func(q string) bool {
			for _, g := range grid {
				if g == q {
					return true
				}
			}
			return false
		}
		switch {
		case p == "api" && len(grid) > 0:
			t.Errorf("api imports %v: it must import nothing of GRID", grid)
		case p == "controller" && has("agent"), p == "agent" && has("controller"):
			t.Errorf("%s imports %v: controller and agent must not import each other", p, grid)
		}
		if !root(p) {
			for _, g := range grid {
				if strings.HasPrefix(g, "internal/compose") {
					t.Errorf("%s imports %s: only a composition root may", p, g)
				}
			}
			if has("controller") && has("agent") && !strings.HasSuffix(pkg.ImportPath, ".test") {
				t.Errorf("%s imports both controller and agent: only a composition root may (internal/compose)", p)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("read %d packages; the listing is broken", seen)
	}
}
