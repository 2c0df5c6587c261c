package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
)

// serveOwn serves the gateway's own endpoints under /outlast/.
func (g *Gateway) serveOwn(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/outlast/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "invalid", "invalid_request_error", "outlast: /outlast/health takes GET")
			return
		}
		g.health(w)
	default:
		if h := g.endpoint(strings.TrimPrefix(r.URL.Path, "/outlast/")); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusNotFound, "not-found", "invalid_request_error", "outlast: no such endpoint: "+r.URL.Path)
	}
}

// endpoint returns the handler of Config.Endpoints for rest, the path
// below /outlast/: an exact key, or the longest key ending in "/" that
// prefixes it.
func (g *Gateway) endpoint(rest string) http.Handler {
	if h, ok := g.cfg.Endpoints[rest]; ok {
		return h
	}
	var best string
	for k := range g.cfg.Endpoints {
		if strings.HasSuffix(k, "/") && strings.HasPrefix(rest, k) && len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return nil
	}
	return g.cfg.Endpoints[best]
}

// Health is the body of GET /outlast/health.
type Health struct {
	Version   string           `json:"version"`
	Upstreams []UpstreamHealth `json:"upstreams"`
	Journal   *JournalHealth   `json:"journal,omitempty"`
}

// JournalHealth is the journal's part of Health: the records it dropped
// because its buffer was full, and those it failed to write.
type JournalHealth struct {
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed"`
}

// UpstreamHealth is one upstream's part of Health.
type UpstreamHealth struct {
	Name     string         `json:"name"`
	Prefix   string         `json:"prefix"`
	URL      string         `json:"url"`
	Slots    int            `json:"slots"`
	InFlight int            `json:"in_flight"`
	Queued   int            `json:"queued"`
	Named    map[string]int `json:"named_slots_queued,omitempty"`
}

// Health reports the gateway's upstreams and their load.
func (g *Gateway) Health() Health {
	h := Health{Version: Version, Upstreams: []UpstreamHealth{}}
	for _, u := range g.upstreams {
		inFlight, queued, named := u.gates.load()
		uh := UpstreamHealth{Name: u.Name, Prefix: u.Prefix, URL: u.URL.Redacted(), Slots: u.Slots, InFlight: inFlight, Queued: queued}
		for k, v := range named {
			if uh.Named == nil {
				uh.Named = map[string]int{}
			}
			uh.Named[k] = v[1]
		}
		h.Upstreams = append(h.Upstreams, uh)
	}
	if f := g.cfg.JournalStats; f != nil {
		d, fl := f()
		h.Journal = &JournalHealth{Dropped: d, Failed: fl}
	}
	return h
}

func (g *Gateway) health(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(g.Health())
}
