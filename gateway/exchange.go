package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/owned"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/record"
)

// exchange is one request through the gateway, from arrival to the last
// byte forwarded. Its methods run in the goroutine serving the request,
// but for the progress ticker's comments.
type exchange struct {
	g  *Gateway
	up *upstream // the request's own, which its path routes to
	// cur is the upstream the request is at: up, or the fallback it has
	// moved to. Its attempts, its answer and its failure are cur's.
	cur  *upstream
	r    *http.Request
	path string // the path to forward, the upstream's prefix removed
	opts options
	out  response       // what the caller gets
	rec  record.Request // what observers are told

	body       []byte      // the body to send: the caller's, or a continuation's
	callerBody []byte      // the caller's body, read whole
	fields     bodyFields  // what the gateway read of body
	sent       bool        // an outbound request has been made (see outbound)
	moved      string      // the reason of a fallback not yet on an attempt
	deadline   untilCommit // the attempts' context with the request's deadline, if it has one
	held       heldAnswers // the answers its attempts' wholeBodies held whole

	// hooksMu guards what the attempts' hooks change (the record's
	// attempts and moves, moved, cur, untold) while both sides of a hedge
	// run.
	hooksMu sync.Mutex
	// untold is 1 + the index in the record of the answered attempt whose
	// end the observers are told of once the answer's first bytes have
	// gone (see endAttempt), or 0 once they have been told.
	untold int

	// A stream's continuations (see Continuation): whether the attempts
	// now made continue it, with how long a prefill; which of the
	// record's attempts is being forwarded; and the bytes forwarded
	// before it.
	continued bool
	prefill   int64
	forwarder int
	spliced   int64
	streaming *upstream // whose stream the caller is reading

	// shut guards the state that the gateway's shutdown reads, from
	// Serve's goroutine: the cancel that ends the attempts, and whether
	// the exchange is waiting between them.
	shut    sync.Mutex
	cancel  context.CancelCauseFunc
	waiting bool
}

// newExchange starts the exchange of r, whose resolved path is resolved
// and, with the upstream's prefix removed, path.
func newExchange(g *Gateway, up *upstream, w http.ResponseWriter, r *http.Request, resolved, path string) *exchange {
	x := &exchange{g: g, up: up, cur: up, r: r, path: path, rec: record.Request{
		ID:       outlast.NewCallID(),
		Method:   keptText(r.Method, maxMethodLen),
		Path:     keptText(resolved, maxPathLen),
		Header:   g.observedHeader(r.Header),
		Upstream: up.Name,
		Start:    time.Now(),
	}}
	x.out.init(w)
	return x
}

// serve carries the request from its headers to its last byte: it reads
// the Outlast-* headers and the body, sends the request through the
// upstream's Transport, and forwards the answer.
func (x *exchange) serve() {
	if !x.g.live.add(x) {
		x.out.closeAfter()
		x.fail(http.StatusServiceUnavailable, apierr.Shutdown, "outlast: the gateway is shutting down: send the request again, to another gateway or once it is back", nil)
		x.done()
		return
	}
	// The record is handed on before the shutdown may count the exchange
	// out and close the journal.
	defer x.g.live.remove(x)
	defer x.done()
	if err := x.opts.parse(x.r.Header, &x.up.Upstream, x.rec.Start); err != nil {
		x.fail(http.StatusBadRequest, apierr.Invalid, err.Error(), nil)
		return
	}
	x.rec.Run, x.rec.Slot = x.opts.run, x.opts.slot
	x.rec.Deadline, x.rec.DeadlineSource = x.opts.deadline, x.opts.source
	body, ok := x.readBody()
	if !ok {
		return
	}
	if err := x.inspect(body); err != nil {
		x.fail(http.StatusBadRequest, apierr.Invalid, err.Error(), nil)
		return
	}
	if d := x.opts.deadline; !d.IsZero() && !time.Now().Before(d) {
		// Nothing is left of the caller's time: no attempt goes.
		x.fail(http.StatusGatewayTimeout, apierr.Deadline,
			fmt.Sprintf("outlast: the request's deadline, %s, passed before it could be sent", d.UTC().Format(time.RFC3339Nano)),
			http.Header{headerShouldRetry: {"false"}})
		return
	}
	ctx, cancel := x.context()
	defer cancel(nil)
	defer x.deadline.stop()
	x.hold(cancel)
	stop := x.startProgress()
	x.body, x.callerBody = body, body
	var resp *http.Response
	var err error
	if x.hedges() {
		resp, err = x.hedged(ctx)
	} else {
		resp, err = x.roundTripper().RoundTrip(x.request(ctx))
	}
	stop()
	if err != nil {
		x.failed(ctx, err)
		return
	}
	// The response is committed: its first byte came before the
	// deadline, and the deadline no longer ends it.
	x.deadline.stop()
	x.forwarder = x.committed()
	x.forward(ctx, resp, cancel)
}

// unheld returns an upstream's text, which the gateway's error quotes,
// with the credentials the gateway holds for the upstreams of the request
// cut out: an upstream that echoes the key it was sent ("invalid key
// sk-…") must not hand the caller the gateway's.
func (x *exchange) unheld(b []byte) []byte {
	for _, u := range [...]*upstream{x.up, x.cur, x.streaming} {
		if u != nil && u.Auth != nil && u.Auth.secret != "" {
			b = bytes.ReplaceAll(b, []byte(u.Auth.secret), []byte("[redacted]"))
		}
	}
	return b
}

// heldUnwatched is the largest held answer written without the idle
// watch: within one write deadline, a bound on the whole answer, which
// a caller that reads takes well within the idle timeout.
const heldUnwatched = 64 << 10

// committed returns the index of the attempt whose response is forwarded:
// the last that succeeded, which a hedge's cancelled side may follow in
// the record, or else the last.
func (x *exchange) committed() int {
	for i := len(x.rec.Attempts) - 1; i >= 0; i-- {
		if x.rec.Attempts[i].Class == outlast.ClassNone {
			return i
		}
	}
	return max(len(x.rec.Attempts)-1, 0)
}

// hold keeps cancel, which ends the attempts, for the gateway's shutdown,
// and uses it at once if the shutdown has already ended every exchange.
func (x *exchange) hold(cancel context.CancelCauseFunc) {
	x.shut.Lock()
	x.cancel = cancel
	x.shut.Unlock()
	if x.g.live.isAborted() {
		cancel(errShutdown)
	}
}

// stop ends the exchange's attempts for the shutdown: a wait, an attempt
// in flight, or a response being forwarded.
func (x *exchange) stop() {
	x.shut.Lock()
	defer x.shut.Unlock()
	if x.cancel != nil {
		x.cancel(errShutdown)
	}
}

// stopIfWaiting ends the exchange's attempts if it is waiting between
// them: its last failure is its answer, now rather than after the wait.
func (x *exchange) stopIfWaiting() {
	x.shut.Lock()
	defer x.shut.Unlock()
	if x.waiting && x.cancel != nil {
		x.cancel(errShutdown)
	}
}

// setWaiting records whether the exchange is between attempts, and stops
// it if it has come to wait while the gateway shuts down.
func (x *exchange) setWaiting(waiting bool) {
	x.shut.Lock()
	x.waiting = waiting
	x.shut.Unlock()
	if waiting && x.g.live.shuttingDown() {
		x.stopIfWaiting()
	}
}

// readBody reads the request body for replay, refusing one over MaxBody
// before anything is forwarded, one whose bytes stop coming, and one with
// a trailer that could change how it is read or sent.
func (x *exchange) readBody() ([]byte, bool) {
	limit := x.g.cfg.MaxBody
	if x.r.ContentLength > limit {
		x.fail(http.StatusRequestEntityTooLarge, apierr.TooLarge, fmt.Sprintf("outlast: the request body is %d bytes; the most is %d (--max-body)", x.r.ContentLength, limit), nil)
		return nil, false
	}
	if x.r.Body == nil || x.r.Body == http.NoBody {
		return nil, true
	}
	body, err := readBody(x.out.slowBodyReader(x.r, x.g.cfg.BodyTimeout), x.r.ContentLength, limit+1)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		x.out.closeAfter()
		x.fail(http.StatusRequestTimeout, apierr.TooSlow, fmt.Sprintf("outlast: the request body fell silent for %v (--body-timeout)", x.g.cfg.BodyTimeout), nil)
		return nil, false
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		// The caller's side ended before its body did: it left, as one
		// that closes before its answer does (see failed).
		x.rec.Status, x.rec.Error = 499, record.ErrorClientClosed
		x.out.abandoned = true
		return nil, false
	case err != nil:
		x.out.closeAfter()
		x.fail(http.StatusBadRequest, apierr.Invalid, "outlast: reading the request body: "+err.Error(), nil)
		return nil, false
	case int64(len(body)) > limit:
		x.out.closeAfter()
		x.fail(http.StatusRequestEntityTooLarge, apierr.TooLarge, fmt.Sprintf("outlast: the request body is over %d bytes (--max-body)", limit), nil)
		return nil, false
	}
	if name := forbiddenTrailer(x.r.Trailer); name != "" {
		x.fail(http.StatusBadRequest, apierr.Invalid, fmt.Sprintf("outlast: the request has a trailer %s, which only a header may be", name), nil)
		return nil, false
	}
	return body, true
}

// readBody reads a request body of size bytes (-1 if unknown) from r,
// or up to limit bytes of one of unknown size, and lifts r's deadline
// once the body has ended.
// Memory follows the bytes received: a buffer of size is made only for a
// body small enough to be read in one go; a larger one grows as it comes,
// whatever Content-Length announced. net/http ends a body at its
// declared size, or fails it short of it.
func readBody(r *deadlineReader, size, limit int64) ([]byte, error) {
	if size < 0 || size > wholeRead {
		// r lifts its deadline at the body's end; one cut at limit has
		// not ended, and keeps it for what net/http reads of the rest.
		return io.ReadAll(io.LimitReader(r, limit))
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	r.lift()
	return b, nil
}

// wholeRead is the largest request body read into a buffer of its
// declared size: a chat request is usually smaller, and a caller who
// declares this much and sends nothing holds no more than this.
const wholeRead = 16 << 10

// inspect reads what the record and the gate need from a JSON body: the
// model, whether it streams, and llama.cpp's id_slot (-1 means any slot),
// which must be one of the upstream's slots.
func (x *exchange) inspect(body []byte) error {
	x.rec.Stream = strings.Contains(header(x.r.Header, "Accept"), "text/event-stream")
	f, ok := readFields(body)
	if !ok {
		return nil
	}
	x.fields = f
	x.rec.Model = keptText(f.model, maxModelLen)
	x.rec.Stream = x.rec.Stream || f.stream
	if x.rec.Slot == "" && f.slot >= 0 {
		slot, err := x.up.slot(strconv.Itoa(f.slot))
		if err != nil {
			return fmt.Errorf("outlast: the body's id_slot %d: %w", f.slot, err)
		}
		x.rec.Slot = slot
	}
	return nil
}

// The bounds of what the record keeps of a request's method, path and
// body. The request forwarded upstream is never changed.
const (
	maxModelLen  = 256
	maxPathLen   = 2048
	maxMethodLen = 32
)

// keptText returns s as the record keeps it: at most max bytes of valid
// UTF-8 without control characters or bidirectional formatting ones
// (U+202E would reorder a terminal's line). A longer s is cut at the
// start of a character and ends with "…"; an invalid byte or such a
// character becomes U+FFFD.
func keptText(s string, max int) string {
	// The common case, printable ASCII, in one pass and without an
	// allocation; then any other text that is kept whole.
	whole := len(s) <= max
	for i := 0; whole && i < len(s); i++ {
		whole = ' ' <= s[i] && s[i] < 0x7f
	}
	if whole || len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, unkept) {
		return s
	}
	var b strings.Builder // range reads an invalid byte as U+FFFD, without a copy of s
	for _, c := range s {
		if unkept(c) {
			c = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(c) > max-len("…") {
			b.WriteString("…")
			return b.String()
		}
		b.WriteRune(c)
	}
	return b.String()
}

// unkept reports whether the record keeps c as U+FFFD: a control
// character, or a bidirectional formatting one.
func unkept(c rune) bool { return unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c) }

// context returns the context of the attempts: the caller's, with the
// request's deadline, policy, slot and hooks. Its cancel ends the
// upstream response, for the idle timeout. The deadline ends the
// attempts and the waits until x.deadline.stop, at the commit.
func (x *exchange) context() (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(x.r.Context())
	// The mark says the requests' header maps are their own (see
	// outbound); the Transport tells x of their attempts (Queued,
	// AttemptStart and AttemptEnd), and wholeBodies of the answers it
	// holds (heldIn).
	ctx = owned.Mark(ctx, x)
	if !x.opts.deadline.IsZero() {
		x.deadline = untilCommit{Context: ctx, at: x.opts.deadline}
		x.deadline.timer = time.AfterFunc(time.Until(x.opts.deadline), func() { cancel(context.DeadlineExceeded) })
		ctx = &x.deadline
	}
	if x.opts.policy != x.up.Policy || x.opts.outer {
		ctx = outlast.WithPolicy(ctx, x.opts.policy)
	}
	if x.rec.Slot != "" {
		ctx = withSlot(ctx, x.rec.Slot)
	}
	return ctx, cancel
}

// untilCommit is a context with a deadline that ends it only until the
// response is committed. Its Deadline bounds the attempts and waits, as
// context.WithDeadline's would; its timer cancels the context at the
// deadline with context.DeadlineExceeded as the cause, unless stop has
// been called first. A response that began before the deadline is then
// forwarded to its end, however long it streams: the deadline is the
// caller's time to the answer (an SDK's timeout runs to the response
// headers), not a cap on the answer's length. Err reports
// context.DeadlineExceeded once the deadline has ended it.
type untilCommit struct {
	context.Context // a cancelCtx, which the timer cancels
	at              time.Time
	timer           *time.Timer
}

func (c *untilCommit) Deadline() (time.Time, bool) { return c.at, true }

func (c *untilCommit) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// stop keeps the deadline from ending the context from now on. It may
// be called on the zero untilCommit, and more than once.
func (c *untilCommit) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// soonestChance returns how long until the soonest next chance of the
// request's upstream or, with fallbacks, any of them: when the request
// could be served again. 0 if none is known.
func (x *exchange) soonestChance() time.Duration {
	ups := x.up.chain
	if len(ups) == 0 {
		ups = []*upstream{x.cur}
	}
	var soonest time.Duration
	for _, u := range ups {
		if d := u.nextChance(); d > 0 && (soonest == 0 || d < soonest) {
			soonest = d
		}
	}
	return soonest
}

// roundTripper is what sends the request: the upstream's Transport, or,
// with Fallbacks, an outlast.Fallback over it and theirs; for a stream,
// their stream Transports. A request that has no retries (Outlast-Retry:
// off, or an outer layer's Outlast-Attempt) goes to its upstream alone:
// a move is one more attempt, which its caller makes.
func (x *exchange) roundTripper() http.RoundTripper {
	if x.up.pool != nil {
		if x.rec.Stream {
			return x.up.streamPool
		}
		return x.up.pool
	}
	if len(x.up.chain) == 0 || x.alone() {
		if x.rec.Stream {
			return x.up.stream
		}
		return x.up.transport
	}
	return x.chainTripper(nil)
}

// chainTripper is the outlast.Fallback over the request's upstream and
// its fallbacks. A move to an upstream for which stopped, if not nil,
// reports true is not made: a hedge went there (see hedged).
func (x *exchange) chainTripper(stopped func() bool) *outlast.Fallback {
	chain := x.up.transports
	if x.rec.Stream {
		chain = x.up.streams
	}
	return &outlast.Fallback{
		Upstreams: chain,
		Prefer:    x.up.Prefer,
		Rewrite: func(r *http.Request, i int) (*http.Request, error) {
			if stopped != nil && stopped() {
				return nil, errHedged
			}
			return x.outbound(r.Context(), x.up.chain[i]), nil
		},
		OnFallback: func(_ *http.Request, from, to int, reason outlast.FallbackReason, err error) {
			x.move(x.up.chain[from], x.up.chain[to], reason, err, stopped)
		},
	}
}

// onMove notes a move to another upstream, in the record's moves, for the
// record of its first attempt there and for the answer, and logs it.
func (x *exchange) onMove(from, to *upstream, reason outlast.FallbackReason, err error) {
	x.move(from, to, reason, err, nil)
}

// move is onMove, unless stopped, if not nil, reports that a hedge has
// fired: it is asked under the lock that the hedge fires under, so that
// a move either comes first, and the hedge is not sent, or is not made,
// and the Rewrite after it ends the request's side.
func (x *exchange) move(from, to *upstream, reason outlast.FallbackReason, err error, stopped func() bool) {
	x.hooksMu.Lock()
	if stopped != nil && stopped() {
		x.hooksMu.Unlock()
		return
	}
	x.moved, x.cur = string(reason), to
	x.rec.Moves = append(x.rec.Moves, record.Move{From: from.Name, To: to.Name, Reason: x.moved})
	x.hooksMu.Unlock()
	x.g.logger.Info("outlast: falling back", "id", x.rec.ID, "from", from.Name, "to", to.Name,
		"reason", string(reason), "error", redact.Text(err.Error()))
	x.comment("fallback from=%s to=%s reason=%s", from.Name, to.Name, reason)
}

// plainStream asks for a stream without a content coding: the gateway
// reads every event (for the commit, an error, a continuation), which it
// cannot in a compressed stream, and SDKs offer gzip for every request.
// It asks in so many words: a request with no Accept-Encoding accepts
// any coding (RFC 9110, section 12.5.3), which a compressing server or
// CDN in front of the upstream may take it at. An answer that is not a
// stream passes as it came, coded or not.
func (x *exchange) plainStream(h http.Header) {
	if x.rec.Stream {
		h["Accept-Encoding"] = identity
	}
}

var identity = []string{"identity"}

var byteOrderMark = []byte("\ufeff")

// request is the request that roundTripper sends: the upstream's, or for
// a pool, one that its members' requests are made from.
func (x *exchange) request(ctx context.Context) *http.Request {
	if x.up.pool != nil {
		return x.poolOutbound(ctx)
	}
	return x.outbound(ctx, x.up)
}

// outbound is the request to send to upstream u, with the caller's body,
// read for replay: u's model name and u's credential, if it has them.
// The first takes the caller's header map when the request has no
// fallback: later ones (a stream's continuation) copy it, as it is then,
// for the same upstream, and with fallbacks every one copies it, so that
// one upstream's credential never reaches another.
func (x *exchange) outbound(ctx context.Context, u *upstream) *http.Request {
	alone := len(x.up.chain) == 0 && x.up.pool == nil
	take := !x.sent && alone
	if alone {
		x.sent = true // with fallbacks it never takes it, and a hedge's side may run beside this one
	}
	out := u.outbound(ctx, x.r, x.path, take)
	x.plainStream(out.Header)
	body := x.bodyFor(u)
	out.Body, out.GetBody, out.ContentLength = nil, nil, int64(len(body))
	if body != nil {
		// io.NopCloser of a bytes.Reader, which http.Transport knows is in
		// memory: it writes the headers and the body in one go.
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.Body, _ = out.GetBody()
	}
	return out
}

// The Transport's hooks, which it calls as methods of the exchange that
// marked the context (see context): each tells the observer, and a
// caller that asked for progress, what the attempts do. The two sides of
// a hedge call them at once, so they hold hooksMu.

func (x *exchange) Queued(key string, ahead int) {
	x.hooksMu.Lock()
	defer x.hooksMu.Unlock()
	x.tellEndLocked()
	if o := x.g.cfg.Observer.Queued; o != nil {
		o(&x.rec, key, ahead)
	}
	x.comment("queued ahead=%d", ahead)
}

func (x *exchange) AttemptStart(a outlast.Attempt) {
	x.setWaiting(false)
	x.hooksMu.Lock()
	defer x.hooksMu.Unlock()
	x.tellEndLocked()
	if o := x.g.cfg.Observer.AttemptStart; o != nil {
		o(&x.rec, x.attempt(a))
	}
}

// readFields reads the fields of body, a JSON object, as scanBody does,
// with its offsets in body; ok is false for a body that is not an object.
// JSON may start with white space (RFC 8259), and the upstream reads such
// a body's fields as any other's; so do Python's json and llama.cpp's
// reader one that starts with a byte order mark, which RFC 8259 forbids.
// A body it cannot follow is not the gateway's to judge: the upstream
// will answer it, and the fields read before the trouble stand.
func readFields(body []byte) (f bodyFields, ok bool) {
	obj := bytes.TrimLeft(bytes.TrimPrefix(body, byteOrderMark), " \t\r\n")
	if len(obj) == 0 || obj[0] != '{' {
		return bodyFields{slot: -1}, false
	}
	f, _ = scanBody(obj)
	if f.modelEnd != 0 {
		off := len(body) - len(obj)
		f.modelAt, f.modelEnd = f.modelAt+off, f.modelEnd+off
	}
	return f, true
}

// bodyFor returns the body for upstream u: the caller's, with its model
// renamed if u's Models rename it, and for an upstream that resumes
// streams, a Responses API stream asked for in background.
func (x *exchange) bodyFor(u *upstream) []byte {
	b := x.body
	if q, ok := u.models[x.fields.model]; ok && x.fields.modelEnd != 0 {
		r := make([]byte, 0, len(b)-(x.fields.modelEnd-x.fields.modelAt)+len(q))
		b = append(append(append(r, b[:x.fields.modelAt]...), q...), b[x.fields.modelEnd:]...)
	}
	if u.carry == ContinueResume && x.fields.background == 0 && x.resumable() {
		b = withBackground(b)
	}
	return b
}

// attempt returns the record of a, the request's next attempt: numbered
// across the request, since each upstream's Transport numbers its own
// from 1, and the first at a fallback says why the request moved.
func (x *exchange) attempt(a outlast.Attempt) record.Attempt {
	at := record.NewAttempt(a)
	at.N, at.Fallback = len(x.rec.Attempts)+1, x.moved
	at.Continued, at.PrefillBytes = x.continued, x.prefill
	return at
}

func (x *exchange) AttemptEnd(a outlast.Attempt) { x.endAttempt(a, "") }

// endAttempt records a, an attempt that ended; why, if not empty, is why
// it went to its upstream, in place of the move the request made last (a
// hedge's, whose side runs beside the request's own).
//
// The observers hear of an answer's end once its first bytes have gone
// to the caller, or at the next thing they hear of, whichever is first:
// what they do then no longer delays the answer. A hedged request's
// sides run at once, and tell them at once.
func (x *exchange) endAttempt(a outlast.Attempt, why string) {
	x.hooksMu.Lock()
	x.tellEndLocked()
	at := x.attempt(a)
	// The attempt went to u: a hedge's side goes on beside the request's.
	u := x.named(a.Upstream)
	if why != "" {
		at.Fallback = why
	} else {
		x.moved = ""
	}
	x.rec.Attempts = append(x.rec.Attempts, at)
	// Its pace is u's, for u's own busy answers' Retry-After.
	u.latency.observe(a.End.Sub(a.Start))
	if u == x.up && a.Class == outlast.ClassNone && x.hedges() {
		// Its time to its first content, which hedges learn from.
		x.up.hedging.learn(x.fields.model, a.End.Sub(a.Start))
	}
	if o := x.g.cfg.Observer.AttemptEnd; o != nil {
		if a.Class == outlast.ClassNone && why == "" && !x.hedges() {
			x.untold = len(x.rec.Attempts)
		} else {
			o(&x.rec, at)
		}
	}
	if a.RetryIn > 0 {
		x.comment("retrying attempt=%d in=%v status=%d", at.N+1, a.RetryIn, a.Status)
	}
	x.hooksMu.Unlock()
	if a.RetryIn > 0 {
		x.setWaiting(true)
	}
}

// tellEnd tells the observers of the answered attempt's end, if they
// have not been told of it yet.
func (x *exchange) tellEnd() {
	x.hooksMu.Lock()
	x.tellEndLocked()
	x.hooksMu.Unlock()
}

// tellEndLocked is tellEnd with hooksMu held.
func (x *exchange) tellEndLocked() {
	if x.untold == 0 {
		return
	}
	i := x.untold - 1
	x.untold = 0
	x.g.cfg.Observer.AttemptEnd(&x.rec, x.rec.Attempts[i])
}

// named returns the upstream of the request's chain named name, or the
// one the request is at.
func (x *exchange) named(name string) *upstream {
	for _, u := range x.up.chain {
		if u.Name == name {
			return u
		}
	}
	return x.cur
}

// startProgress starts the progress comments of a streaming request that
// asked for them, and returns the func that stops them.
func (x *exchange) startProgress() (stop func()) {
	if !x.opts.progress || !x.rec.Stream {
		return func() {}
	}
	return ticking(x.g.cfg.ProgressInterval, func() bool {
		x.comment("waiting")
		return true
	})
}

// ticking calls tick every interval, in a goroutine of its own, until
// tick returns false or stop is called; stop waits for the goroutine.
func ticking(interval time.Duration, tick func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if !tick() {
					return
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// comment sends an SSE comment line to a caller that asked for progress.
// The first one commits the response as a 200 event stream.
func (x *exchange) comment(format string, args ...any) {
	if !x.opts.progress || !x.rec.Stream {
		return
	}
	x.out.comment(func(h http.Header) { h.Set(HeaderRequestID, x.rec.ID) }, fmt.Sprintf(format, args...))
}

// forward sends the committed response to the caller, chunk by chunk,
// flushing each chunk of a stream as it arrives.
func (x *exchange) forward(ctx context.Context, resp *http.Response, cancel context.CancelCauseFunc) {
	defer resp.Body.Close()
	x.rec.Status = resp.StatusCode
	stream := x.rec.Stream || sse.IsStream(resp.Header)
	// A stream whose first event is an error is a failure under a 200:
	// the policy has been applied to it too, and the record says so.
	errorEvent := false
	if n := len(x.rec.Attempts); n > 0 && x.rec.Attempts[n-1].Class == outlast.ClassErrorEvent {
		errorEvent = true
		x.rec.Error = record.ErrorUpstreamError
	}
	setHeader := func(h http.Header) {
		copyHeader(h, resp.Header)
		if stream {
			// The caller's stream is not the upstream's bytes: events held
			// or dropped, an end or an error event added, a continuation
			// spliced on. The upstream's length would cut it.
			delete(h, "Content-Length")
		}
		if !stream && resp.ContentLength > 0 && header(h, "Content-Length") == "" && x.r.Method != http.MethodHead {
			// A whole answer that came chunked goes with its length, so
			// that the caller has it all once its last byte is sent.
			h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		}
		x.ownHeaders(h)
		if (resp.StatusCode >= 400 || errorEvent) && x.retried() {
			// The gateway has applied its policy to this failure: a
			// client that retried it would multiply the attempts.
			h.Set(headerShouldRetry, "false")
		}
	}
	// A stream's status line goes at once; another's waits for the
	// body's first byte, so that an upstream that breaks off first is
	// answered with an error rather than a 200 with nothing after it.
	var progressed bool
	if stream {
		progressed = x.out.commit(resp.StatusCode, setHeader)
	} else {
		progressed = x.out.hold(resp.StatusCode, setHeader)
	}
	if progressed && (resp.StatusCode >= 300 || !sse.IsStream(resp.Header)) {
		// The caller was promised an event stream; the upstream's answer
		// is something else, and comes as an error event. The record
		// keeps the failure the caller got, not the 200 that carried it.
		x.rec.Error = record.ErrorUpstreamError
		if resp.StatusCode < 400 {
			x.rec.Status = http.StatusBadGateway // an answer the stream cannot carry
		}
		msg := fmt.Sprintf("outlast: upstream %s answered %s", x.cur.Name, resp.Status)
		if resp.StatusCode < 300 {
			msg += fmt.Sprintf(" with %q, not the event stream that the progress comments began", header(resp.Header, "Content-Type"))
			if !x.fields.stream {
				msg += `; the request's body does not ask for one ("stream": true)`
			}
		}
		x.out.errorEvent(record.ErrorUpstreamError, msg, x.unheld(readSnippet(resp.Body)))
		return
	}
	var err error
	x.streaming = x.cur
	x.out.sent = x // the answered attempt's end is told once the caller has its first bytes
	if resp.StatusCode < 300 && sse.IsStream(resp.Header) {
		// An event stream goes whole events at a time, and is carried on
		// if it breaks, where it may be: not the last attempt's stream
		// that failed before its answer began, which the policy has
		// judged already.
		var release func()
		ctx, release, err = x.relay(ctx, resp, cancel, errorEvent)
		defer release() // once the caller has the stream's end, or the error event below
	} else {
		idle := x.cur.IdleTimeout
		if !stream && x.held.has(resp) {
			// In memory already: it cannot fall silent, and a cut would
			// have been retried. A small one is written whole within the
			// idle timeout, a bound with no timer of the gateway's: one
			// caller may pipeline requests and read none of the answers,
			// so even a small one can find the connection's buffers full.
			// A larger one keeps the bound on a caller that takes none of
			// it for as long.
			x.rec.Held = true
			if resp.ContentLength <= heldUnwatched {
				if idle > 0 {
					x.out.bound(idle)
				}
				idle = 0
			}
		}
		err = x.out.copyBody(resp.Body, stream, idle, cancel, &x.rec.Committed, &x.rec.Bytes)
	}
	switch {
	case err == nil:
	case !errors.Is(err, errClientGone) && x.out.retract():
		// Nothing of the answer was sent: the caller gets an error in
		// its place.
		x.failedBeforeBody(ctx, err)
	case errors.Is(context.Cause(ctx), errShutdown):
		// The grace period ran out with the answer half sent.
		x.rec.Status, x.rec.Error = http.StatusServiceUnavailable, apierr.Shutdown
		if stream {
			x.out.errorEvent(apierr.Shutdown, fmt.Sprintf("outlast: the gateway is shutting down: the stream ends after %d bytes", x.rec.Bytes), nil)
			return
		}
		x.out.rc.Flush()            // what the record counts reaches the caller
		panic(http.ErrAbortHandler) // a body cut short must not look complete
	case errors.Is(err, errClientGone), x.r.Context().Err() != nil:
		x.rec.Error = record.ErrorClientClosed
	case stream:
		// The caller gets an error event in place of the rest: the
		// upstream's own, quoted, if it sent one.
		x.rec.Error = record.ErrorUpstreamBroke
		msg := fmt.Sprintf("outlast: upstream %s broke off the stream after %d bytes: %v", x.streaming.Name, x.rec.Bytes, err)
		up := quoted(err)
		if up != nil {
			x.rec.Error = record.ErrorUpstreamError
			msg = fmt.Sprintf("outlast: upstream %s ended the stream with an error after %d bytes; not continued: %s", x.streaming.Name, x.rec.Bytes, notContinuedWhy(err))
		}
		x.out.errorEvent(record.ErrorUpstreamError, msg, x.unheld(up))
	default:
		// A body cut short must not look complete: abort the connection
		// so that the caller sees the failure (net/http's convention),
		// once the bytes the record counts have reached it.
		x.rec.Error = record.ErrorUpstreamBroke
		x.out.rc.Flush()
		panic(http.ErrAbortHandler)
	}
}

// failedBeforeBody answers for a response that is not a stream whose body
// failed before its first byte, in place of its held status line.
func (x *exchange) failedBeforeBody(ctx context.Context, err error) {
	switch {
	case errors.Is(context.Cause(ctx), errShutdown):
		x.fail(http.StatusServiceUnavailable, apierr.Shutdown,
			fmt.Sprintf("outlast: the gateway is shutting down; upstream %s had answered %d, and sent none of its body", x.cur.Name, x.rec.Status), nil)
	case errors.Is(err, errIdle):
		x.fail(http.StatusGatewayTimeout, apierr.Timeout,
			fmt.Sprintf("outlast: upstream %s answered %d, and then sent nothing of its body for %v", x.cur.Name, x.rec.Status, x.cur.IdleTimeout), x.noRetryIfRetried())
	default:
		x.fail(http.StatusBadGateway, apierr.Broke,
			fmt.Sprintf("outlast: upstream %s answered %d, and then broke off before its body: %s", x.cur.Name, x.rec.Status, redact.Text(err.Error())), x.noRetryIfRetried())
	}
}

// retried reports whether the gateway's own policy decided this request's
// attempts. A request from an outer outlast layer has none: that layer
// retries, and must stay free to retry what the gateway returns.
func (x *exchange) retried() bool {
	return x.opts.policy != nil
}

// alone reports whether the request's caller asked for no retries
// (Outlast-Retry: off), or is an outer layer that retries it: the
// gateway makes one attempt, moves it nowhere, and carries no stream on.
func (x *exchange) alone() bool { return x.opts.outer || x.opts.off }

// ownHeaders adds the gateway's response headers.
func (x *exchange) ownHeaders(h http.Header) {
	// The keys are canonical; the three values share one array.
	// Answered: the upstream the request is at, which may have refused it
	// without an attempt; a pool's, the member it is at.
	at := x.rec.Answered()
	if x.up.pool != nil {
		at = x.cur.Name
	}
	v := []string{x.rec.ID, strconv.Itoa(len(x.rec.Attempts)), at}
	h[HeaderRequestID], h[HeaderAttempts], h[HeaderUpstream] = v[0:1:1], v[1:2:2], v[2:3:3]
}

// failed answers for a request that got no response to forward.
func (x *exchange) failed(ctx context.Context, err error) {
	var class outlast.Class
	if n := len(x.rec.Attempts); n > 0 {
		class = x.rec.Attempts[n-1].Class
	}
	switch {
	case errors.Is(context.Cause(ctx), errShutdown):
		// Its wait, queue or attempt ended for the shutdown: the caller
		// hears so at once, with what the last attempt got.
		msg := fmt.Sprintf("outlast: the gateway is shutting down; upstream %s's last answer: %s", x.cur.Name, redact.Text(err.Error()))
		if errors.Is(err, errShutdown) {
			msg = fmt.Sprintf("outlast: the gateway is shutting down; the attempt to upstream %s was stopped before it answered", x.cur.Name)
		}
		x.fail(http.StatusServiceUnavailable, apierr.Shutdown, msg, nil)
	case x.r.Context().Err() != nil:
		// The caller left; there is nobody to answer. Its connection is
		// closed without an answer (see abandon), since one that only
		// closed its sending side would read net/http's empty 200.
		x.rec.Status, x.rec.Error = 499, record.ErrorClientClosed
		x.out.abandoned = true
	case errors.Is(err, outlast.ErrPoolSpent):
		x.poolSpent(err)
	case errors.Is(err, outlast.ErrBusy):
		// The gate has said that waiting will not help: no layer should
		// retry it at once.
		x.fail(http.StatusServiceUnavailable, apierr.Busy,
			fmt.Sprintf("outlast: upstream %s is busy: its queue is full", x.cur.Name),
			http.Header{"Retry-After": {strconv.Itoa(x.cur.busyRetryAfter())}, headerShouldRetry: {"false"}})
	case errors.Is(err, outlast.ErrUpstreamDown), errors.Is(err, outlast.ErrRetryBudget):
		// The admission controller judged that waiting would not fit:
		// the upstream is down, its next chance too late for the
		// deadline. Retry-After says when that chance is, if known.
		h := http.Header{headerShouldRetry: {"false"}}
		if d := x.soonestChance(); d > 0 {
			h.Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
		}
		x.fail(http.StatusServiceUnavailable, apierr.Down, x.downMessage(err), h)
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, outlast.ErrNoTime):
		// The request's deadline is the caller's: nothing is left of it.
		x.fail(http.StatusGatewayTimeout, apierr.Deadline,
			fmt.Sprintf("outlast: the request's deadline passed before upstream %s answered: %s", x.cur.Name, redact.Text(err.Error())),
			http.Header{headerShouldRetry: {"false"}})
	case class == outlast.ClassClosedEarly:
		// It answered, and broke off before the answer was whole.
		x.fail(http.StatusBadGateway, apierr.Broke,
			fmt.Sprintf("outlast: upstream %s broke off its answer: %s", x.cur.Name, redact.Text(err.Error())), x.noRetryIfRetried())
	case class == outlast.ClassStalled, class == outlast.ClassTimeout:
		x.fail(http.StatusGatewayTimeout, apierr.Timeout,
			fmt.Sprintf("outlast: upstream %s did not answer in time: %s", x.cur.Name, redact.Text(err.Error())), x.noRetryIfRetried())
	default:
		x.fail(http.StatusBadGateway, apierr.Unreachable,
			fmt.Sprintf("outlast: upstream %s is unreachable: %s", x.cur.Name, redact.Text(err.Error())), x.noRetryIfRetried())
	}
}

// downMessage says once why the request was sent away from a down
// upstream, and, when its deadline less its reserve was the cause, what
// it was and how to change it.
func (x *exchange) downMessage(err error) string {
	de, ok := errors.AsType[*outlast.DownError](err)
	if !ok { // the retry budget's refusal
		return fmt.Sprintf("outlast: upstream %s is down: %s", x.cur.Name, redact.Text(err.Error()))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "outlast: upstream %s is down: %s", x.cur.Name, de.Reason)
	if de.Key != "" {
		fmt.Fprintf(&b, " (key %q)", de.Key)
	}
	if de.Late && !x.opts.deadline.IsZero() && x.opts.policy != nil {
		fmt.Fprintf(&b, ": a deadline %v after its arrival (%s), less a reserve of %v. To wait for the upstream, give the request a later deadline (Outlast-Timeout) or a smaller reserve (Outlast-Reserve; the gateway's is --reserve)",
			x.opts.deadline.Sub(x.rec.Start).Round(time.Millisecond), deadlineFrom(x.opts.source), x.opts.policy.ReserveInForce())
	}
	if de.Last != nil {
		fmt.Fprintf(&b, ". The last failure: %s", redact.Text(de.Last.Error()))
	}
	return b.String()
}

// deadlineFrom names where a deadline came from, for an error message.
func deadlineFrom(source string) string {
	switch source {
	case record.DeadlineOutlast:
		return "its Outlast-Timeout or Outlast-Deadline"
	case record.DeadlineSDK:
		return "its SDK's timeout, X-Stainless-Timeout, less a margin"
	}
	return "the gateway's --timeout"
}

// noRetryIfRetried returns the header that tells a client not to retry a
// failure the gateway's policy has already retried, or nil.
func (x *exchange) noRetryIfRetried() http.Header {
	if x.retried() {
		return http.Header{headerShouldRetry: {"false"}}
	}
	return nil
}

// fail answers with an error the gateway made: JSON with Outlast-Error, or,
// once progress comments have gone out, an error event. The record keeps
// the status either way: the failure is what the caller got.
func (x *exchange) fail(status int, kind, msg string, extra http.Header) {
	x.rec.Error = kind
	body := append(apierr.Body(kind, msg, nil), '\n')
	progressed := x.out.commit(status, func(h http.Header) {
		for k, v := range extra {
			h[k] = v
		}
		x.ownHeaders(h)
		h.Set(HeaderError, kind)
		h.Set("Content-Type", "application/json")
		// Its own length: the answer is flushed before the handler
		// returns (see finish), too soon for net/http to count it.
		h.Set("Content-Length", strconv.Itoa(len(body)))
	})
	x.rec.Status = status
	if progressed {
		x.out.errorEvent(kind, msg, nil)
		return
	}
	x.out.write(body)
}

// done finishes the record and tells the observer and the log, once the
// caller has the answer.
func (x *exchange) done() {
	x.rec.End = time.Now()
	x.out.finish(x.cur.IdleTimeout)
	x.tellEnd() // before the attempt's bytes are counted: as it ended
	if x.forwarder < len(x.rec.Attempts) && x.rec.Committed {
		// The bytes forwarded since the last splice are the attempt's
		// being forwarded: those of the attempts before it were
		// drained, never forwarded, or counted at the splice.
		x.rec.Attempts[x.forwarder].Bytes = x.rec.Bytes - x.spliced
	}
	if o := x.g.cfg.Observer.Done; o != nil {
		o(&x.rec)
	}
	x.logLine()
}

// logLine writes the request's info line, if the logger takes it: to a
// RequestLineHandler as its fields, to another handler as the line's
// Record.
func (x *exchange) logLine() {
	ctx, h := x.r.Context(), x.g.logger.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	line := RequestLine{
		End:      x.rec.End,
		ID:       x.rec.ID,
		Run:      x.rec.Run,
		Method:   x.rec.Method,
		Path:     x.rec.Path,
		Upstream: x.rec.Upstream,
		Status:   x.rec.Status,
		Attempts: len(x.rec.Attempts),
		Took:     x.rec.End.Sub(x.rec.Start),
		Error:    x.rec.Error,
	}
	if lh, ok := h.(RequestLineHandler); ok {
		lh.HandleRequestLine(ctx, line)
		return
	}
	h.Handle(ctx, line.Record())
}
