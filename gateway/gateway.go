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
// Paths under /outlast/ are the gateway's own: /outlast/health, and the
// handlers of Config.Endpoints.
//
// A request goes through the package's files in this order: gateway.go
// routes it, exchange.go carries it from arrival to its last byte,
// headers.go reads its Outlast-* headers and the headers it forwards,
// upstream.go sends it through the upstream's gates, and response.go
// writes what the caller gets.
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
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/record"
)

// Defaults for the zero values of Config and Upstream.
const (
	DefaultMaxBody          = 32 << 20
	DefaultHoldBudget       = 64 << 20
	DefaultBodyTimeout      = 30 * time.Second
	DefaultProgressInterval = 15 * time.Second
	DefaultQueue            = 16
)

// DefaultStatusPaths are the health and status endpoints of the APIs the
// gateway fronts, which Upstream.StatusPaths' nil means: llama.cpp's
// /health and /slots, and the model lists of OpenAI-style servers.
var DefaultStatusPaths = []string{"/health", "/slots", "/v1/models"}

// An Upstream is one API the gateway forwards to.
type Upstream struct {
	// Name names the upstream in the record, metrics and health. Empty
	// means the URL's host.
	Name string

	// Members, if not empty, make this upstream a pool: its requests go
	// to the member that can serve each soonest, by the headroom of its
	// rate limits that its answers' headers report, and wait in arrival
	// order when none can (see outlast.Pool). A pool has no URL, Auth or
	// Admission of its own; its members take its other settings, and
	// Auth, Slots and Models as their defaults. A pool may not have
	// Fallbacks or Hedge, nor be a fallback.
	Members []Member

	// Share, for a pool, if not nil, shares its members' ledgers with the
	// gateways of other processes (see outlast.Pool.Share); outlast serve
	// --redis sets one. Nil means this gateway's own.
	Share outlast.PoolShare

	// Prefix is the path prefix of the requests that go to this upstream;
	// it is removed before the request path is joined to URL's path. Empty
	// or "/" matches every path. The longest matching prefix wins.
	Prefix string

	// URL is where requests go. Its path, if any, is a prefix joined to the
	// request's path, as httputil.NewSingleHostReverseProxy does. Its
	// query, if any, is added to every request's and never shown: not in
	// health, the record or a log line.
	URL *url.URL

	// Policy is the retry policy. A request's Outlast-* headers may only
	// tighten it: fewer attempts, a larger reserve, and each retry's wait
	// no shorter than this policy's before the same retry. Nil means no
	// retries, which no header can add.
	Policy *outlast.Policy

	// Timeout is the deadline, after its arrival, of a request that
	// brings none of its own: no Outlast-Timeout or Outlast-Deadline, and
	// no SDK timeout (X-Stainless-Timeout, which the Anthropic SDKs send,
	// less a tenth of it and at most 5 s). The deadline bounds the
	// attempts and the waits up to the answer's first byte; a response
	// that began in time is forwarded to its end, its silences bounded
	// by IdleTimeout. Zero means none.
	Timeout time.Duration

	// MaxTimeout bounds every deadline: a request's own, the SDK's, and
	// Timeout. Zero means no bound.
	MaxTimeout time.Duration

	// ReserveShare, if above zero, holds the reserve of a request with a
	// deadline to at most this share of the time from its arrival to
	// its deadline, when the request names no reserve of its own
	// (Outlast-Reserve), so that a short deadline still leaves room for
	// retries: at 0.25 a 20 s deadline keeps 5 s, not Policy.Reserve's
	// 60 s. Zero means the policy's reserve alone.
	ReserveShare float64

	// MaxRetryAfter bounds a server's delay, as the Transport's field of
	// the same name does. Zero means outlast.DefaultMaxRetryAfter (5
	// min).
	MaxRetryAfter time.Duration

	// Slots bounds the requests in flight to this upstream; the rest wait
	// in arrival order, up to Queue. Zero means no bound. A request may
	// name one of the slots 0 to Slots-1 (Outlast-Slot, or llama.cpp's
	// id_slot) and then waits for that slot alone, within the bound; any
	// other slot is refused with 400, and with no bound no slot may be
	// named.
	Slots int

	// Admission, if not nil, is the upstream's admission controller:
	// while the upstream is down, one probe goes out and the other
	// requests wait their turn, or get 503 upstream-down at once when
	// the next chance to send comes after their deadline less reserve
	// (see outlast.Admission). It is keyed by the upstream as a whole,
	// named slots included. Give each upstream, and each Gateway, its
	// own: New sets its OnState to log each change and tell the
	// Observer, after calling the OnState it had. outlast serve sets one
	// unless --admission=false. Nil means none.
	Admission *outlast.Admission

	// Queue bounds the requests waiting for a slot, and for each named
	// slot. Zero means DefaultQueue; a negative value means nobody may
	// wait.
	Queue int

	// FirstByteTimeout bounds the time from sending an attempt to its first
	// body byte (for an event stream, its first event that carries the
	// answer, past the events before it and any keep-alive comments). An
	// attempt that takes longer is retried. Zero means no bound.
	FirstByteTimeout time.Duration

	// Hedge, with Fallbacks, hedges a stream that has sent none of its
	// answer after a delay: the same request also goes to the first
	// fallback, the first to send content wins, and the other is
	// cancelled. The delay is learned per model, the 95th percentile of
	// the upstream's recent times to first content (at least 1 s), and
	// DefaultHedgeDelay (10 s) until 32 are known; at most about one
	// stream in twenty is hedged (a budget that each stream adds a
	// twentieth of a hedge to, and a hedge takes one from), so that a
	// model that always thinks long does not double its cost. A request
	// from an outer outlast layer, or with Outlast-Retry: off, is not
	// hedged. False means no hedging.
	Hedge bool

	// Continuation says what becomes of a stream from this upstream that
	// breaks after its first byte reached the caller, before its last
	// event: ContinueOff (the zero value) ends it with an error event;
	// ContinuePrefill continues it with a prefill, and ContinueResume
	// resumes a Responses API stream (see Continuation). New refuses
	// ContinuePrefill for api.openai.com and Azure OpenAI. A fallback
	// takes a prefill's continuation only if it continues streams too; a
	// resumption goes only to the upstream that holds the response.
	Continuation Continuation

	// StreamHeaderTimeout bounds the time from sending a streaming
	// request's attempt to its response headers, which a server sends
	// when it takes the request, before it generates: an attempt that
	// gets none in time is retried, so that a silent server is given up
	// on in seconds while a model that thinks before its first token
	// still has FirstByteTimeout. A request streams when its JSON body
	// says "stream": true or it accepts text/event-stream; a non-stream
	// answer's headers come with its body, so it has no such bound. Zero
	// means none of its own.
	StreamHeaderTimeout time.Duration

	// IdleTimeout bounds the silence between two reads of a response body
	// being forwarded. Zero means no bound.
	IdleTimeout time.Duration

	// Fallbacks name the upstreams, by Name, that a request for this one
	// moves to, in order, when this one cannot serve it within its
	// deadline less its reserve (outlast.Fallback says when): down with
	// its next chance too late, its attempts spent on retryable
	// failures, or its queue full. Only before the commit point, and
	// never for a failure that is not retryable. Each must speak this
	// upstream's API: the gateway does not translate between APIs. A
	// fallback's own Fallbacks are not followed. Nil means none.
	Fallbacks []string

	// Prefer says when a request leaves this upstream for its
	// Fallbacks: outlast.PreferAvailable (the zero value) moves on as
	// soon as its Admission holds it down, unless the request can be its
	// probe, and after outlast.DefaultFallbackAttempts failed attempts
	// of the request's own; outlast.PreferPrimary waits while the
	// upstream's next chance still fits the request's deadline less its
	// reserve, and retries as the policy allows.
	Prefer outlast.Preference

	// Models rewrites the body's "model" for this upstream, as when a
	// request for "gpt-4o" falls back to an Azure deployment of another
	// name. A model not in the map is sent as it is. Nil means none.
	Models map[string]string

	// Auth, if not nil, is the credential the gateway holds for this
	// upstream: it is sent instead of the caller's (every header that
	// carries credentials is removed: Authorization, x-api-key, api-key,
	// x-goog-api-key, Cookie and the like). It never reaches a log, the
	// record, metrics, health or an error body.
	Auth *Credential

	// StatusPaths are the upstream's health and status endpoints. A GET
	// or HEAD request for one is forwarded once, outside the gate, and
	// kept out of the record: a host polls them to learn the server's
	// state, and retries or a place in the queue would hide the answer it
	// polls for, such as llama.cpp's "loading" 503. A path matches itself
	// and the paths below it, once Prefix is removed. Nil means
	// DefaultStatusPaths; an empty list means none.
	StatusPaths []string
}

// A Member is one member of a pool (Upstream.Members): an API key, a
// deployment or a server of the pool's model. It is an upstream of its
// own in the record, health and metrics, with its own gates and
// admission state.
type Member struct {
	// Name names the member in the record, metrics and health; it must
	// differ from every other upstream's and member's. Empty means the
	// URL's host.
	Name string

	// URL is where the member's requests go, as Upstream.URL.
	URL *url.URL

	// Auth, if not nil, is the credential the gateway holds for the
	// member, as Upstream.Auth. Nil means the pool's.
	Auth *Credential

	// Weight shares the requests among members with the same headroom: a
	// member of weight 2 takes twice those of one of weight 1. Zero
	// means 1.
	Weight int

	// Slots bounds the member's requests in flight, as Upstream.Slots.
	// Zero means the pool's.
	Slots int

	// Models renames the body's model for the member, as
	// Upstream.Models. Nil means the pool's.
	Models map[string]string

	// Admission, if not nil, is the member's admission controller, as
	// Upstream.Admission: give each member its own.
	Admission *outlast.Admission
}

// Config is what New needs to make a Gateway: its upstreams, and the
// observers, logger and endpoints it reports to.
type Config struct {
	// Upstreams are the APIs to forward to. At least one is needed.
	Upstreams []Upstream

	// MaxBody is the largest request body accepted; a larger one gets 413
	// and is never forwarded. Zero means DefaultMaxBody (32 MiB). The
	// body is read into memory as it arrives, never ahead of its bytes.
	// It also bounds an answer held whole before its commit (see
	// HoldBudget): a longer one goes as it comes.
	MaxBody int64

	// HoldBudget bounds the bytes of the answers held in memory before
	// their commit, across all the gateway's requests. An answer that is
	// not a stream is read whole, up to MaxBody, before its first byte
	// goes to the caller, so that a body cut short is retried rather than
	// forwarded; one that the budget has no room for goes as it comes, as
	// one over MaxBody does, and its record says so (record.Request.Held).
	// No request waits for room. Zero means DefaultHoldBudget (64 MiB).
	HoldBudget int64

	// BodyTimeout bounds the silence between two reads of a request's
	// body, and before the first; under Serve, whose http.Server has it
	// as its ReadTimeout, the first read's bound runs from the request's
	// start. A body that falls silent longer gets 408, and its connection
	// is closed. Zero means DefaultBodyTimeout (30 s); a negative value
	// means no bound.
	BodyTimeout time.Duration

	// Token, if set, must come with every request, /outlast/ included,
	// in the Outlast-Token header (for /outlast/, also as the password of
	// HTTP Basic authentication, as a browser sends it); a request
	// without it gets 401 and nothing is forwarded. It is compared in
	// constant time, and never forwarded.
	Token string

	// Transport sends the attempts. If nil, a clone of
	// http.DefaultTransport is used, with compression passed through
	// untouched and more idle connections per host.
	Transport http.RoundTripper

	// Logger receives a warn line per retry and an info line per request
	// (see RequestLine).
	// If nil, slog.Default() is used.
	Logger *slog.Logger

	// ProgressInterval is the longest silence on a request that asked for
	// progress (Outlast-Progress: sse) while it waits. Zero means
	// DefaultProgressInterval (15 s).
	ProgressInterval time.Duration

	// Observer is told of each request's queueing, attempts and end. Use
	// record.Observers to tell several.
	Observer record.Observer

	// Redact names request headers, besides the credentials that are
	// always left out (Authorization, Cookie, X-Api-Key and the like),
	// that the record's Request.Header must not carry to observers.
	Redact []string

	// JournalStats, if not nil, reports the journal's dropped and failed
	// records for /outlast/health.
	JournalStats func() (dropped, failed uint64)

	// Endpoints are served under /outlast/, keyed by the rest of the path:
	// "requests" serves /outlast/requests and, with a trailing slash,
	// "requests/" serves every path below it. The gateway serves
	// /outlast/health itself. Nil means none.
	Endpoints map[string]http.Handler

	// Gates, if not nil, makes each upstream's gates in place of
	// package gate's: its bound (slot false, capacity Slots) and its
	// named slots (slot true, capacity 1 per key), each with Queue as
	// its queue's bound. outlast serve --redis shares them between the
	// gateways that use one Redis (package redisgate). Nil means
	// gate.New, one process's.
	Gates func(upstream string, slot bool, capacity, queue int) Gate

	// GateHealth, if not nil, reports where the gates are kept, for
	// /outlast/health: see GateHealth.
	GateHealth func() GateHealth
}

// A Gate is an upstream's gate, as Config.Gates makes it: an outlast.Gate
// that reports its load, for health and metrics. *gate.Gate is one.
type Gate interface {
	outlast.Gate
	// Load returns the requests holding one of key's slots and those
	// waiting for one.
	Load(key string) (inFlight, waiting int)
	// Keys returns the keys with requests in flight or waiting.
	Keys() []string
}

// Gateway is the proxy: an http.Handler that forwards LLM API requests to
// its upstreams, retrying, gating and recording each one. It is safe for
// concurrent use.
type Gateway struct {
	cfg       Config
	logger    *slog.Logger
	upstreams []*upstream               // longest prefix first
	token     *token                    // nil when Config.Token is empty
	live      liveSet                   // the exchanges in flight, for Serve's shutdown
	held      *holdBudget               // the answers held before their commit, which every upstream's wholeBodies share
	conns     atomic.Pointer[connLimit] // Serve's listener, for health
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
	switch {
	case cfg.HoldBudget == 0:
		cfg.HoldBudget = DefaultHoldBudget
	case cfg.HoldBudget < 0:
		return nil, fmt.Errorf("gateway: hold budget %d is negative", cfg.HoldBudget)
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	g := &Gateway{cfg: cfg, logger: cfg.Logger, held: &holdBudget{max: cfg.HoldBudget}}
	if cfg.Token != "" {
		g.token = newToken(cfg.Token)
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	base := cfg.Transport
	if base == nil {
		base = defaultTransport()
	}
	base = wholeBodies{base: base, max: cfg.MaxBody, budget: g.held}
	seen := map[string]bool{}
	for i, u := range cfg.Upstreams {
		var up *upstream
		var err error
		if len(u.Members) > 0 {
			up, err = newPool(i, u, base, g.logger, cfg.Gates)
		} else {
			up, err = newUpstream(i, u, base, g.logger, cfg.Gates)
		}
		if err != nil {
			return nil, err
		}
		if seen[up.Prefix] {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): prefix %q is used twice", i, up.Name, up.Prefix)
		}
		seen[up.Prefix] = true
		g.upstreams = append(g.upstreams, up)
		g.watch(up)
		for _, m := range up.members {
			g.watch(m)
		}
	}
	if err := checkNames(g.upstreams); err != nil {
		return nil, err
	}
	if err := resolveFallbacks(g.upstreams); err != nil {
		return nil, err
	}
	sort.SliceStable(g.upstreams, func(i, j int) bool { return len(g.upstreams[i].Prefix) > len(g.upstreams[j].Prefix) })
	return g, nil
}

// ServeHTTP proxies r, or serves the gateway's own endpoints under
// /outlast/.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.TransferEncoding) > 0 {
		// RFC 9112 §6.1: a request with both Transfer-Encoding and
		// Content-Length may be read differently by the next hop, so its
		// connection is closed after the answer. net/http drops the
		// Content-Length before the handler sees it, so every chunked
		// request's connection is closed: SDKs send Content-Length.
		w.Header().Set("Connection", "close")
	}
	own := r.URL.Path == "/outlast" || strings.HasPrefix(r.URL.Path, "/outlast/")
	if g.token != nil && !g.admits(r, own) {
		if own {
			// A browser asks for the token, as a password, and sends it
			// with the page's own requests.
			w.Header().Set("WWW-Authenticate", `Basic realm="outlast", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Outlast-Token realm="outlast"`)
		}
		writeError(w, r, http.StatusUnauthorized, apierr.Token, "outlast: this gateway needs its token in the "+HeaderToken+" header")
		return
	}
	if r.Method == http.MethodConnect {
		// A proxy that tunnels is an open one: the gateway only forwards,
		// and only to its upstreams.
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		writeError(w, r, http.StatusMethodNotAllowed, apierr.Method, "outlast: CONNECT is not forwarded: the gateway is not a tunnel")
		return
	}
	if own {
		g.serveOwn(w, r)
		return
	}
	resolved, err := resolvePath(r.URL.EscapedPath())
	if err != nil {
		writeError(w, r, http.StatusBadRequest, apierr.Invalid, err.Error())
		return
	}
	up, path := g.route(resolved)
	switch {
	case up == nil:
		writeError(w, r, http.StatusNotFound, apierr.NotFound, fmt.Sprintf("outlast: no upstream serves the path %q", keptText(resolved, maxPathLen)))
	case up.isStatus(r.Method, path):
		up.passThrough(w, r, path)
	default:
		x := newExchange(g, up, w, r, resolved, path)
		x.serve()
		if x.out.abandoned {
			abandon(w)
		}
	}
}

// admits reports whether r presents the gateway's token: in Outlast-Token,
// or, for the gateway's own endpoints (own), which are never forwarded, as
// the password of HTTP Basic authentication, which is how a browser sends
// it to the timeline page.
func (g *Gateway) admits(r *http.Request, own bool) bool {
	if g.token.admits(header(r.Header, HeaderToken)) {
		return true
	}
	if _, password, ok := r.BasicAuth(); ok && own {
		return g.token.admits(password)
	}
	return false
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

// watch logs the changes of up's admission state and tells the observer.
func (g *Gateway) watch(up *upstream) {
	a := up.Admission
	if a == nil {
		return
	}
	prev, name := a.OnState, up.Name
	a.OnState = func(key string, from, to outlast.UpstreamState, at time.Time) {
		if prev != nil {
			prev(key, from, to, at)
		}
		level := slog.LevelInfo
		if to == outlast.Down && from != outlast.Probing {
			level = slog.LevelWarn // the upstream has just gone down
		}
		g.logger.Log(context.Background(), level, "outlast: upstream state", "upstream", name, "from", from.String(), "to", to.String())
		if o := g.cfg.Observer.UpstreamState; o != nil {
			o(record.StateChange{Upstream: name, At: at, From: from, To: to})
		}
	}
}
