package outlast

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/outlast-llm/outlast/internal/owned"
	"github.com/outlast-llm/outlast/internal/sse"
)

// AttemptHeader is sent with every attempt a Transport makes under a policy,
// with the attempt's number. An outlast gateway that receives it knows an
// outer layer is retrying, and makes one attempt only: the outermost-only
// rule, across HTTP.
const AttemptHeader = "Outlast-Attempt"

// DefaultMaxBufferedBody is the largest request body, without GetBody, that
// a Transport buffers so that it can send it again.
const DefaultMaxBufferedBody = 32 << 20

// drainLimit bounds how much of a thrown-away response is read so that its
// connection can be reused; a longer body is closed unread.
const drainLimit = 64 << 10

// A Gate bounds the requests in flight per key. Acquire blocks until the
// request may be sent, calling queued once, without holding a lock, if it
// must wait behind ahead others. It returns an error that is ErrBusy when
// the queue is full, or ctx.Err(). The caller calls release when the
// request is done; release is idempotent. Package gate provides one.
type Gate interface {
	Acquire(ctx context.Context, key string, queued func(ahead int)) (release func(), err error)
}

// Transport is an http.RoundTripper that retries failed requests under a
// [Policy], holds a [Gate] around each attempt, and reports every attempt to
// [Hooks]. Use it as http.Client{Transport: &outlast.Transport{…}} under any
// SDK, with the SDK's own retries off.
//
// The zero value sends each request once through http.DefaultTransport.
// A Transport is safe for concurrent use once its fields are set.
//
// # Commit point
//
// Nothing is sent again once a byte of the response body may have reached
// the caller. Returning a response from RoundTrip is that point: a response
// is returned when its status is not a failure, when the failure is not
// retryable, or when the policy has no retry left. Before it, failed
// attempts are drained, closed and retried; each read the Transport makes
// of a failure's body (its drain, its RetryInfo) ends after 5 s, so a
// failure whose body stalls costs no more. With FirstByteTimeout set, the
// Transport also reads the first body byte before it commits, and for an
// event stream the events up to the first that carries the answer, so a
// response that ends, stalls or sends an error before then is retried too.
//
// # Request bodies
//
// An attempt after the first gets its body from Request.GetBody, which
// http.NewRequest sets for in-memory bodies. A body without GetBody is
// buffered, up to MaxBufferedBody, so that it can be replayed. A larger one
// is streamed once, and its request is not retried.
//
// # Double billing
//
// A provider may finish and bill an attempt whose response never arrived:
// one that timed out, or whose connection broke. Retrying it can bill the
// request twice. A context deadline bounds how often this can happen; a
// request with no deadline and long waits is the most exposed.
type Transport struct {
	// Base sends each attempt. If nil, http.DefaultTransport is used.
	Base http.RoundTripper

	// Name, if not empty, names the upstream in every Attempt this
	// Transport reports (Attempt.Upstream): the upstream that a
	// [Fallback] sent it to, say.
	Name string

	// Policy says when to retry. If nil, requests are sent once unless
	// their context carries a policy (see WithPolicy), which takes
	// precedence over this one. It is read only after a failure.
	Policy *Policy

	// Gate, if not nil, is held around each attempt, never during the
	// waits between attempts, whether or not there is a policy. For a
	// returned response it is held until the body is read to its end or
	// closed, because the server is busy with the request until then.
	Gate Gate

	// GateKey names the gate key for a request. If nil, the request's
	// host is the key. An Admission is keyed by it too.
	GateKey func(*http.Request) string

	// Admission, if not nil, treats an outage as the upstream's: while a
	// key is down, one probe is sent and the other requests wait their
	// turn before the gate (see Admission). Share one Admission between
	// the Transports that reach the same upstream. It costs one atomic
	// load a request while every key is healthy.
	Admission *Admission

	// AdmissionKey names the Admission's key for a request. If nil, the
	// gate key is (GateKey). A gateway whose gate keys are a server's
	// slots keys its Admission by the server, which is down or up as a
	// whole.
	AdmissionKey func(*http.Request) string

	// Hooks are told of every attempt.
	Hooks Hooks

	// Logger, if set, receives a warn line as each retry is sent, with
	// how long it waited since the failure, and one for a server's delay
	// that MaxRetryAfter cut. If nil, the Transport logs nothing: a
	// library speaks only when asked, and Hooks tell of every attempt.
	Logger *slog.Logger

	// FirstByteTimeout, if positive, makes each attempt wait for the first
	// body byte of a successful response before committing, for at most
	// this long from when the attempt is sent. For an event stream
	// (text/event-stream) it waits for the first event that carries the
	// answer (text, a tool call, reasoning) or ends it: the events before
	// it (Anthropic's message_start and ping, OpenAI's role chunk, the
	// Responses API's response.created, keep-alive comments) carry none
	// of the answer and are held, so that an error event after them
	// fails the attempt and is retried (ErrErrorEvent); what is held is
	// bounded at 64 KiB, and goes to the caller once, from the attempt
	// that commits. An attempt that gets neither in time fails with
	// ErrStalled; an event stream that ends, or a body that fails, before
	// it fails with ErrClosedEarly. A clean empty body of any other type
	// is a complete answer. Zero commits at the response headers.
	FirstByteTimeout time.Duration

	// ResponseHeaderTimeout, if positive, bounds the time from sending an
	// attempt to its response headers, as http.Transport's field of the
	// same name does, but as a retryable failure: an attempt that gets no
	// headers in time fails with ErrStalled. It is for event streams,
	// whose servers send their headers at once and their first event when
	// generation starts, so that a silent server is given up on long
	// before a model that thinks before its first token would be; a
	// non-stream answer's headers come with its body. Past the headers,
	// FirstByteTimeout, if longer, still bounds the first byte. Zero means
	// no bound of its own.
	ResponseHeaderTimeout time.Duration

	// MaxRetryAfter bounds a server's delay (Retry-After, retry-after-ms,
	// or a spent rate limit's reset) as the Transport reads it: a longer
	// one is taken as this bound, for the policy's wait and for the
	// Admission's not-before time, after which the key is probed as
	// usual. The attempt's record says so (Attempt.RetryAfterCut), and a
	// warning is logged. One answer from a broken or hostile server must
	// not hold a key for years. Zero means DefaultMaxRetryAfter (5 min); a
	// negative value means no bound.
	MaxRetryAfter time.Duration

	// MaxBufferedBody is the largest request body without GetBody that is
	// buffered for replay. Zero means DefaultMaxBufferedBody (32 MiB); a
	// negative value means never buffer, so such requests are not retried.
	MaxBufferedBody int64
}

// NewTransport returns a Transport that sends through base (nil means
// http.DefaultTransport) under p, after checking p with Validate. Setting
// the fields directly works as well; the policy is then checked at the
// first failure.
func NewTransport(base http.RoundTripper, p *Policy) (*Transport, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Transport{Base: base, Policy: p}, nil
}

// RoundTrip sends req, retrying it as the policy says, and returns the
// last attempt's response or error. It implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, err := t.newCall(req)
	if err != nil {
		return nil, err
	}
	for {
		res, err := c.attempt()
		if err != nil || res.fail == nil {
			return res.resp, err
		}
		// The policy is read only now that an attempt has failed.
		wait, retry, err := c.sched.decide(c.ctx, res.fail, res.at.Start, res.admitted, res.news)
		if err != nil || !retry {
			return c.stop(res, err)
		}
		if err := c.wait(res, wait); err != nil {
			return nil, err
		}
	}
}

// newCall starts the RoundTrip of req. Under a policy, and with no outer
// layer retrying already, it marks the context and makes the body
// replayable.
func (t *Transport) newCall(req *http.Request) (call, error) {
	ctx := req.Context()
	c := call{t: t, req: req, ctx: ctx, hooks: hooksOf(&t.Hooks, ctx)}
	p := t.policy(ctx)
	if p == nil || marked(ctx) {
		return c, nil
	}
	if err := c.prepareReplay(); err != nil {
		return c, err
	}
	c.retry = true
	c.sched = schedule{p: p, once: c.body != nil && c.getBody == nil}
	c.mark = mark(ctx, p)
	c.ctx = c.mark
	return c, nil
}

// call is one RoundTrip: the caller's request and the state carried from
// one attempt to the next.
type call struct {
	t     *Transport
	req   *http.Request
	ctx   context.Context // req's context, marked when it may retry
	mark  *markCtx        // the mark, when this layer retries
	hooks callHooks
	retry bool     // under a policy, with no outer layer retrying: attempts carry AttemptHeader
	sched schedule // the retry decisions; its zero value never retries
	n     int      // the attempts made so far

	arrived arrival                       // the request's arrival, for an Admission's queue: its first attempt's start
	last    error                         // the last attempt's failure, once one has failed
	failed  time.Time                     // when last failed, for the retry's log line
	getBody func() (io.ReadCloser, error) // replays the body; nil when it cannot be
	body    io.ReadCloser                 // the first attempt's body
}

// result is what one attempt produced. fail is nil for a response to
// return at once; otherwise resp, if any, is a failed response whose body
// is still unread.
type result struct {
	resp     *http.Response
	fail     error
	at       Attempt
	admitted bool    // the Admission let it through a troubled key: the request's waits do not advance
	news     keyNews // what the Admission made of its failure, for the retry's wait
}

// attempt makes the next attempt: it takes the gate, sends, and classifies
// the result. It reports the attempt's start, and its end when it is not a
// failure; a failure's end is reported once the wait that follows it is
// known. The error is for a request that was never sent: a busy gate, the
// caller's context, or a body that could not be replayed.
func (c *call) attempt() (result, error) {
	c.n++
	if c.mark != nil {
		c.mark.n.Store(int32(min(c.n, math.MaxInt32)))
	}
	res := result{at: Attempt{N: c.n, Upstream: c.t.Name}}
	ctx, cancel := c.attemptContext()
	r, err := c.attemptRequest(ctx, c.n)
	if err != nil {
		cancelAttempt(cancel)
		return res, err
	}
	tok, err := c.admit(r, &res.at)
	res.admitted = tok != nil
	if err != nil {
		cancelAttempt(cancel)
		closeBody(r)
		return res, err
	}
	release, err := c.acquire(r, &res.at)
	if err != nil {
		cancelAttempt(cancel)
		tok.release()
		closeBody(r)
		return res, err
	}
	tok.sending()
	active := c.hooks.active()
	if active {
		res.at.CallID = NewCallID()
	}
	if active || c.retry { // the start is read by hooks, and by Window
		res.at.Start = time.Now()
		if c.arrived.at.IsZero() {
			c.arrived.at = res.at.Start // an Admission keeps a retry's place by it
		}
	}
	if active {
		guarded(func() { c.hooks.start(res.at) }, func() {
			cancelAttempt(cancel)
			if release != nil {
				release()
			}
			tok.release()
			closeBody(r)
		})
	}
	if c.last != nil && c.t.Logger != nil {
		// Logged as it is sent, the wait it tells of is the whole of
		// it: the policy's, and the Admission's and the gate's after.
		logRetry(c.ctx, c.t.Logger, res.at.Key, c.n, c.last, time.Since(c.failed))
	}
	resp, err := c.send(r, release, cancel)
	c.judge(r, resp, err, &res, active)
	c.admitted(r, tok, &res)
	if active && res.fail == nil {
		guarded(func() { c.hooks.end(res.at) }, func() { discard(res.resp) })
	}
	return res, nil
}

// guarded calls hook, and if it panics, cleanup before the panic goes on:
// a hook's panic, which net/http's server recovers, must not keep a gate's
// slot, an Admission's token or a response's connection that nobody will
// give back.
func guarded(hook, cleanup func()) {
	done := false
	defer func() {
		if !done {
			cleanup()
		}
	}()
	hook()
	done = true
}

// judge fills res with an attempt's response or error: a failure, with
// its status, the server's delay and its class, or an answer to return.
// active says that hooks will read the attempt's end.
func (c *call) judge(r *http.Request, resp *http.Response, err error, res *result, active bool) {
	// time.Now is a measurable part of a success's cost: the end is read
	// only when someone will look at it.
	if err == nil && !isFailure(resp.StatusCode) {
		if se := streamFailure(resp); se != nil {
			// A stream that opened with an error event, which a layer
			// under this one returned for its caller: this layer, which
			// retries, judges it as that one did.
			err = se
		}
	}
	if active || err != nil || isFailure(resp.StatusCode) {
		res.at.End = time.Now()
	}
	res.resp = resp
	switch {
	case err != nil:
		// resp, if any, is a stream that opened with an error event.
		res.fail = err
		var se *StatusError
		if errors.As(err, &se) {
			res.at.Status = se.StatusCode
			if errors.Is(err, ErrErrorEvent) && se.RetryAfter == 0 {
				// The server's delay, from the stream's headers, as a
				// failed status's: cut, and recorded, as one.
				if d, ok := RetryAfter(se.Header, res.at.End); ok {
					se.RetryAfter, res.at.RetryAfterCut = c.capDelay(r, d)
					res.at.RetryAfter = se.RetryAfter
				}
			}
		}
	case isFailure(resp.StatusCode):
		d, ok := RetryAfter(resp.Header, res.at.End)
		if !ok {
			d, _ = bodyRetryInfo(resp)
		}
		d, res.at.RetryAfterCut = c.capDelay(r, d)
		res.fail = &StatusError{StatusCode: resp.StatusCode, Header: resp.Header, RetryAfter: d}
		res.at.Status, res.at.RetryAfter = resp.StatusCode, d
	default:
		res.at.Status = resp.StatusCode
		return
	}
	res.at.Err, res.at.Class = res.fail, Classify(res.fail)
}

// closeBody closes r's body: RoundTrip must, even on an error
// (http.RoundTripper).
func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// admit waits at the Transport's Admission, if it has one and r's key is
// not healthy, until the attempt may be sent, recording the wait on at.
// The wait is bounded by the deadline less the policy's reserve.
func (c *call) admit(r *http.Request, at *Attempt) (*admToken, error) {
	a := c.t.Admission
	if a == nil {
		return nil, nil
	}
	if a.RetryBudget > 0 {
		if retry, _ := c.retrying(); retry && !a.retryAllowed() {
			return nil, c.withLast(ErrRetryBudget)
		}
	}
	if a.troubled.Load() == 0 {
		return nil, nil // every key healthy: the success path's one atomic load
	}
	key := c.t.admissionKey(r)
	// Every wait here, the first attempt's too, counts against the
	// deadline less the reserve of the layer that retries.
	bound := c.bound()
	hooks := c.hooks
	tok, waited, err := a.admit(c.ctx, key, &c.arrived, bound, func(n int) { hooks.queued(key, n) })
	at.AdmissionWait, at.Probe = waited, tok != nil && tok.probe
	return tok, err
}

// retrying reports whether the attempt about to be made is a retry, and
// the reserve of the layer that retries the request: this one, or an
// outer one that the context's mark tells of (Do around this Transport).
// Without either, there is no retry and no reserve.
func (c *call) retrying() (retry bool, reserve time.Duration) {
	if c.retry {
		return c.n > 1, c.sched.p.ReserveInForce()
	}
	if m := markOf(c.ctx); m != nil {
		return m.n.Load() > 1, m.reserve
	}
	return false, 0
}

// admitted tells the Admission of the attempt's result and gives back what
// it held: at once for a failure, and for a response returned to the
// caller when its body ends, as the gate is.
func (c *call) admitted(r *http.Request, tok *admToken, res *result) {
	a := c.t.Admission
	if a == nil {
		return
	}
	if a.RetryBudget > 0 && res.at.Class != ClassCanceled {
		a.spend(res.fail != nil && IsRetryable(res.fail))
	}
	var pause time.Duration
	if res.resp != nil {
		// A pool's member is paced by its pool's ledger, which counts
		// its limits' refill finer than a pause until the whole reset;
		// the context is asked only of a spent limit, off the success
		// path.
		if pause = rateLimitPause(res.resp.Header); pause > 0 && inPool(r.Context()) {
			pause = 0
		}
		if pause > 0 {
			var cut bool
			pause, cut = c.capDelay(r, pause)
			res.at.RetryAfterCut = res.at.RetryAfterCut || cut
		}
	}
	if tok == nil && res.fail == nil && pause == 0 && a.troubled.Load() == 0 {
		return
	}
	o := outcome{class: res.at.Class, status: res.at.Status, delay: res.at.RetryAfter, pause: pause, limit: c.t.maxRetryAfter(), err: res.fail}
	spaces, held, own, troubled := a.report(c.t.admissionKey(r), c.t.gateCapacity(), tok, o)
	res.news.own = res.fail != nil && own
	if tok != nil && res.fail == nil && res.resp.StatusCode != http.StatusSwitchingProtocols {
		res.resp.Body = &admBody{ReadCloser: res.resp.Body, tok: tok}
		return
	}
	if tok != nil {
		// The release may leave the key healthy, with nothing left to
		// space the retry: then the policy's wait does.
		troubled = tok.release()
	}
	// A failure that left the key troubled is spaced by the key, even
	// for an attempt that went while it was healthy: a lone request
	// whose own failures marked the key down follows its probes, or a
	// server's not-before time, rather than its own longer wait.
	res.news.spaced = res.fail != nil && spaces && troubled
	res.news.held = held && res.news.spaced
}

// admBody gives back an Admission's hold when a response's body ends.
type admBody struct {
	io.ReadCloser
	tok *admToken
}

func (b *admBody) failure() *StatusError { return bodyFailure(b.ReadCloser) }

func (b *admBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.tok.release()
	}
	return n, err
}

func (b *admBody) Close() error {
	err := b.ReadCloser.Close()
	b.tok.release()
	return err
}

// attemptContext returns the context of the next attempt: the call's, or,
// when a timeout bounds the attempt, a child of it that send cancels when
// the timeout fires (cancel, nil otherwise). It is made before the
// attempt's request, so that the request is copied once, for both the
// mark and the timeout.
func (c *call) attemptContext() (context.Context, context.CancelCauseFunc) {
	if c.t.FirstByteTimeout <= 0 && c.t.ResponseHeaderTimeout <= 0 {
		return c.ctx, nil
	}
	return context.WithCancelCause(c.ctx)
}

// cancelAttempt ends the context of an attempt that will not be sent.
func cancelAttempt(cancel context.CancelCauseFunc) {
	if cancel != nil {
		cancel(nil)
	}
}

// attemptRequest returns the request for attempt n, under ctx: the
// caller's own when there is no policy and ctx is the caller's, else a
// copy that carries ctx and, under a policy, AttemptHeader.
func (c *call) attemptRequest(ctx context.Context, n int) (*http.Request, error) {
	if !c.retry {
		if ctx == c.ctx {
			return c.req, nil
		}
		return c.req.WithContext(ctx), nil
	}
	r := c.req.WithContext(ctx)
	if n == 1 && owned.HasHeaders(c.ctx) {
		// The map is the request's own (the gateway's): the first
		// attempt may mark it. A retry copies it, since the first
		// attempt's request may still be being written.
		r.Header = c.req.Header
		r.Header[AttemptHeader] = attemptValue(1)
		r.GetBody, r.Body = c.getBody, c.body
		return r, nil
	}
	// A shallow copy of the header map: the values are shared, never
	// changed, and only the new key is added.
	h := make(http.Header, len(c.req.Header)+1)
	for k, v := range c.req.Header {
		h[k] = v
	}
	h[AttemptHeader] = attemptValue(n)
	r.Header = h
	r.GetBody = c.getBody
	if n == 1 {
		r.Body = c.body
		return r, nil
	}
	if c.getBody != nil {
		b, err := c.getBody()
		if err != nil {
			return nil, fmt.Errorf("outlast: replaying the request body: %w", err)
		}
		r.Body = b
	}
	return r, nil
}

// attemptValues are AttemptHeader's values for the first attempts, made
// once: the header map of each attempt is a fresh copy, but its values,
// like the caller's, are shared and never changed.
var attemptValues = func() [16][]string {
	var v [16][]string
	for i := range v {
		v[i] = []string{strconv.Itoa(i + 1)}
	}
	return v
}()

// attemptValue returns AttemptHeader's value for attempt n.
func attemptValue(n int) []string {
	if n >= 1 && n <= len(attemptValues) {
		return attemptValues[n-1]
	}
	return []string{strconv.Itoa(n)}
}

// acquire takes the gate for r, if there is one, recording the wait on at.
func (c *call) acquire(r *http.Request, at *Attempt) (release func(), err error) {
	g := c.t.Gate
	if g == nil {
		return nil, nil
	}
	key := c.t.gateKey(r)
	ahead, hooks := 0, c.hooks // copies, so that the closure does not move c to the heap
	ctx, stop := c.gateContext()
	defer stop()
	start := time.Now()
	release, err = g.Acquire(ctx, key, func(n int) {
		ahead = n
		hooks.queued(key, n)
	})
	at.Key, at.Ahead, at.GateWait = key, ahead, time.Since(start)
	switch {
	case err == nil:
		return release, nil
	case ctx.Err() != nil && c.ctx.Err() == nil:
		// The reserve's edge came first: the caller's deadline is not
		// over, but what is left of it is the caller's, not this run's.
		return nil, c.withLast(ErrNoTime)
	}
	return nil, errBusyGate(key, err)
}

// gateContext bounds a retry's wait at the gate, under a deadline, by the
// deadline less the reserve: no wait before a retry may eat into the
// reserve, and the gate's queue is such a wait. That holds for an outer
// layer's retry too (Do around this Transport), with the outer reserve.
// The first attempt, like the first attempt without a gate, may use the
// whole deadline.
func (c *call) gateContext() (context.Context, context.CancelFunc) {
	retry, reserve := c.retrying()
	if !retry {
		return c.ctx, func() {} // a first attempt reads no deadline
	}
	deadline, ok := c.ctx.Deadline()
	if !ok {
		return c.ctx, func() {}
	}
	return context.WithDeadline(c.ctx, boundOf(deadline, reserve))
}

// bound is the request's deadline less the reserve of the layer that
// retries it (see Policy.Bound), or zero without a deadline.
func (c *call) bound() time.Time {
	deadline, _ := c.ctx.Deadline()
	_, reserve := c.retrying()
	return boundOf(deadline, reserve)
}

// errBusyGate wraps a gate's refusal so that its text names the key.
func errBusyGate(key string, err error) error {
	if isBusy(err) {
		return fmt.Errorf("outlast: gate %q: %w", key, err)
	}
	return err
}

// isFailure reports whether a status is a failure for the policy to judge.
func isFailure(code int) bool { return code >= 400 }

// stop ends a call whose last attempt failed and will not be retried:
// it returns the failed response, if there is one, or the failure. An
// error from the decision itself (an invalid policy) wins over both.
func (c *call) stop(res result, err error) (*http.Response, error) {
	guarded(func() { c.hooks.end(res.at) }, func() { discard(res.resp) })
	if err != nil {
		discard(res.resp)
		return nil, err
	}
	if res.resp != nil {
		return res.resp, nil
	}
	return nil, res.fail
}

// wait reports a failed attempt that will be retried, throws its response
// away, and waits before the next attempt.
func (c *call) wait(res result, wait time.Duration) error {
	// The wait runs from now: hooks and draining the failed response
	// come out of it, not on top of it, so it still ends inside the
	// bound that decide checked.
	wake := time.Now().Add(wait)
	res.at.RetryIn = wait
	guarded(func() { c.hooks.end(res.at) }, func() { discard(res.resp) })
	c.last, c.failed = res.fail, time.Now()
	discard(res.resp)
	if err := sleep(c.ctx, time.Until(wake)); err != nil {
		return waitErr(err, wait, res.fail)
	}
	return nil
}

// discard drains a little of a response that is thrown away, so its
// connection can be reused, and closes it, which also releases its gate.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	// An event stream may stay open after its error event: reading it
	// could block, so it is closed unread, as is a long body.
	known := resp.ContentLength >= 0 && resp.ContentLength <= drainLimit
	if known || (resp.ContentLength == -1 && !sse.IsStream(resp.Header)) {
		stop := closeAfter(resp.Body, failureRead)
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		stop()
	}
	resp.Body.Close()
}

// failureRead bounds each read of a failed response's body that the
// Transport makes itself (its RetryInfo, its context-length error, the
// drain before a retry): a server that sends a failure's headers and then
// nothing must not hold the request, and its retry, to its deadline.
const failureRead = 5 * time.Second

// closeAfter closes body after d, unless stop is called first: a read of
// it in progress then ends with an error.
func closeAfter(body io.Closer, d time.Duration) (stop func() bool) {
	return time.AfterFunc(d, func() { body.Close() }).Stop
}

// prepareReplay makes sure the body can be sent again, buffering it when
// the request has no GetBody.
func (c *call) prepareReplay() error {
	r := c.req
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	c.body, c.getBody = r.Body, r.GetBody
	if c.getBody != nil {
		return nil
	}
	limit := c.t.MaxBufferedBody
	if limit == 0 {
		limit = DefaultMaxBufferedBody
	}
	if limit < 0 {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		r.Body.Close()
		return fmt.Errorf("outlast: reading the request body to buffer it: %w", err)
	}
	if int64(len(buf)) > limit {
		// Too large to keep: send it once, as read so far plus the rest.
		c.body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return nil
	}
	r.Body.Close()
	c.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	c.body, _ = c.getBody()
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// CloseIdleConnections closes the idle connections of Base, if it has
// such a method.
func (t *Transport) CloseIdleConnections() {
	type closer interface{ CloseIdleConnections() }
	if c, ok := t.base().(closer); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// policy returns the policy of a request under ctx: its context's, which
// takes precedence, or the Transport's; nil for none.
func (t *Transport) policy(ctx context.Context) *Policy {
	if p, ok := policyFrom(ctx); ok {
		return p
	}
	return t.Policy
}

// capDelay returns d, a server's delay for r, cut to MaxRetryAfter, and
// whether it was cut, which it logs.
func (c *call) capDelay(r *http.Request, d time.Duration) (time.Duration, bool) {
	limit := c.t.maxRetryAfter()
	if limit == 0 || d <= limit {
		return d, false
	}
	if l := c.t.Logger; l != nil && l.Enabled(c.ctx, slog.LevelWarn) {
		l.LogAttrs(c.ctx, slog.LevelWarn, "outlast: the server's delay was cut",
			slog.String("key", c.t.admissionKey(r)), slog.Duration("asked", d), slog.Duration("cut_to", limit))
	}
	return limit, true
}

// maxRetryAfter returns MaxRetryAfter in force, or 0 for no bound.
func (t *Transport) maxRetryAfter() time.Duration {
	return inForce(t.MaxRetryAfter, DefaultMaxRetryAfter)
}

// withLast wraps err, why a retry cannot go, with the last attempt's
// failure; an outer layer's retry has none here, since it knows it.
func (c *call) withLast(err error) error {
	if c.last == nil {
		return err
	}
	return fmt.Errorf("%w (the last attempt: %w)", err, c.last)
}

// gateCapacity returns the capacity of t's Gate, if it has a Capacity
// method, else 0: a recovering key's limit ends there unless the
// Admission's MaxLimit says otherwise.
func (t *Transport) gateCapacity() int {
	if g, ok := t.Gate.(interface{ Capacity() int }); ok {
		return g.Capacity()
	}
	return 0
}

func (t *Transport) admissionKey(r *http.Request) string {
	if t.AdmissionKey != nil {
		return t.AdmissionKey(r)
	}
	return t.gateKey(r)
}

func (t *Transport) gateKey(r *http.Request) string {
	if t.GateKey != nil {
		return t.GateKey(r)
	}
	return r.URL.Host
}
