package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The README's backend table names every built-in backend and each of its
// actions, so the table an operator reads is the set an agent offers.
func TestReadmeBackendTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n### Backends\n")
	if !ok {
		t.Fatal("README.md has no ### Backends section")
	}
	rows := map[string]string{}
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "### ") {
			break
		}
		if cells := strings.Split(l, "|"); len(cells) >= 4 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = cells[2]
		}
	}
	r, err := New(Options{Programs: map[string]ProgramSpec{"tool": {Path: "/bin/true"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range r.List() {
		b, _ := r.Get(name)
		row, ok := rows[name]
		if !ok {
			t.Errorf("README's backend table has no row for %s", name)
			continue
		}
		for _, a := range b.Schema().Actions {
			if !strings.Contains(row, "`"+a.Name+"`") {
				t.Errorf("README's row for %s does not name its action %s", name, a.Name)
			}
		}
		delete(rows, name)
	}
	for name := range rows {
		t.Errorf("README's backend table has a row for %s, which is not a built-in backend", name)
	}
}
