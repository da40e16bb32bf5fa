package file

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	b, err := New(Options{AllowedPrefixes: []string{dir}, MaxReadBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	r := backends.NewRegistry().MustRegister(b)
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("s"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(dir, "link")))
	must(t, os.WriteFile(filepath.Join(dir, "small"), []byte("a=1\n"), 0o640))
	must(t, os.WriteFile(filepath.Join(dir, "big"), []byte("123456789"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "bin"), []byte{0, 1, 2, 0xff}, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "seven"), []byte("1234567"), 0o644))
	for _, tc := range []struct {
		name, path, encoding, out, err string
	}{
		{"text", "small", "", "a=1\n", ""},
		{"base64", "bin", "base64", "AAEC/w==", ""},
		{"too big", "big", "", "", "more than the 8 read returns"},
		{"seven bytes fit as text", "seven", "", "1234567", ""},
		{"base64 limit is the encoded size", "seven", "base64", "", "more than the 6 read returns"},
		{"symlink out of the prefix", "link", "", "", ErrOutside.Error()},
		{"missing", "nope", "", "", "no such file"},
		{"directory", ".", "", "", "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := api.Params{"path": filepath.Join(dir, tc.path)}
			if tc.encoding != "" {
				p["encoding"] = tc.encoding
			}
			res, err := run(t, r, "read", false, p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != tc.out || res.Changed {
				t.Errorf("output %q changed %v, want %q", res.Output, res.Changed, tc.out)
			}
			data, _ := os.ReadFile(filepath.Join(dir, tc.path))
			if res.Facts["sha256"] != sum(string(data)) || res.Facts["size"] != len(data) {
				t.Errorf("facts = %v", res.Facts)
			}
		})
	}
	if res, err := run(t, r, "read", false, api.Params{"path": filepath.Join(dir, "small")}); err != nil || res.Facts["mode"] != "0640" {
		t.Errorf("mode fact: %v %v", res, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// editCase is one step of a line or block sequence run against one file:
// check mode first (which must report the same change and leave the file
// alone), then for real, then again (no change the second time).
type editCase struct {
	name    string
	params  api.Params
	before  string // "" with missing: no file
	missing bool
	after   string
	changed bool
	err     string
}

func runEdits(t *testing.T, action string, cases []editCase) {
	r, dir := newBackend(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "f"+string(rune('a'+i)))
			if !tc.missing {
				must(t, os.WriteFile(p, []byte(tc.before), 0o640))
			}
			params := api.Params{"path": p}
			for k, v := range tc.params {
				params[k] = v
			}
			res, err := run(t, r, action, true, params)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed != tc.changed {
				t.Errorf("check mode: changed = %v, want %v", res.Changed, tc.changed)
			}
			if tc.changed && !strings.Contains(res.Output, "--- "+p+"\n+++ "+p+"\n@@") {
				t.Errorf("check mode output has no diff: %q", res.Output)
			}
			got, err := os.ReadFile(p)
			if tc.missing != errors.Is(err, os.ErrNotExist) || string(got) != tc.before {
				t.Fatalf("check mode changed the file: %q, %v", got, err)
			}
			res, err = run(t, r, action, false, params)
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed != tc.changed {
				t.Errorf("changed = %v, want %v", res.Changed, tc.changed)
			}
			got, _ = os.ReadFile(p)
			if string(got) != tc.after {
				t.Errorf("file =\n%q\nwant\n%q", got, tc.after)
			}
			if fi, err := os.Stat(p); err == nil && !tc.missing && fi.Mode().Perm() != 0o640 {
				t.Errorf("mode = %o, want the file's own 0640 kept", fi.Mode().Perm())
			}
			res, err = run(t, r, action, false, params)
			if err != nil || res.Changed {
				t.Errorf("second run: changed %v, err %v", res != nil && res.Changed, err)
			}
		})
	}
}

func TestLine(t *testing.T) {
	conf := "# sshd\nPort 22\n#PermitRootLogin yes\nUsePAM yes\n"
	runEdits(t, "line", []editCase{
		{name: "replace last match", params: api.Params{"regexp": `^#?PermitRootLogin`, "line": "PermitRootLogin no"},
			before: conf, after: "# sshd\nPort 22\nPermitRootLogin no\nUsePAM yes\n", changed: true},
		{name: "already there", params: api.Params{"regexp": `^Port `, "line": "Port 22"}, before: conf, after: conf},
		{name: "exact line already there, no regexp", params: api.Params{"line": "UsePAM yes"}, before: conf, after: conf},
		{name: "append", params: api.Params{"line": "X11Forwarding no"}, before: conf, after: conf + "X11Forwarding no\n", changed: true},
		{name: "append to a file without final newline", params: api.Params{"line": "b"}, before: "a", after: "a\nb\n", changed: true},
		{name: "insert after", params: api.Params{"line": "Port 2222", "insert_after": `^Port `}, before: conf,
			after: "# sshd\nPort 22\nPort 2222\n#PermitRootLogin yes\nUsePAM yes\n", changed: true},
		{name: "insert after nothing matching goes at the end", params: api.Params{"line": "z", "insert_after": `^nomatch`}, before: "a\n", after: "a\nz\n", changed: true},
		{name: "absent by regexp removes every match", params: api.Params{"state": "absent", "regexp": `^#`}, before: conf, after: "Port 22\nUsePAM yes\n", changed: true},
		{name: "absent by line", params: api.Params{"state": "absent", "line": "Port 22"}, before: conf, after: "# sshd\n#PermitRootLogin yes\nUsePAM yes\n", changed: true},
		{name: "absent, nothing matches", params: api.Params{"state": "absent", "regexp": `^Nope`}, before: conf, after: conf},
		{name: "absent on a missing file", params: api.Params{"state": "absent", "line": "x"}, missing: true},
		{name: "missing file without create", params: api.Params{"line": "x"}, missing: true, err: "set create=true"},
		{name: "bad regexp", params: api.Params{"line": "x", "regexp": "("}, before: conf, err: "error parsing regexp"},
		{name: "present without line", params: api.Params{"regexp": "x"}, before: conf, err: "needs line"},
		{name: "absent without regexp or line", params: api.Params{"state": "absent"}, before: conf, err: "needs regexp or line"},
	})
}

func TestLineCreate(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "new.conf")
	res, err := run(t, r, "line", false, api.Params{"path": p, "line": "a=1", "create": "true", "mode": "0600"})
	if err != nil || !res.Changed {
		t.Fatalf("create: %v %v", res, err)
	}
	got, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(got) != "a=1\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("created %q mode %o", got, fi.Mode().Perm())
	}
}

func TestBlock(t *testing.T) {
	base := "a\nb\n"
	blk := "# BEGIN GRID MANAGED BLOCK\nx=1\ny=2\n# END GRID MANAGED BLOCK\n"
	runEdits(t, "block", []editCase{
		{name: "add", params: api.Params{"block": "x=1\ny=2"}, before: base, after: base + blk, changed: true},
		{name: "same", params: api.Params{"block": "x=1\ny=2\n"}, before: base + blk, after: base + blk},
		{name: "replace content", params: api.Params{"block": "x=3"}, before: "a\n" + blk + "b\n",
			after: "a\n# BEGIN GRID MANAGED BLOCK\nx=3\n# END GRID MANAGED BLOCK\nb\n", changed: true},
		{name: "remove", params: api.Params{"state": "absent"}, before: "a\n" + blk + "b\n", after: base, changed: true},
		{name: "remove absent", params: api.Params{"state": "absent"}, before: base, after: base},
		{name: "own marker leaves the other block alone", params: api.Params{"block": "k", "marker": "// {mark} app"}, before: base + blk,
			after: base + blk + "// BEGIN app\nk\n// END app\n", changed: true},
		{name: "begin without end", params: api.Params{"block": "k"}, before: "# BEGIN GRID MANAGED BLOCK\nx\n", err: "no \"# END GRID MANAGED BLOCK\""},
	})
}

// tlsServer serves content over https and counts requests; the backend
// trusts its certificate through Options.HTTPClient.
func tlsServer(t *testing.T, content string) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/f":
			_, _ = w.Write([]byte(content))
		case "/to-http":
			http.Redirect(w, r, "http://"+r.Host+"/f", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestCopy(t *testing.T) {
	content := "binary-ish payload\n"
	srv, hits := tlsServer(t, content)
	dir := t.TempDir()
	b, err := New(Options{AllowedPrefixes: []string{dir}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	r := backends.NewRegistry().MustRegister(b)
	p := filepath.Join(dir, "payload")
	good := sum(content)
	params := func(extra ...string) api.Params {
		ps := api.Params{"path": p, "url": srv.URL + "/f", "sha256": good}
		for i := 0; i+1 < len(extra); i += 2 {
			ps[extra[i]] = extra[i+1]
		}
		return ps
	}

	// A wrong checksum writes nothing, and leaves an existing file alone.
	must(t, os.WriteFile(p, []byte("old"), 0o644))
	if _, err := run(t, r, "copy", false, params("sha256", sum("other"))); err == nil || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("wrong sha256: %v", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("file after a refused download: %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a temp file was left behind: %v", ents)
	}
	// Too large for max_bytes.
	if _, err := run(t, r, "copy", false, params("max_bytes", "5")); err == nil || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("max_bytes: %v", err)
	}
	// Check mode downloads nothing and changes nothing.
	n := hits.Load()
	res, err := run(t, r, "copy", true, params())
	if err != nil || !res.Changed || hits.Load() != n {
		t.Fatalf("check mode: %v %v (requests %d → %d)", res, err, n, hits.Load())
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("check mode wrote %q", got)
	}
	res, err = run(t, r, "copy", false, params("mode", "0600"))
	if err != nil || !res.Changed {
		t.Fatalf("copy: %v %v", res, err)
	}
	got, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(got) != content || fi.Mode().Perm() != 0o600 {
		t.Errorf("file %q mode %o", got, fi.Mode().Perm())
	}
	// Second run: no change and no download.
	n = hits.Load()
	res, err = run(t, r, "copy", false, params("mode", "0600"))
	if err != nil || res.Changed || hits.Load() != n {
		t.Errorf("second run: %v %v (requests %d → %d)", res, err, n, hits.Load())
	}
	// Mode only: set without a download.
	res, err = run(t, r, "copy", false, params("mode", "0644"))
	fi, _ = os.Stat(p)
	if err != nil || !res.Changed || hits.Load() != n || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode change: %v %v mode %o", res, err, fi.Mode().Perm())
	}
	// A redirect off https is refused; http URLs fail the schema.
	if _, err := run(t, r, "copy", false, params("url", srv.URL+"/to-http", "path", p+"2")); err == nil || !strings.Contains(err.Error(), "https only") {
		t.Errorf("redirect to http: %v", err)
	}
	if _, err := run(t, r, "copy", false, params("url", "http://example.com/f")); !errors.Is(err, backends.ErrInvalidParams) {
		t.Errorf("http URL: %v", err)
	}
	if _, err := run(t, r, "copy", false, params("url", srv.URL+"/missing", "path", p+"3")); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
	// Outside the prefixes, nothing is fetched.
	n = hits.Load()
	if _, err := run(t, r, "copy", false, params("path", filepath.Join(t.TempDir(), "x"))); !errors.Is(err, ErrOutside) || hits.Load() != n {
		t.Errorf("outside: %v", err)
	}
}

// Cancelling a copy stops the download and leaves no file.
func TestCopyCancel(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	dir := t.TempDir()
	b, err := New(Options{AllowedPrefixes: []string{dir}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	r := backends.NewRegistry().MustRegister(b)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	h := sha256.Sum256(nil)
	_, err = r.Run(ctx, "file", &backends.Request{Action: "copy", Params: api.Params{"path": filepath.Join(dir, "f"), "url": srv.URL, "sha256": hex.EncodeToString(h[:])}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// write in check mode shows the diff of text content, and none for
// binary data.
func TestWriteCheckDiff(t *testing.T) {
	r, dir := newBackend(t)
	p := filepath.Join(dir, "app.conf")
	must(t, os.WriteFile(p, []byte("a=1\nb=2\n"), 0o644))
	res, err := run(t, r, "write", true, api.Params{"path": p, "content": "a=1\nb=3\n"})
	if err != nil {
		t.Fatal(err)
	}
	want := "--- " + p + "\n+++ " + p + "\n@@ -1,2 +1,2 @@\n a=1\n-b=2\n+b=3\n"
	if !res.Changed || res.Facts["diff"] != want || !strings.HasSuffix(res.Output, want) {
		t.Errorf("check mode: %q facts %v, want the diff %q", res.Output, res.Facts, want)
	}
	if got, _ := os.ReadFile(p); string(got) != "a=1\nb=2\n" {
		t.Errorf("check mode wrote %q", got)
	}
	res, err = run(t, r, "write", true, api.Params{"path": p, "content": "AAEC/w==", "encoding": "base64"})
	if err != nil || !res.Changed || res.Facts["diff"] != nil {
		t.Errorf("binary check mode: %v %v", res, err)
	}
}
