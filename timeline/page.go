package timeline

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"path"

	"github.com/outlast-llm/outlast"
)

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// assets are the files under /outlast/timeline/, by name, with their
// ETags: a hash of the content, which also busts caches in the page's
// links to them.
var assets = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{"timeline.js", "timeline.css"} {
		b, err := fs.ReadFile(static, "static/"+name)
		if err != nil {
			panic(err) // the embed directive names these files
		}
		sum := sha256.Sum256(b)
		m[name] = hex.EncodeToString(sum[:6])
	}
	return m
}()

// pageData is what the template fills in. The URLs are relative to the
// page, so that it works behind a proxy that moves /outlast/.
type pageData struct {
	Events  string
	Recent  string
	Script  string
	Style   string
	Keep    int
	Version string
}

// securityHeaders keep the page to its own files: it loads nothing from
// elsewhere, and its script sets positions through the DOM, not through
// inline styles.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

func (f *Feed) servePage(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	var buf bytes.Buffer
	err := page.Execute(&buf, pageData{
		Events:  "events",
		Recent:  "recent",
		Script:  "timeline/timeline.js?v=" + assets["timeline.js"],
		Style:   "timeline/timeline.css?v=" + assets["timeline.css"],
		Keep:    f.keep,
		Version: outlast.Version,
	})
	if err != nil {
		http.Error(w, "outlast: the timeline page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(buf.Bytes())
}

func (f *Feed) serveRecent(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(f.Snapshot())
}

// serveAsset serves the page's script and style, and nothing else: no
// listing of the embedded files.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	name := path.Base(r.URL.Path)
	tag, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("ETag", `"`+tag+`"`)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, static, "static/"+name)
}

func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "outlast: "+r.URL.Path+" takes GET", http.StatusMethodNotAllowed)
	return false
}
