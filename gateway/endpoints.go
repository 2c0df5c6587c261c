package gateway

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/record"
)

// serveOwn serves the gateway's own endpoints under /outlast/.
func (g *Gateway) serveOwn(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/outlast/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, r, http.StatusMethodNotAllowed, apierr.Method, "outlast: /outlast/health takes GET")
			return
		}
		unread(w, r)
		w.Header().Set("Content-Type", "application/json")
		within(w, errorWriteBound, func() { json.NewEncoder(w).Encode(g.Health()) })
	default:
		if h := g.endpoint(strings.TrimPrefix(r.URL.Path, "/outlast/")); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		writeError(w, r, http.StatusNotFound, apierr.NotFound, "outlast: no such endpoint: "+r.URL.Path)
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
	// Version is outlast's version.
	Version string `json:"version"`
	// Upstreams are the configured upstreams, longest prefix first.
	Upstreams []UpstreamHealth `json:"upstreams"`
	// Journal is the journal's state, or nil when there is none.
	Journal *JournalHealth `json:"journal,omitempty"`
	// Goroutines counts the process's goroutines, for an operator to see
	// that they do not grow.
	Goroutines int `json:"goroutines"`
	// Connections counts the connections Serve holds open now, or is -1
	// when the gateway is served otherwise.
	Connections int64 `json:"connections"`
	// Gate says where the gates are kept.
	Gate GateHealth `json:"gate"`
}

// GateHealth says where a gateway's gates and admission state are kept.
type GateHealth struct {
	// Backend is "process" (this process's own) or "redis" (shared with
	// the gateways that use the same Redis).
	Backend string `json:"backend"`
	// State is "ok", or, for "redis", "degraded" while Redis cannot be
	// reached and this process's own gates and admission stand in.
	State string `json:"state"`
	// Replica names this gateway among those that share the backend.
	Replica string `json:"replica,omitempty"`
}

// JournalHealth is the journal's part of Health.
type JournalHealth struct {
	// Dropped counts the records dropped because the journal's buffer was
	// full.
	Dropped uint64 `json:"dropped"`
	// Failed counts the records the journal could not write.
	Failed uint64 `json:"failed"`
}

// UpstreamHealth is one upstream's part of Health.
type UpstreamHealth struct {
	// Name is the upstream's name.
	Name string `json:"name"`
	// Prefix is the path prefix the upstream serves.
	Prefix string `json:"prefix"`
	// URL is the upstream's URL without its query or user info, which may
	// carry a key.
	URL string `json:"url"`
	// Slots is the bound on requests in flight; 0 means none.
	Slots int `json:"slots"`
	// InFlight counts the requests in flight, named slots included.
	InFlight int `json:"in_flight"`
	// Queued counts the requests waiting, named slots included.
	Queued int `json:"queued"`
	// Named counts the requests waiting for each named slot in use, by
	// gate key ("slot 3").
	Named map[string]int `json:"named_slots_queued,omitempty"`
	// Admission is the upstream's admission state, when it has an
	// admission controller.
	Admission *AdmissionHealth `json:"admission,omitempty"`
	// Pool names the pool the upstream is a member of, for a member;
	// Members names a pool's members, for a pool.
	Pool    string   `json:"pool,omitempty"`
	Members []string `json:"members,omitempty"`
	// Headroom is a pool member's rate limits as its pool counts them
	// now, once its answers have stated them.
	Headroom *HeadroomHealth `json:"headroom,omitempty"`
}

// HeadroomHealth is a pool member's rate limits in /outlast/health:
// each, when its answers have stated it.
type HeadroomHealth struct {
	Requests *QuotaHealth `json:"requests,omitempty"`
	Tokens   *QuotaHealth `json:"tokens,omitempty"`
	// InFlight counts the member's requests sent and not yet answered.
	InFlight int `json:"in_flight"`
	// NotBefore is when a 429's delay lets the member take requests
	// again, while it is ahead.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// QuotaHealth is one rate limit in /outlast/health: the window's limit
// (-1 if not stated), what is left of it now as the pool counts it, and
// when it is whole again, if stated.
type QuotaHealth struct {
	Limit     int64      `json:"limit"`
	Remaining int64      `json:"remaining"`
	Reset     *time.Time `json:"reset,omitempty"`
}

// quotaHealth returns q for health, nil if not known.
func quotaHealth(q outlast.Quota) *QuotaHealth {
	if !q.Known() {
		return nil
	}
	h := &QuotaHealth{Limit: q.Limit, Remaining: q.Remaining}
	if !q.Reset.IsZero() {
		h.Reset = &q.Reset
	}
	return h
}

// AdmissionHealth is an upstream's admission state in /outlast/health.
type AdmissionHealth struct {
	// State is healthy, down, probing or recovering.
	State string `json:"state"`
	// NotBefore is the not-before time a server set, while it is ahead.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// NextProbe is when the next probe may go, while the upstream is down.
	NextProbe *time.Time `json:"next_probe,omitempty"`
	// Limit is the limit of requests in flight in force: MaxLimit while
	// healthy, the growing limit while recovering, and 1, the probe,
	// while down or probing.
	Limit int `json:"limit"`
	// MaxLimit is the limit at which a recovering upstream is healthy
	// again: --slots, or 64 without.
	MaxLimit int `json:"max_limit"`
	// Waiting counts the requests waiting for the upstream to come back.
	Waiting int `json:"waiting"`
}

// admissionHealth returns a's state for health, or nil without one.
func admissionHealth(a *outlast.Admission) *AdmissionHealth {
	if a == nil {
		return nil
	}
	s := a.State("")
	h := &AdmissionHealth{State: s.State.String(), Limit: s.Limit, MaxLimit: s.MaxLimit, Waiting: s.Waiting}
	switch s.State {
	case outlast.Healthy:
		h.Limit = s.MaxLimit
	case outlast.Down, outlast.Probing:
		h.Limit = 1
	}
	if !s.NotBefore.IsZero() {
		h.NotBefore = &s.NotBefore
	}
	if !s.NextProbe.IsZero() {
		h.NextProbe = &s.NextProbe
	}
	return h
}

// Health reports the gateway's upstreams and their load.
func (g *Gateway) Health() Health {
	h := Health{Version: outlast.Version, Upstreams: []UpstreamHealth{}, Goroutines: runtime.NumGoroutine(), Connections: -1,
		Gate: GateHealth{Backend: "process", State: "ok"}}
	if c := g.conns.Load(); c != nil {
		h.Connections = c.open.Load()
	}
	for _, u := range g.all() {
		inFlight, queued, named := u.gates.load()
		uh := UpstreamHealth{
			Name: u.Name, Prefix: u.Prefix, Slots: u.Slots,
			InFlight: inFlight, Queued: queued, Named: named, Admission: admissionHealth(u.Admission),
		}
		if u.URL != nil {
			uh.URL = redact.URL(u.URL)
		}
		for _, m := range u.members {
			uh.Members = append(uh.Members, m.Name)
		}
		if st, ok := u.headroom(); ok {
			uh.Pool = u.in.Name
			hh := &HeadroomHealth{Requests: quotaHealth(st.Requests), Tokens: quotaHealth(st.Tokens), InFlight: st.InFlight}
			if !st.NotBefore.IsZero() {
				hh.NotBefore = &st.NotBefore
			}
			uh.Headroom = hh
		}
		h.Upstreams = append(h.Upstreams, uh)
	}
	if f := g.cfg.JournalStats; f != nil {
		d, fl := f()
		h.Journal = &JournalHealth{Dropped: d, Failed: fl}
	}
	if f := g.cfg.GateHealth; f != nil {
		// After the gates' loads, which may be what finds a shared
		// store gone: the state is then this call's, not the last one's.
		h.Gate = f()
	}
	return h
}

// Loads reports each upstream's gate, in the order of Health, for
// observers that show slots and queues (metrics, the timeline page). It is
// safe to call at any time from any goroutine.
func (g *Gateway) Loads() []record.Load {
	all := g.all()
	loads := make([]record.Load, len(all))
	for i, u := range all {
		inFlight, queued, named := u.gates.load()
		loads[i] = record.Load{Upstream: u.Name, Slots: u.Slots, InFlight: inFlight, Queued: queued, Named: named}
		loads[i].Requests, loads[i].Tokens = outlast.Quota{Limit: -1, Remaining: -1}, outlast.Quota{Limit: -1, Remaining: -1}
		if a := u.Admission; a != nil {
			s := a.State("")
			loads[i].Admission, loads[i].State, loads[i].Limit, loads[i].Waiting = true, s.State, s.Limit, s.Waiting
		}
		if st, ok := u.headroom(); ok {
			loads[i].Pool, loads[i].Requests, loads[i].Tokens = u.in.Name, st.Requests, st.Tokens
		}
	}
	return loads
}
