// Package ui is the controller's web dashboard: a few static files (HTML,
// CSS and plain JavaScript, no build step, nothing fetched from elsewhere)
// embedded in the binary and served under /ui/. The pages hold no data;
// they read it from the controller's API with the token the user signs in
// with, so the API's authentication covers everything they show.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Assets are the dashboard's files (index.html, app.css, app.js).
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		// The directory is embedded above; only a build without it fails.
		panic(err)
	}
	return sub
}

// contentSecurityPolicy lets the pages load only their own files and talk
// only to the API they came from: no inline script, no other origin, no
// framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files under prefix (which ends in "/").
func Handler(prefix string) http.Handler {
	files := http.StripPrefix(prefix, http.FileServerFS(Assets()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// A new binary may bring new files; revalidating costs one
		// conditional request per file.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
