package ui_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/controller/ui"
)

// maxUIBytes is the budget for the whole dashboard.
const maxUIBytes = 200 << 10

func TestAssetsFitTheBudget(t *testing.T) {
	total := 0
	err := fs.WalkDir(ui.Assets(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += int(info.Size())
		t.Logf("%-12s %6d bytes", path, info.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard: %d bytes in all (budget %d)", total, maxUIBytes)
	if total == 0 || total > maxUIBytes {
		t.Fatalf("embedded dashboard is %d bytes; it must be between 1 and %d", total, maxUIBytes)
	}
}

// The pages load nothing from elsewhere: no URL with a scheme or a
// protocol-relative one in any asset, and a policy that forbids it anyway.
func TestAssetsAreSelfContained(t *testing.T) {
	srv := httptest.NewServer(ui.Handler("/ui/"))
	defer srv.Close()
	for _, name := range []string{"", "app.js", "app.css"} {
		res, err := http.Get(srv.URL + "/ui/" + name)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("/ui/%s: %d, %d bytes", name, res.StatusCode, len(body))
		}
		for _, bad := range []string{"http://", "https://", `src="//`, `href="//`, "url(//", "url(http"} {
			if strings.Contains(string(body), bad) {
				t.Errorf("/ui/%s refers to another origin (%s)", name, bad)
			}
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("/ui/%s: Content-Security-Policy %q", name, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("/ui/%s: no nosniff", name)
		}
	}
	if !strings.HasPrefix(contentType(t, srv.URL+"/ui/app.js"), "text/javascript") {
		t.Errorf("app.js is not served as JavaScript")
	}
}

func contentType(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.Header.Get("Content-Type")
}
