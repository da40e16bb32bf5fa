package file

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// TestSymlinkSwapRace races writes, mkdirs and removes under the prefix
// against a directory that is swapped, again and again, for a symlink to
// a directory outside it. Whatever the interleaving, nothing may appear in,
// change in or vanish from the outside directory.
func TestSymlinkSwapRace(t *testing.T) {
	if testing.Short() {
		t.Skip("races for a few seconds")
	}
	r, dir := newBackend(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	inside, evil, d := filepath.Join(dir, "real"), filepath.Join(dir, "evil"), filepath.Join(dir, "d")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, evil); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	// The swapper: d is the inside directory, then nothing, then the link
	// to outside, then nothing, over and over.
	wg.Go(func() {
		for ctx.Err() == nil {
			// A mkdir that won a race may have made d a directory of
			// its own; clear it so the swaps go on.
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				_ = os.RemoveAll(d)
			}
			_ = os.Rename(inside, d)
			_ = os.Rename(d, inside)
			_ = os.Rename(evil, d)
			_ = os.Rename(d, evil)
		}
	})
	ops := []struct {
		action string
		params api.Params
	}{
		{"write", api.Params{"path": filepath.Join(d, "victim"), "content": "pwned", "mode": "0666"}},
		{"write", api.Params{"path": filepath.Join(d, "planted"), "content": "pwned"}},
		{"mkdir", api.Params{"path": filepath.Join(d, "sub"), "mode": "0777", "parents": "false"}},
		{"remove", api.Params{"path": filepath.Join(d, "victim")}},
		{"stat", api.Params{"path": filepath.Join(d, "victim")}},
	}
	runs := 0
	var mu sync.Mutex
	for range 2 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				op := ops[i%len(ops)]
				p := api.Params{}
				for k, v := range op.params {
					p[k] = v
				}
				_, _ = run(t, r, op.action, false, p)
				mu.Lock()
				runs++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d actions raced against the swaps", runs)

	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "victim" {
			t.Errorf("escape: %s appeared outside the prefix", e.Name())
		}
	}
	got, err := os.ReadFile(victim)
	if err != nil {
		t.Fatalf("escape: the file outside the prefix is gone: %v", err)
	}
	if string(got) != "keep" {
		t.Errorf("escape: the file outside the prefix now holds %q", got)
	}
	if fi, err := os.Stat(victim); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("escape: the file outside the prefix now has mode %04o", fi.Mode().Perm())
	}
	if fi, err := os.Stat(outside); err == nil && fi.Mode().Perm() != 0o700 {
		t.Errorf("escape: the directory outside the prefix now has mode %04o", fi.Mode().Perm())
	}
}
