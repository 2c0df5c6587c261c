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

// firstRows is how many of the newest requests the page's HTML carries
// for its first paint: as many as the page draws, of the requests that
// its filters match. The others come with the event stream's snapshot,
// which replaces these; the filters need them.
const firstRows = 200

// pageData is what the template fills in. The URLs are relative to the
// page, so that it works behind a proxy that moves /outlast/.
type pageData struct {
	Events  string
	Recent  string
	Script  string
	Style   string
	Keep    int
	Rows    int // the rows the page draws at most
	Version string
	// First is what the page draws before its event stream delivers.
	First Snapshot
}

// securityHeaders keep the page to its own files: it loads nothing from
// elsewhere, and its script sets positions through the DOM, not through
// inline styles.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// servePage serves the page with the newest requests in it, as JSON in a
// <script type="application/json"> element, which the page's script
// draws as it starts: the first paint shows them, whether or not the
// event stream, which a proxy may buffer, has delivered. This paints
// sooner than fetching GET /outlast/recent from the script, which waits
// for the script and then a round trip, and it keeps the CSP strict: a
// browser does not run a script element of a data type, so script-src
// 'self' holds. Rows drawn as HTML would paint sooner still, before the
// script, but their bars' places are inline styles, which style-src
// 'self' refuses. html/template writes the JSON escaped for the element:
// no "</script>" in a request's path can end it.
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
		Rows:    firstRows,
		Version: outlast.Version,
		First:   f.newest(firstRows),
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
