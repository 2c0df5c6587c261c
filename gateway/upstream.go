package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/redact"
)

// upstream is an Upstream with the parts the gateway builds for it: the
// Transports that retry its attempts, and the gates they pass.
type upstream struct {
	Upstream
	transport *outlast.Transport // for a request that does not stream
	stream    *outlast.Transport // for one that does: transport, with StreamHeaderTimeout
	gates     *slotGates
	latency   ewma         // attempt durations, for busy responses' Retry-After
	carry     Continuation // Continuation in force: ContinueAuto made prefill or off
	prefills  refusals     // the models that refused a prefill (ContinuePrefill)
	replays   refusals     // the models whose replay differed from the answer (ContinuePrefill)
	hedging   hedging      // its learned hedge delays and budget (Hedge)
	// models is Models with each new name as its JSON string, made once
	// rather than for each request; nil without Models.
	models map[string][]byte
	// chain is this upstream and its Fallbacks, in order, and their
	// Transports, for requests that do not stream and for those that do;
	// nil without Fallbacks.
	chain      []*upstream
	transports []*outlast.Transport
	streams    []*outlast.Transport
	// A pool's members, and the outlast.Pool over their Transports, for
	// requests that do not stream and for those that do, which share
	// their ledgers; nil for an upstream that is not a pool.
	members    []*upstream
	pool       *outlast.Pool
	streamPool *outlast.Pool
	in         *upstream // the pool a member is in; nil for any other
}

// resolveFallbacks finds each upstream's Fallbacks by name, in ups in
// the order of Config.Upstreams.
func resolveFallbacks(ups []*upstream) error {
	if !slices.ContainsFunc(ups, func(u *upstream) bool { return len(u.Fallbacks) > 0 }) {
		return nil
	}
	byName := map[string]*upstream{}
	for _, u := range ups {
		if byName[u.Name] != nil {
			return fmt.Errorf("gateway: upstream name %q is used twice, and fallbacks name upstreams: give each its own name", u.Name)
		}
		byName[u.Name] = u
	}
	for _, u := range ups {
		if len(u.Fallbacks) == 0 {
			continue
		}
		u.chain, u.transports, u.streams = []*upstream{u}, []*outlast.Transport{u.transport}, []*outlast.Transport{u.stream}
		for _, name := range u.Fallbacks {
			f := byName[name]
			switch {
			case f == nil:
				return fmt.Errorf("gateway: upstream %s: fallback %q names no upstream: give the name of another upstream", u.Name, name)
			case f.pool != nil:
				return fmt.Errorf("gateway: upstream %s: fallback %q is a pool: a pool is no fallback; give it as its own route", u.Name, name)
			case f == u:
				return fmt.Errorf("gateway: upstream %s: fallback %q is the upstream itself", u.Name, name)
			case slices.Contains(u.chain, f):
				return fmt.Errorf("gateway: upstream %s: fallback %q is named twice", u.Name, name)
			}
			u.chain, u.transports, u.streams = append(u.chain, f), append(u.transports, f.transport), append(u.streams, f.stream)
		}
	}
	return nil
}

// newUpstream checks u, the i-th of Config.Upstreams, fills in its
// defaults, and builds its Transport over base.
func newUpstream(i int, u Upstream, base http.RoundTripper, logger *slog.Logger, gates func(string, bool, int, int) Gate) (*upstream, error) {
	if u.URL == nil || (u.URL.Scheme != "http" && u.URL.Scheme != "https") || u.URL.Host == "" {
		return nil, fmt.Errorf("gateway: upstreams[%d]: url %q is not an absolute http(s) URL", i, redact.URL(u.URL))
	}
	if u.URL.User != nil {
		// Credentials belong in the caller's headers, which pass through;
		// in the URL they would show in logs and health.
		return nil, fmt.Errorf("gateway: upstreams[%d]: url %q carries credentials: send them as the request's Authorization or x-api-key header", i, redact.URL(u.URL))
	}
	if u.Name == "" {
		u.Name = u.URL.Host
	}
	u.Prefix = "/" + strings.Trim(u.Prefix, "/")
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
	case u.MaxTimeout < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): max timeout %v is negative", i, u.Name, u.MaxTimeout)
	case u.Timeout < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): timeout %v is negative", i, u.Name, u.Timeout)
	case u.StreamHeaderTimeout < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): stream header timeout %v is negative", i, u.Name, u.StreamHeaderTimeout)
	case !(u.ReserveShare >= 0 && u.ReserveShare <= 1):
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): reserve share %v is outside [0, 1]", i, u.Name, u.ReserveShare)
	}
	carry, err := checkContinuation(u.Continuation, u.URL)
	if err != nil {
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): %w", i, u.Name, err)
	}
	if u.Queue == 0 {
		u.Queue = DefaultQueue
	}
	if u.StatusPaths == nil {
		u.StatusPaths = DefaultStatusPaths
	}
	for _, p := range u.StatusPaths {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): status path %q does not start with /", i, u.Name, p)
		}
	}
	up := &upstream{Upstream: u, carry: carry, gates: newSlotGates(u.Name, u.Slots, max(u.Queue, 0), gates)}
	up.hedging.shares = hedgeEvery // the first hedge, before any stream has earned it
	for from, to := range u.Models {
		if up.models == nil {
			up.models = make(map[string][]byte, len(u.Models))
		}
		up.models[from], _ = json.Marshal(to) // a string always marshals
	}
	up.transport = &outlast.Transport{
		Name:             u.Name,
		Base:             base,
		Policy:           u.Policy,
		GateKey:          slotOf,
		Admission:        u.Admission,
		AdmissionKey:     wholeUpstream,
		Logger:           logger,
		FirstByteTimeout: u.FirstByteTimeout,
		MaxRetryAfter:    u.MaxRetryAfter,
		MaxBufferedBody:  -1, // the gateway buffers bodies itself, with GetBody
	}
	if u.Slots > 0 {
		// Without a bound no slot may be named (see slot): the gates
		// would let every request through, at a cost to each.
		up.transport.Gate = up.gates
	}
	stream := *up.transport
	stream.ResponseHeaderTimeout = u.StreamHeaderTimeout
	up.stream = &stream
	return up, nil
}

func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	// A proxy passes the body's encoding through as it came; transparent
	// decompression would also buffer event streams.
	t.DisableCompression = true
	return t
}

// outbound is the caller's request r as it goes to the upstream, for
// path, with ctx: unchanged but for its URL, hop-by-hop headers, the
// gateway's own headers and the upstream's credential (Auth), which
// replaces the caller's on every request made for it. With take, it takes r's header map for its own
// (see forwardHeader), for the only request that will be made from r;
// net/http's server reads none of r's headers once the handler runs.
func (u *upstream) outbound(ctx context.Context, r *http.Request, path string, take bool) *http.Request {
	// A shallow copy: the header map is the copy's own, and nothing else
	// that the copy shares with the caller's request is changed.
	out := r.WithContext(ctx)
	out.RequestURI = ""
	out.Close = false // the caller's Connection: close is its hop's, not ours (as in ReverseProxy)
	out.URL = u.target(path, r.URL.RawQuery)
	out.Host = ""
	out.Header = forwardHeader(r.Header, take)
	out.Trailer = nil // see forbiddenTrailer
	if u.Auth != nil {
		u.Auth.apply(out.Header)
	}
	return out
}

// target returns the upstream URL for path and query: the upstream's path
// joined to the request's, and both queries, as
// httputil.NewSingleHostReverseProxy does.
func (u *upstream) target(path, rawQuery string) *url.URL {
	t := *u.URL
	t.User = nil
	t.Path = joinPath(u.URL.Path, path)
	t.RawPath = ""
	switch {
	case u.URL.RawQuery == "":
		t.RawQuery = rawQuery
	case rawQuery != "":
		t.RawQuery = u.URL.RawQuery + "&" + rawQuery
	}
	return &t
}

func joinPath(a, b string) string {
	switch as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/"); {
	case as && bs:
		return a + b[1:]
	case !as && !bs:
		return a + "/" + b
	}
	return a + b
}

// isStatus reports whether a request with method for path, the upstream's
// prefix removed, is for one of its health or status endpoints.
func (u *upstream) isStatus(method, path string) bool {
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	for _, p := range u.StatusPaths {
		p = strings.TrimSuffix(p, "/")
		if rest, ok := strings.CutPrefix(path, p); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// passThrough forwards a request for a health or status endpoint once,
// past the upstream's gates and policy, and tells no observer: what the
// caller gets is the upstream's own answer, whatever it is, as soon as it
// comes. FirstByteTimeout bounds the wait for it. The request goes without
// a body: a GET's or HEAD's means nothing to a status endpoint, and one
// forwarded would escape --max-body and the body's timeout.
func (u *upstream) passThrough(w http.ResponseWriter, r *http.Request, path string) {
	if len(u.members) > 0 {
		// A pool has no URL of its own: its status paths are its first
		// member's, as the pool's members serve one model alike.
		u = u.members[0]
	}
	ctx := r.Context()
	if d := u.FirstByteTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	out := u.outbound(ctx, r, path, true)
	out.Body, out.ContentLength, out.TransferEncoding, out.GetBody = http.NoBody, 0, nil, nil
	resp, err := u.transport.Base.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			abandon(w) // the caller left: no answer, not net/http's empty 200
			return
		}
		if errors.Is(err, context.DeadlineExceeded) {
			writeError(w, r, http.StatusGatewayTimeout, apierr.Timeout,
				fmt.Sprintf("outlast: upstream %s did not answer within %v (the first-byte timeout)", u.Name, u.FirstByteTimeout))
			return
		}
		writeError(w, r, http.StatusBadGateway, apierr.Unreachable,
			fmt.Sprintf("outlast: upstream %s is unreachable: %s", u.Name, redact.Text(err.Error())))
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	unread(w, r)
	// The caller takes the answer within the idle timeout, or is gone:
	// one that pipelines requests and reads nothing must not hold the
	// connection's handler.
	within(w, u.IdleTimeout, func() {
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
}

// slot checks v, a slot a client named (Outlast-Slot, or llama.cpp's
// id_slot): one of the upstream's 0 to Slots-1. It returns the slot's
// number as text.
func (u *Upstream) slot(v string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case err != nil || n < 0:
		return "", errors.New("want a slot number, 0 or more")
	case u.Slots == 0:
		return "", errors.New("the upstream has no slots to name (its slots are 0: no bound)")
	case n >= u.Slots:
		return "", fmt.Errorf("the upstream's slots are 0 to %d", u.Slots-1)
	}
	return strconv.Itoa(n), nil
}

// slotKey carries a request's named slot in its attempts' context.
type slotKey struct{}

// withSlot returns ctx carrying the gate key of the named slot.
func withSlot(ctx context.Context, slot string) context.Context {
	return context.WithValue(ctx, slotKey{}, "slot "+slot)
}

// wholeUpstream is the upstream Transport's AdmissionKey: the upstream is
// down or up as a whole, whatever slot a request names.
func wholeUpstream(*http.Request) string { return "" }

// slotOf is the upstream Transport's GateKey: the named slot's key, or ""
// for the upstream's own bound.
func slotOf(r *http.Request) string {
	k, _ := r.Context().Value(slotKey{}).(string)
	return k
}

// slotGates is the Gate of one upstream: the upstream's own bound, and one
// slot of capacity 1 per named slot. A request for a named slot waits for
// its slot and then, holding it, for a place in the bound: llama.cpp
// serves a named slot alone, and the bound holds whatever slots clients
// name. No request waits for a named slot while it holds a place in the
// bound, so the two cannot deadlock.
type slotGates struct {
	main  Gate // nil when the upstream has no bound
	named Gate
}

// newSlotGates makes an upstream's gates with make, or with gate.New if
// make is nil.
func newSlotGates(name string, slots, queue int, make func(string, bool, int, int) Gate) *slotGates {
	if make == nil {
		make = func(_ string, _ bool, capacity, queue int) Gate { return gate.New(capacity, queue) }
	}
	s := &slotGates{named: make(name, true, 1, queue)}
	if slots > 0 {
		s.main = make(name, false, slots, queue)
	}
	return s
}

// Acquire takes the named slot for a key from slotOf, if there is one,
// and then a place in the upstream's bound, if it has one. queued is
// called for the first wait only: the one the request joins first.
func (s *slotGates) Acquire(ctx context.Context, key string, queued func(ahead int)) (func(), error) {
	if key == "" {
		if s.main == nil {
			return func() {}, nil
		}
		return s.main.Acquire(ctx, "", queued)
	}
	called := false
	once := func(ahead int) {
		if !called {
			called = true
			queued(ahead)
		}
	}
	releaseSlot, err := s.named.Acquire(ctx, key, once)
	if err != nil || s.main == nil {
		return releaseSlot, err
	}
	releaseBound, err := s.main.Acquire(ctx, "", once)
	if err != nil {
		releaseSlot()
		return nil, err
	}
	return func() { releaseBound(); releaseSlot() }, nil
}

// load returns the requests in flight and waiting, and the waiting of
// each named slot by key. Every request in flight holds a place in the
// bound, named slot or not, so the bound's count is the upstream's; a
// request waits either for its named slot or for the bound.
func (s *slotGates) load() (inFlight, waiting int, named map[string]int) {
	if s.main != nil {
		inFlight, waiting = s.main.Load("")
	}
	for _, k := range s.named.Keys() {
		_, w := s.named.Load(k)
		if named == nil {
			named = map[string]int{}
		}
		named[k] = w
		waiting += w
	}
	return inFlight, waiting, named
}

// ewma is a moving average of durations, safe for concurrent use.
type ewma struct{ ns atomic.Int64 }

func (e *ewma) observe(d time.Duration) {
	for {
		old := e.ns.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if e.ns.CompareAndSwap(old, next) {
			return
		}
	}
}

// busyRetryAfter estimates, in whole seconds, when a refused request might
// find room: the queue ahead of it, served at the upstream's recent pace.
func (u *upstream) busyRetryAfter() int {
	_, waiting, _ := u.gates.load()
	per := time.Duration(u.latency.ns.Load())
	if per <= 0 {
		per = time.Second
	}
	slots := max(u.Slots, 1)
	d := time.Duration(float64(per) * float64(waiting+1) / float64(slots))
	return max(1, int(math.Ceil(d.Seconds())))
}

// nextChance returns how long until the upstream's admission controller
// may next send: its next probe or a server's not-before time; 0 if it is
// not down, or has none.
func (u *upstream) nextChance() time.Duration {
	if u.Admission == nil {
		return 0
	}
	s := u.Admission.State("")
	next := s.NextProbe
	if s.NotBefore.After(next) {
		next = s.NotBefore
	}
	return time.Until(next)
}
