package journald_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testbin"
	"github.com/gridfleet/terraform-provider-grid/backends/journald"
)

// Values that pass the params' patterns but hold journalctl options
// (since allows letters, blanks and dashes) must reach journalctl as the
// value of their own option, one argv element each, never as options of
// their own; grep never reaches journalctl at all. The fake journalctl
// records the argv it got.
func TestParamsNeverBecomeOptions(t *testing.T) {
	fake := testbin.Build(t, "testdata/fakejournalctl")
	dir := t.TempDir()
	t.Setenv("FAKE_JOURNALCTL_DIR", dir)
	if err := os.WriteFile(filepath.Join(dir, "entries.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := backends.NewRegistry().MustRegister(journald.New(journald.Options{JournalctlPath: fake}))
	params := api.Params{"since": "today -D root --output cat", "until": "-1h", "unit": "ssh.service", "grep": "--directory=/ -o cat"}
	if _, err := reg.Run(context.Background(), "journald", &backends.Request{Action: "logs", Params: params}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "argv.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("journalctl was not run")
	}
	var argv []string
	if err := json.Unmarshal(sc.Bytes(), &argv); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--since=today -D root --output cat", "--until=-1h", "--unit=ssh.service"} {
		if !slices.Contains(argv, want) {
			t.Errorf("argv %q lacks %q", argv, want)
		}
	}
	for _, a := range argv {
		if a == "-D" || a == "root" || a == "cat" || strings.Contains(a, "directory") {
			t.Errorf("argv %q holds %q as an element of its own", argv, a)
		}
	}
}
