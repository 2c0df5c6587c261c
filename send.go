package outlast

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/internal/sse"
)

// send makes one round trip with r. With FirstByteTimeout it also waits
// for the first body byte of a response that is not a failure, and with
// ResponseHeaderTimeout it bounds the wait for the headers, by cancelling
// r's context (cancel, from attemptContext). The gate, if held (release
// != nil), passes to the returned response's body, and is given back at
// once when there is no response.
func (c *call) send(r *http.Request, release func(), cancel context.CancelCauseFunc) (*http.Response, error) {
	if cancel == nil {
		resp, err := c.t.base().RoundTrip(r)
		return wrapBody(resp, err, release, nil)
	}
	headers, first := c.t.ResponseHeaderTimeout, c.t.FirstByteTimeout
	if headers <= 0 || (first > 0 && headers >= first) {
		headers = first // the first byte's bound comes first
	}
	parent, ctx := c.ctx, r.Context()
	sent := time.Now()
	timer := time.AfterFunc(headers, func() { cancel(ErrStalled) })
	resp, err := c.t.base().RoundTrip(r)
	if err != nil {
		timer.Stop()
		return wrapBody(nil, stallCause(ctx, parent, err), release, cancel)
	}
	if !timer.Stop() {
		// The headers came as the timer fired: ctx is or will be
		// cancelled, and the body with it.
		resp.Body.Close()
		return wrapBody(nil, stallCause(ctx, parent, ErrStalled), release, cancel)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection has no first byte to wait for, and its
		// body must stay the io.ReadWriteCloser it is; its context lives
		// as long as the connection.
		return wrapBody(resp, nil, release, nil)
	}
	if isFailure(resp.StatusCode) || first <= 0 {
		return wrapBody(resp, nil, release, cancel)
	}
	// The first byte's bound runs from the send, not from the headers.
	timer.Reset(max(first-time.Since(sent), 0))
	return firstByte(resp, timer, ctx, parent, release, cancel)
}

// firstByte reads the first body byte of resp before it is committed,
// and for an event stream every event up to the first that carries the
// answer (see sse.KindOf): a stream that fails before its answer begins
// (Anthropic's overloaded_error after its message_start, an error after
// the Responses API's response.created) fails the attempt while nothing
// of the answer has reached the caller, and one that ends or breaks
// there is closed early. Such a failure comes with the response, its
// body intact, for the caller if it is not retried; the events held go
// to the caller once, from the attempt that commits.
func firstByte(resp *http.Response, timer *time.Timer, ctx, parent context.Context, release func(), cancel context.CancelCauseFunc) (*http.Response, error) {
	stream := sse.IsStream(resp.Header)
	b := &body{rc: resp.Body, release: release, cancel: cancel, stream: stream}
	failure, err := b.peek()
	if !timer.Stop() {
		// The timer fired, so ctx is or will be cancelled: whatever was
		// read, the rest of the body is lost.
		return nil, b.abandon(stallCause(ctx, parent, ErrStalled))
	}
	switch {
	case failure != nil:
		b.failed = errorEvent(failure, resp.Header)
		resp.Body = b
		return resp, b.failed
	case stream && err == io.EOF && len(bytes.TrimSpace(b.head)) > 0 && !sse.HasField(b.head):
		// Something came, no line of an event stream in it, and the body
		// ended cleanly: it is a body under the stream's label (a whole
		// JSON answer, say), which the caller gets as it came.
		resp.Body = b
		return resp, nil
	case stream && err != nil && len(b.head) > 0:
		// The stream ended, or broke, before its answer began.
		return nil, b.abandon(stallCause(ctx, parent, closedEarly(err)))
	case len(b.head) > 0:
		resp.Body = b
		return resp, nil
	case err == io.EOF && !stream:
		// A clean, empty body is a complete answer.
		resp.Body = b
		return resp, nil
	case err == io.EOF:
		return nil, b.abandon(ErrClosedEarly)
	default:
		return nil, b.abandon(stallCause(ctx, parent, closedEarly(err)))
	}
}

func closedEarly(err error) error {
	if err == io.EOF {
		return ErrClosedEarly
	}
	return fmt.Errorf("%w: %w", ErrClosedEarly, err)
}

// maxHeld bounds how much of an event stream is read before commit:
// past it, the stream is committed whatever it holds.
const maxHeld = 64 << 10

// peek reads the first byte of the body into head, and for a stream the
// events up to the first that carries the answer, ends it or fails it,
// up to maxHeld: what a client dispatches nothing for (comments, a
// proxy's keep-alive) and the events before the answer (sse.Preamble)
// are held. It returns the error event the stream sent instead of its
// answer, if it sent one, and the read's error, if the reads ended in
// one before the answer began or the bound was reached; past either,
// what follows is the caller's to read.
func (b *body) peek() (failure *sse.Event, err error) {
	n, err := readSome(b.rc, b.one[:])
	b.head = b.one[:n]
	if n == 0 || !b.stream || err != nil {
		return nil, err
	}
	buf := append(make([]byte, 0, 512), b.head...)
	var s sse.Scanner
	scanned := 0
	for {
		for scanned < len(buf) {
			m, ended := s.Scan(buf[scanned:])
			scanned += m
			if !ended {
				continue
			}
			if k, ok := decisive(s.Event()); ok {
				b.head = buf
				if k == sse.Failure {
					ev := *s.Event() // its bytes are buf's or s's, which nothing writes again
					return &ev, nil
				}
				return nil, nil
			}
		}
		if err != nil || len(buf) >= maxHeld {
			b.head = buf
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var m int
		m, err = b.rc.Read(buf[len(buf):min(cap(buf), maxHeld)])
		buf = buf[:len(buf)+m]
	}
}

// decisive returns the kind of ev, a block of the stream before the
// commit, and whether it decides the attempt: the answer began or ended,
// or the stream failed instead.
func decisive(ev *sse.Event) (sse.Kind, bool) {
	if !ev.HasData {
		return 0, false // a comment, or a keep-alive: no client dispatches it
	}
	k := sse.KindOf(ev)
	return k, k != sse.Preamble
}

// abandon closes a body that will not be committed and returns err.
func (b *body) abandon(err error) error {
	b.rc.Close()
	b.finish()
	return err
}

// readSome reads until it gets a byte or an error.
func readSome(r io.Reader, p []byte) (int, error) {
	for {
		n, err := r.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// stallCause returns the error for an attempt that failed under a
// first-byte timer: the caller's own error when the caller's context ended,
// ErrStalled when the timer fired, and err otherwise.
func stallCause(ctx, parent context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		return perr // the caller's: its cancellation, or its deadline
	}
	if context.Cause(ctx) == ErrStalled {
		return ErrStalled
	}
	return err
}

// wrapBody gives resp a body that releases the gate and cancels the
// attempt's context when it is read to its end or closed. Without a
// response, it does both at once and returns err.
func wrapBody(resp *http.Response, err error, release func(), cancel context.CancelCauseFunc) (*http.Response, error) {
	if resp == nil {
		if release != nil {
			release()
		}
		if cancel != nil {
			cancel(nil)
		}
		return nil, err
	}
	if release == nil && cancel == nil {
		return resp, nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is a connection to keep, not a response to read: the
		// attempt is over. Its context must live on with it.
		if release != nil {
			release()
		}
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, release: release, cancel: cancel}
	return resp, nil
}

// body wraps a committed response's body to give back what the attempt
// held once the caller is done with it.
type body struct {
	rc      io.ReadCloser
	head    []byte  // bytes read before commit, not yet given to the caller
	one     [1]byte // storage for head
	release func()
	cancel  context.CancelCauseFunc
	stream  bool         // an event stream, whose head is its events up to the answer's start
	failed  *StatusError // the error event its stream failed with before its answer began, if it did

	released  atomic.Bool // release has been called
	cancelled atomic.Bool // cancel has been called
}

func (b *body) failure() *StatusError { return b.failed }

func (b *body) Read(p []byte) (int, error) {
	n := 0
	if len(b.head) > 0 {
		n = copy(p, b.head)
		b.head = b.head[n:]
		if b.stream || len(b.head) > 0 || n == len(p) {
			// A stream's held events go alone, at once.
			return n, nil
		}
		// The byte read ahead of a body that is not a stream comes with
		// what follows it, so that the caller gets them in one read. If
		// nothing follows yet, the read waits for it: harmless for an
		// answer that is read to its end anyway.
	}
	m, err := b.rc.Read(p[n:])
	n += m
	if err == io.EOF && b.release != nil {
		// The server's slot is free once the response has ended, even if
		// the caller is slow to close the body.
		b.releaseOnce()
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.finish()
	return err
}

// finish releases the gate and cancels the attempt's context, once.
func (b *body) finish() {
	b.releaseOnce()
	if b.cancel != nil && !b.cancelled.Swap(true) {
		b.cancel(nil)
	}
}

// releaseOnce releases the gate the first time it is called. Read and
// Close may race (a caller may close the body to abort a read).
func (b *body) releaseOnce() {
	if b.release != nil && !b.released.Swap(true) {
		b.release()
	}
}
