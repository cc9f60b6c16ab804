package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// uiFS holds the web dashboard: plain HTML, CSS and JavaScript, no build
// step and no external resources, so it works offline.
//
//go:embed ui
var uiFS embed.FS

// dashboard serves the page at / and its assets under /ui/. They need no
// token: the page asks for one and sends it with every API call.
func (h *handler) dashboard() error {
	sub, err := fs.Sub(uiFS, "ui")
	if err != nil {
		return err
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		return err
	}
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	h.mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui/" || r.URL.Path[len(r.URL.Path)-1] == '/' {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	return nil
}
