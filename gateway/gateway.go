// Package gateway is outlast as an HTTP proxy: an http.Handler that
// forwards LLM API requests to upstreams with the library's retries, slot
// gate and record, for hosts written in any language. A host points its
// OpenAI, Anthropic or llama.cpp base URL at the gateway.
//
// Requests are forwarded unchanged (method, path, query, headers, body),
// except for hop-by-hop headers (RFC 9110 §7.6.1) and the gateway's own
// Outlast-* request headers, which set the request's deadline, policy, run
// and slot and are removed. The caller sees the last attempt's response
// unchanged, plus the headers Outlast-Request-Id and Outlast-Attempts.
// Errors the gateway makes itself are JSON in the OpenAI error shape, with
// an Outlast-Error header naming their kind.
//
// Paths under /outlast/ are the gateway's own: /outlast/health now, and
// the record's API and page as they land.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
)

// Version is reported by /outlast/health.
var Version = "0.1.0-dev"

// Defaults for the zero values of Config and Upstream.
const (
	DefaultMaxBody          = 32 << 20
	DefaultProgressInterval = 15 * time.Second
	DefaultQueue            = 16
)

// An Upstream is one API the gateway forwards to.
type Upstream struct {
	// Name names the upstream in the record, metrics and health. Empty
	// means the URL's host.
	Name string

	// Prefix is the path prefix of the requests that go to this upstream;
	// it is removed before the request path is joined to URL's path. Empty
	// or "/" matches every path. The longest matching prefix wins.
	Prefix string

	// URL is where requests go. Its path, if any, is a prefix joined to the
	// request's path, as httputil.NewSingleHostReverseProxy does.
	URL *url.URL

	// Policy is the retry policy; a request's Outlast-* headers can change
	// it. Nil means no retries unless a request's headers ask for them.
	Policy *outlast.Policy

	// Slots bounds the requests in flight to this upstream; the rest wait
	// in arrival order, up to Queue. Zero means no bound.
	Slots int

	// Queue bounds the requests waiting for a slot, and for each named
	// slot (Outlast-Slot, or llama.cpp's id_slot). Zero means
	// DefaultQueue; a negative value means nobody may wait.
	Queue int

	// FirstByteTimeout bounds the time from sending an attempt to its first
	// body byte (for an event stream, its first event). An attempt that
	// takes longer is retried. Zero means no bound.
	FirstByteTimeout time.Duration

	// IdleTimeout bounds the silence between two reads of a response body
	// being forwarded. Zero means no bound.
	IdleTimeout time.Duration
}

// Config configures a Gateway.
type Config struct {
	// Upstreams are the APIs to forward to. At least one is needed.
	Upstreams []Upstream

	// MaxBody is the largest request body accepted; a larger one gets 413
	// and is never forwarded. Zero means DefaultMaxBody (32 MiB).
	MaxBody int64

	// Transport sends the attempts. If nil, a clone of
	// http.DefaultTransport is used, with compression passed through
	// untouched and more idle connections per host.
	Transport http.RoundTripper

	// Logger receives a warn line per retry and an info line per request.
	// If nil, slog.Default() is used.
	Logger *slog.Logger

	// ProgressInterval is the longest silence on a request that asked for
	// progress (Outlast-Progress: sse) while it waits. Zero means
	// DefaultProgressInterval (15 s).
	ProgressInterval time.Duration

	// Observer is told of each request's queueing, attempts and end. Use
	// Observers to tell several.
	Observer Observer

	// Redact names request headers, besides the credentials that are
	// always left out (Authorization, Proxy-Authorization, Cookie,
	// X-Api-Key, Api-Key, X-Goog-Api-Key), that Request.Header must not
	// carry to observers and the record.
	Redact []string

	// JournalStats, if not nil, reports the journal's dropped and failed
	// records for /outlast/health.
	JournalStats func() (dropped, failed uint64)

	// Endpoints are served under /outlast/, keyed by the rest of the path:
	// "requests" serves /outlast/requests and, with a trailing slash,
	// "requests/" serves every path below it. The gateway serves
	// /outlast/health itself. Nil means none.
	Endpoints map[string]http.Handler
}

// Observer is told what the gateway does as it does it. Any field may be
// nil. The calls for one request come in order from the goroutine serving
// it; calls for different requests may be concurrent. The *Request is the
// gateway's: read it during the call, and copy what you keep.
type Observer struct {
	Queued       func(r *Request, key string, ahead int)
	AttemptStart func(r *Request, a outlast.Attempt)
	AttemptEnd   func(r *Request, a outlast.Attempt)
	Done         func(r *Request)
}

// Observers returns an Observer that tells each of obs in turn.
func Observers(obs ...Observer) Observer {
	var o Observer
	for _, x := range obs {
		if f := x.Queued; f != nil {
			prev := o.Queued
			o.Queued = func(r *Request, key string, ahead int) { call3(prev, r, key, ahead); f(r, key, ahead) }
		}
		if f := x.AttemptStart; f != nil {
			prev := o.AttemptStart
			o.AttemptStart = func(r *Request, a outlast.Attempt) { call2(prev, r, a); f(r, a) }
		}
		if f := x.AttemptEnd; f != nil {
			prev := o.AttemptEnd
			o.AttemptEnd = func(r *Request, a outlast.Attempt) { call2(prev, r, a); f(r, a) }
		}
		if f := x.Done; f != nil {
			prev := o.Done
			o.Done = func(r *Request) {
				if prev != nil {
					prev(r)
				}
				f(r)
			}
		}
	}
	return o
}

func call2(f func(*Request, outlast.Attempt), r *Request, a outlast.Attempt) {
	if f != nil {
		f(r, a)
	}
}

func call3(f func(*Request, string, int), r *Request, key string, ahead int) {
	if f != nil {
		f(r, key, ahead)
	}
}

// Request is the record of one request through the gateway.
type Request struct {
	ID        string // Outlast-Request-Id, a UUIDv7
	Run       string // Outlast-Run, or ""
	Method    string
	Path      string
	Header    http.Header // the caller's request headers, credentials and Config.Redact left out
	Upstream  string      // the upstream's name
	Slot      string      // the named slot, or ""
	Model     string      // the JSON body's "model", or ""
	Start     time.Time
	End       time.Time
	Status    int    // the status sent to the caller; 499 if the caller left first
	Error     string // the Outlast-Error kind, if the gateway made the response
	Stream    bool   // a streaming request ("stream": true or Accept: text/event-stream)
	Committed bool   // a response byte was forwarded
	Bytes     int64  // response body bytes forwarded
	Attempts  []outlast.Attempt
}

// Gateway is the proxy. It is safe for concurrent use.
type Gateway struct {
	cfg       Config
	logger    *slog.Logger
	upstreams []*upstream // longest prefix first
}

// upstream is an Upstream with the parts the gateway builds for it.
type upstream struct {
	Upstream
	transport *outlast.Transport
	gates     *slotGates
	latency   ewma // attempt durations, for busy responses' Retry-After
}

// New returns a Gateway for cfg, or an error naming the first setting that
// is wrong.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("gateway: no upstreams: give at least one")
	}
	switch {
	case cfg.MaxBody == 0:
		cfg.MaxBody = DefaultMaxBody
	case cfg.MaxBody < 0:
		return nil, fmt.Errorf("gateway: max body %d is negative", cfg.MaxBody)
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	g := &Gateway{cfg: cfg, logger: cfg.Logger}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	base := cfg.Transport
	if base == nil {
		base = defaultTransport()
	}
	seen := map[string]bool{}
	for i, u := range cfg.Upstreams {
		up, err := g.newUpstream(i, u, base)
		if err != nil {
			return nil, err
		}
		if seen[up.Prefix] {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): prefix %q is used twice", i, up.Name, up.Prefix)
		}
		seen[up.Prefix] = true
		g.upstreams = append(g.upstreams, up)
	}
	sort.SliceStable(g.upstreams, func(i, j int) bool { return len(g.upstreams[i].Prefix) > len(g.upstreams[j].Prefix) })
	return g, nil
}

func (g *Gateway) newUpstream(i int, u Upstream, base http.RoundTripper) (*upstream, error) {
	if u.URL == nil || (u.URL.Scheme != "http" && u.URL.Scheme != "https") || u.URL.Host == "" {
		return nil, fmt.Errorf("gateway: upstreams[%d]: url %q is not an absolute http(s) URL", i, urlString(u.URL))
	}
	if u.URL.User != nil {
		// Credentials belong in the caller's headers, which pass through;
		// in the URL they would show in logs and health.
		return nil, fmt.Errorf("gateway: upstreams[%d]: url %q carries credentials: send them as the request's Authorization or x-api-key header", i, u.URL.Redacted())
	}
	if u.Name == "" {
		u.Name = u.URL.Host
	}
	u.Prefix = normalizePrefix(u.Prefix)
	if u.Policy != nil {
		if err := u.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): %w", i, u.Name, err)
		}
	}
	switch {
	case u.Slots < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): slots %d is negative", i, u.Name, u.Slots)
	case u.FirstByteTimeout < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): first-byte timeout %v is negative", i, u.Name, u.FirstByteTimeout)
	case u.IdleTimeout < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): idle timeout %v is negative", i, u.Name, u.IdleTimeout)
	}
	if u.Queue == 0 {
		u.Queue = DefaultQueue
	}
	up := &upstream{Upstream: u, gates: newSlotGates(u.Slots, max(u.Queue, 0))}
	up.transport = &outlast.Transport{
		Base:             base,
		Policy:           u.Policy,
		Gate:             up.gates,
		GateKey:          gateKeyOf,
		Logger:           g.logger,
		FirstByteTimeout: u.FirstByteTimeout,
		MaxBufferedBody:  -1, // the gateway buffers bodies itself, with GetBody
	}
	return up, nil
}

func urlString(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}

// normalizePrefix makes p start with "/" and end without one, except that
// the root is "/".
func normalizePrefix(p string) string {
	p = "/" + strings.Trim(p, "/")
	return p
}

// route returns the upstream for path, and the path to forward.
func (g *Gateway) route(path string) (*upstream, string) {
	for _, u := range g.upstreams {
		if u.Prefix == "/" {
			return u, path
		}
		if rest, ok := strings.CutPrefix(path, u.Prefix); ok && (rest == "" || rest[0] == '/') {
			if rest == "" {
				rest = "/"
			}
			return u, rest
		}
	}
	return nil, ""
}

// ServeHTTP proxies r, or serves the gateway's own endpoints under
// /outlast/.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/outlast" || strings.HasPrefix(r.URL.Path, "/outlast/") {
		g.serveOwn(w, r)
		return
	}
	up, path := g.route(r.URL.Path)
	if up == nil {
		writeError(w, http.StatusNotFound, "not-found", "invalid_request_error", fmt.Sprintf("outlast: no upstream serves the path %q", r.URL.Path))
		return
	}
	x := newExchange(g, up, w, r, path)
	x.serve()
}

func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	// A proxy passes the body's encoding through as it came; transparent
	// decompression would also buffer event streams.
	t.DisableCompression = true
	return t
}

// slotGates is the Gate of one upstream: the upstream's own bound, and one
// slot of capacity 1 per named slot.
type slotGates struct {
	main  *gate.Gate // nil when the upstream has no bound
	named *gate.Gate
}

func newSlotGates(slots, queue int) *slotGates {
	s := &slotGates{named: gate.New(1, queue)}
	if slots > 0 {
		s.main = gate.New(slots, queue)
	}
	return s
}

// Acquire takes the named slot for a key from slotKey, else a slot of the
// upstream's bound, if it has one.
func (s *slotGates) Acquire(ctx context.Context, key string, queued func(ahead int)) (func(), error) {
	if key != "" {
		return s.named.Acquire(ctx, key, queued)
	}
	if s.main == nil {
		return func() {}, nil
	}
	return s.main.Acquire(ctx, "", queued)
}

// load returns the requests in flight and waiting, over the upstream's
// bound and every named slot.
func (s *slotGates) load() (inFlight, waiting int, slots map[string][2]int) {
	if s.main != nil {
		inFlight, waiting = s.main.Load("")
	}
	for _, k := range s.named.Keys() {
		f, w := s.named.Load(k)
		if slots == nil {
			slots = map[string][2]int{}
		}
		slots[k] = [2]int{f, w}
		inFlight += f
		waiting += w
	}
	return inFlight, waiting, slots
}
