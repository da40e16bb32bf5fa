package procfs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A process name may hold spaces and parentheses; the fields after it are
// still read right.
func TestParseStat(t *testing.T) {
	root := t.TempDir()
	write := func(pid, stat, cmdline string) {
		dir := filepath.Join(root, pid)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{"stat": stat, "cmdline": cmdline, "status": "Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("42", "42 (odd) name (x)) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 12345 1000000 256 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
		"/usr/bin/web-server\x00--port\x008080\x00")
	write("43", "43 (kthreadd) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", "")
	// A process that exited between the listing and the read.
	if err := os.Mkdir(filepath.Join(root, "44"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	ps, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d processes: %+v", len(ps), ps)
	}
	p := ps[0]
	if p.PID != 42 || p.Name != "odd) name (x)" || p.State != "S" || p.PPID != 7 || p.UID != 1000 ||
		p.CPUTicks != 300 || p.Threads != 3 || p.StartTicks != 12345 || p.RSSBytes != 256*uint64(os.Getpagesize()) {
		t.Errorf("parsed %+v", p)
	}
	if !slices.Equal(p.Cmdline, []string{"/usr/bin/web-server", "--port", "8080"}) || p.Command() != "/usr/bin/web-server --port 8080" {
		t.Errorf("cmdline %q", p.Cmdline)
	}
	if !p.Matches("web-server") || !p.Matches("odd) name (x)") || p.Matches("web") {
		t.Errorf("Matches is wrong for %+v", p)
	}
	if k := ps[1]; k.Command() != "[kthreadd]" || k.Matches("") {
		t.Errorf("kernel thread %+v", k)
	}
}

func TestSelf(t *testing.T) {
	p, err := Read(Root, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.UID != os.Getuid() || p.Threads < 1 || p.RSSBytes == 0 {
		t.Errorf("self %+v", p)
	}
}
