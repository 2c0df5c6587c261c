package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outlast-llm/outlast"
)

// exchange is one request through the gateway, from arrival to the last
// byte forwarded.
type exchange struct {
	g    *Gateway
	up   *upstream
	w    http.ResponseWriter
	r    *http.Request
	path string // the path to forward, the upstream's prefix removed
	rec  Request
	opts options

	// mu guards w, progressed and committed while a progress ticker may
	// write comments from its own goroutine.
	mu         sync.Mutex
	progressed bool // progress comments have been sent: the status is 200
	committed  bool // the response's status line has been written
}

func newExchange(g *Gateway, up *upstream, w http.ResponseWriter, r *http.Request, path string) *exchange {
	return &exchange{g: g, up: up, w: w, r: r, path: path, rec: Request{
		ID:       outlast.NewCallID(),
		Method:   r.Method,
		Path:     r.URL.Path,
		Header:   g.observedHeader(r.Header),
		Upstream: up.Name,
		Start:    time.Now(),
	}}
}

func (x *exchange) serve() {
	defer x.done()
	var err error
	if x.opts, err = parseOptions(x.r.Header, x.up.Policy, x.rec.Start); err != nil {
		x.fail(http.StatusBadRequest, "invalid", err.Error(), nil)
		return
	}
	x.rec.Run, x.rec.Slot = x.opts.run, x.opts.slot
	body, ok := x.readBody()
	if !ok {
		return
	}
	x.inspect(body)
	ctx, cancel := x.context()
	defer cancel(nil)
	out := x.outbound(ctx, body)
	stop := x.startProgress()
	resp, err := x.up.transport.RoundTrip(out)
	stop()
	if err != nil {
		x.failed(ctx, err)
		return
	}
	x.forward(resp, cancel)
}

// readBody reads the request body for replay, refusing one over MaxBody
// before anything is forwarded.
func (x *exchange) readBody() ([]byte, bool) {
	limit := x.g.cfg.MaxBody
	if x.r.ContentLength > limit {
		x.fail(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("outlast: the request body is %d bytes; the most is %d (--max-body)", x.r.ContentLength, limit), nil)
		return nil, false
	}
	if x.r.Body == nil || x.r.Body == http.NoBody {
		return nil, true
	}
	body, err := readAll(x.r.Body, x.r.ContentLength, limit+1)
	if err != nil {
		x.fail(http.StatusBadRequest, "invalid", "outlast: reading the request body: "+err.Error(), nil)
		return nil, false
	}
	if int64(len(body)) > limit {
		x.fail(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("outlast: the request body is over %d bytes (--max-body)", limit), nil)
		return nil, false
	}
	return body, true
}

// inspect reads what the record and the gate need from a JSON body: the
// model, whether it streams, and llama.cpp's id_slot (-1 means any slot).
func (x *exchange) inspect(body []byte) {
	x.rec.Stream = strings.Contains(x.r.Header.Get("Accept"), "text/event-stream")
	if len(body) == 0 || body[0] != '{' {
		return
	}
	// A body it cannot follow is not the gateway's to judge: the upstream
	// will answer it, and the fields read before the trouble stand.
	f, _ := scanBody(body)
	x.rec.Model = f.model
	x.rec.Stream = x.rec.Stream || f.stream
	if x.rec.Slot == "" && f.slot >= 0 {
		x.rec.Slot = strconv.Itoa(f.slot)
	}
}

type gateKey struct{}

// gateKeyOf is the upstream Transport's GateKey: the named slot, or "".
func gateKeyOf(r *http.Request) string {
	k, _ := r.Context().Value(gateKey{}).(string)
	return k
}

// context returns the context of the attempts: the caller's, with the
// request's deadline, policy, slot and hooks. Its cancel ends the
// upstream response, for the idle timeout.
func (x *exchange) context() (context.Context, context.CancelCauseFunc) {
	ctx := x.r.Context()
	stopDeadline := context.CancelFunc(func() {})
	if !x.opts.deadline.IsZero() {
		ctx, stopDeadline = context.WithDeadline(ctx, x.opts.deadline)
	}
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func(err error) {
		cancelCause(err)
		stopDeadline()
	}
	if x.opts.policy != x.up.Policy || x.opts.outer {
		ctx = outlast.WithPolicy(ctx, x.opts.policy)
	}
	if x.rec.Slot != "" {
		ctx = context.WithValue(ctx, gateKey{}, "slot "+x.rec.Slot)
	}
	ctx = outlast.WithHooks(ctx, outlast.Hooks{
		Queued:       x.queued,
		AttemptStart: x.attemptStart,
		AttemptEnd:   x.attemptEnd,
	})
	return ctx, cancel
}

// outbound is the request to send upstream: the caller's, unchanged but
// for its URL, hop-by-hop headers and the gateway's own headers.
func (x *exchange) outbound(ctx context.Context, body []byte) *http.Request {
	// A shallow copy: the header map is replaced whole below, and nothing
	// else that the copy shares with the caller's request is changed.
	out := x.r.WithContext(ctx)
	out.RequestURI = ""
	out.Close = false // the caller's Connection: close is its hop's, not ours (as in ReverseProxy)
	out.URL = x.up.target(x.path, x.r.URL.RawQuery)
	out.Host = ""
	out.Header = forwardHeader(x.r.Header)
	out.Body, out.GetBody, out.ContentLength = nil, nil, int64(len(body))
	if body != nil {
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.Body, _ = out.GetBody()
	}
	return out
}

func (x *exchange) queued(key string, ahead int) {
	if o := x.g.cfg.Observer.Queued; o != nil {
		o(&x.rec, key, ahead)
	}
	x.comment("queued ahead=%d", ahead)
}

func (x *exchange) attemptStart(a outlast.Attempt) {
	if o := x.g.cfg.Observer.AttemptStart; o != nil {
		o(&x.rec, a)
	}
}

func (x *exchange) attemptEnd(a outlast.Attempt) {
	x.rec.Attempts = append(x.rec.Attempts, a)
	x.up.latency.observe(a.End.Sub(a.Start))
	if o := x.g.cfg.Observer.AttemptEnd; o != nil {
		o(&x.rec, a)
	}
	if a.RetryIn > 0 {
		x.comment("retrying attempt=%d in=%v status=%d", a.N+1, a.RetryIn, a.Status)
	}
}

// failed answers for a request that got no response to forward.
func (x *exchange) failed(ctx context.Context, err error) {
	switch {
	case x.r.Context().Err() != nil:
		// The caller left; there is nobody to answer.
		x.rec.Status, x.rec.Error = 499, "client-closed"
	case errors.Is(err, outlast.ErrBusy):
		x.fail(http.StatusServiceUnavailable, "busy",
			fmt.Sprintf("outlast: upstream %s is busy: its queue is full", x.up.Name),
			http.Header{"Retry-After": {strconv.Itoa(x.up.busyRetryAfter())}})
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, outlast.ErrNoTime):
		x.fail(http.StatusGatewayTimeout, "deadline",
			fmt.Sprintf("outlast: the request's deadline passed before upstream %s answered: %v", x.up.Name, err), nil)
	case outlast.Classify(err) == outlast.ClassStalled, outlast.Classify(err) == outlast.ClassTimeout:
		x.fail(http.StatusGatewayTimeout, "timeout",
			fmt.Sprintf("outlast: upstream %s did not answer in time: %v", x.up.Name, err), nil)
	default:
		x.fail(http.StatusBadGateway, "unreachable",
			fmt.Sprintf("outlast: upstream %s is unreachable: %v", x.up.Name, err), nil)
	}
}

// done records the request's end and tells the observer and the log.
func (x *exchange) done() {
	x.rec.End = time.Now()
	if o := x.g.cfg.Observer.Done; o != nil {
		o(&x.rec)
	}
	x.g.logger.LogAttrs(x.r.Context(), slog.LevelInfo, "outlast: request",
		slog.String("id", x.rec.ID),
		slog.String("run", x.rec.Run),
		slog.String("method", x.rec.Method),
		slog.String("path", x.rec.Path),
		slog.String("upstream", x.rec.Upstream),
		slog.Int("status", x.rec.Status),
		slog.Int("attempts", len(x.rec.Attempts)),
		slog.Duration("took", x.rec.End.Sub(x.rec.Start)),
		slog.String("error", x.rec.Error),
	)
}

// readAll reads r up to limit bytes into a buffer sized from the request's
// Content-Length when it gives one, so that a large body is not copied as
// the buffer grows.
func readAll(r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 || contentLength >= limit {
		return io.ReadAll(io.LimitReader(r, limit))
	}
	buf := bytes.NewBuffer(make([]byte, 0, contentLength+1))
	_, err := buf.ReadFrom(io.LimitReader(r, limit))
	return buf.Bytes(), err
}
