package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/sse"
)

// response is what the caller gets. It owns the commit: the status line is
// written once, by the upstream's response, an error the gateway makes, or
// the first progress comment, whichever comes first. A progress ticker
// writes comments from its own goroutine, so every write, and every
// reading of the state, holds mu.
type response struct {
	w    http.ResponseWriter
	rc   http.ResponseController
	body deadlineReader // the request body's, made by slowBodyReader

	mu         sync.Mutex // guards w, committed, progressed and pending
	committed  bool       // the status line has been written
	progressed bool       // by a progress comment: the caller has a 200 event stream
	pending    int        // a status line held for the body's first byte (see hold)

	// sent, if not nil, is told once, in the goroutine that serves the
	// request, when the answer's first bytes have been flushed to the
	// caller.
	sent firstSent

	// bounded is set once the connection has a write deadline, which
	// finish clears.
	bounded bool
	// abandoned is set when the caller left before its answer began: the
	// connection is then closed without one (see abandon).
	abandoned bool
	// midEvent is set when the caller's stream stopped inside an event:
	// the gateway's next event must end it first (see newEvent).
	midEvent bool
}

// newEvent ends the event the caller's stream stopped inside, if it did,
// so that the event written next is read as one of its own, not as the
// rest of that one.
func (o *response) newEvent() {
	if o.midEvent {
		o.midEvent = false
		o.w.Write(blankLine)
	}
}

// abandon closes the connection of a request whose caller left before its
// answer began, without an answer. net/http tells a handler that the
// caller left when it reads the end of the caller's side; a caller that
// only closed its sending side, as a shell's nc -N or socat does, still
// reads, and a handler that returned without a word would send it an
// empty 200 for a request never served. A closed connection tells it the
// request failed. It must be the handler's last use of w.
func abandon(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		c.Close()
		return
	}
	// HTTP/2, or a writer that cannot hand its connection over: net/http
	// resets the stream, or closes the connection, and logs nothing.
	panic(http.ErrAbortHandler)
}

// A firstSent is told when an answer's first bytes have reached the
// caller.
type firstSent interface{ tellEnd() }

// flushed tells o.sent, once, that the answer's first bytes have been
// flushed.
func (o *response) flushed() {
	if s := o.sent; s != nil {
		o.sent = nil
		s.tellEnd()
	}
}

// init makes o the response written to w. A response is a field of its
// exchange, made with it in one allocation.
func (o *response) init(w http.ResponseWriter) {
	o.w, o.rc = w, *http.NewResponseController(w)
}

// commit writes the status line, with the headers that setHeader puts in,
// unless progress comments came first. It reports whether they did: the
// caller then has a 200 event stream, and what follows must be events.
func (o *response) commit(status int, setHeader func(http.Header)) (progressed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.progressed {
		return true
	}
	setHeader(o.w.Header())
	o.w.WriteHeader(status)
	o.committed = true
	return false
}

// hold is commit for a response that is not a stream: its status line and
// headers wait for the body's first byte, which copyBody sends with them,
// so that an upstream that breaks off before it can still be answered with
// an error (see retract). It reports whether progress comments came first,
// as commit does; then nothing is held.
func (o *response) hold(status int, setHeader func(http.Header)) (progressed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.progressed {
		return true
	}
	setHeader(o.w.Header())
	o.pending = status
	return false
}

// release writes the status line that hold keeps, if any.
func (o *response) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending != 0 {
		o.w.WriteHeader(o.pending)
		o.pending, o.committed = 0, true
	}
}

// finish sends what the caller's response has buffered, if it is
// committed, so that the caller has the whole answer at once: what is
// left to do (the record, the log line) no longer delays it until the
// handler returns.
//
// The flush, and every write since bound, must be taken by the caller
// within bound (none if not positive): net/http bounds no write of its
// own, and a caller that reads nothing would hold the handler for as long
// as it keeps the connection. The connection's write deadline is cleared
// after, for the connection's next request.
func (o *response) finish(bound time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.committed {
		return
	}
	if bound > 0 && !o.bounded {
		o.bound(bound)
	}
	o.rc.Flush()
	if o.bounded {
		o.rc.SetWriteDeadline(time.Time{})
	}
}

// bound gives the caller d to take every write from now to the answer's
// end (see finish).
func (o *response) bound(d time.Duration) {
	o.rc.SetWriteDeadline(time.Now().Add(d))
	o.bounded = true
}

// retract drops the status line and headers that hold keeps, and reports
// whether it did: nothing has been sent, and an error can take their
// place.
func (o *response) retract() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending == 0 {
		return false
	}
	clear(o.w.Header())
	o.pending = 0
	return true
}

// comment writes the SSE comment ": outlast " and line. The first commits
// the response as a 200 event stream, with the headers that setHeader puts
// in. Once the response is committed otherwise, it writes nothing.
func (o *response) comment(setHeader func(http.Header), line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.committed && !o.progressed {
		return
	}
	if !o.progressed {
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		setHeader(h)
		o.w.WriteHeader(http.StatusOK)
		o.progressed, o.committed = true, true
	}
	io.WriteString(o.w, ": outlast "+line+"\n\n")
	o.rc.Flush()
}

// keepAlive writes the SSE comment ": outlast " and line to the caller's
// committed event stream, between two of its events, where every client
// skips it. A caller that takes none of it within timeout (none if not
// positive) is gone. It reports whether the comment reached the caller's
// connection.
func (o *response) keepAlive(line string, timeout time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if timeout > 0 {
		o.rc.SetWriteDeadline(time.Now().Add(timeout))
		defer o.rc.SetWriteDeadline(time.Time{})
	}
	if _, err := io.WriteString(o.w, ": outlast "+line+"\n\n"); err != nil {
		return false
	}
	return o.rc.Flush() == nil
}

// errorEvent ends an event stream with an error event of kind, whose data
// is the gateway's error JSON, quoting the upstream's answer if any.
func (o *response) errorEvent(kind, msg string, upstream []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.newEvent()
	fmt.Fprintf(o.w, "event: error\ndata: %s\n\n", apierr.Body(kind, msg, upstream))
	o.rc.Flush()
}

// slowBodyReader returns r's body read with a deadline of timeout (none
// if it is not positive) before each read, so that a body whose bytes
// stop coming ends with os.ErrDeadlineExceeded rather than holding its
// connection. The deadline is lifted at the body's end or failure, or by
// lift: a read deadline left on the connection would cut the response,
// which may stream for an hour. It stays, passed, after a body that was
// too slow: that connection is closed after its 408, and net/http, which
// reads what is left of a short body before it closes, must not wait for
// the rest of the trickle.
//
// Two of those deadlines net/http sets itself, in calls it makes anyway,
// and the reader leaves them to it: a server whose ReadTimeout is at most
// timeout (Serve's is timeout) has bounded the first read, from the
// request's start; and an HTTP/1 server takes the deadline off as the
// body ends, to watch the connection for the caller's leaving. A small
// body, read in one go, then costs no deadline of its own.
func (o *response) slowBodyReader(r *http.Request, timeout time.Duration) *deadlineReader {
	o.body = deadlineReader{r: r.Body, rc: &o.rc, timeout: timeout}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && timeout > 0 {
		o.body.firstSet = srv.ReadTimeout > 0 && srv.ReadTimeout <= timeout
		o.body.liftedAtEnd = r.ProtoMajor == 1
	}
	return &o.body
}

type deadlineReader struct {
	r           io.Reader
	rc          *http.ResponseController
	timeout     time.Duration
	set         bool // a deadline is on the connection
	firstSet    bool // the server has set the first read's
	liftedAtEnd bool // the server lifts it at the body's end
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	switch {
	case d.firstSet:
		d.firstSet, d.set = false, true
	case d.timeout > 0:
		// An error here means the connection cannot take deadlines (a
		// test's recorder): the body is read without one.
		d.set = d.rc.SetReadDeadline(time.Now().Add(d.timeout)) == nil
	}
	n, err := d.r.Read(p)
	switch {
	case err == io.EOF && d.liftedAtEnd:
		d.set = false
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		d.lift()
	}
	return n, err
}

// lift takes the deadline off the connection, if one is on it.
func (d *deadlineReader) lift() {
	if d.set {
		d.rc.SetReadDeadline(time.Time{})
		d.set = false
	}
}

// closeAfter asks that the connection be closed once the response is
// written: what follows on it cannot be trusted to start where the gateway
// stopped reading.
func (o *response) closeAfter() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Header().Set("Connection", "close")
}

// write writes p to the committed response's body. Like copyBody, it runs
// once progress comments have stopped, so it writes without mu.
func (o *response) write(p []byte) {
	o.w.Write(p)
}

// errClientGone is a write to the caller that failed: it left.
var errClientGone = errors.New("outlast: the caller closed the connection")

// errIdle ends an upstream response that fell silent for IdleTimeout.
var errIdle = errors.New("outlast: the upstream response fell silent for longer than the idle timeout")

// bufPool holds the buffers that response bodies are copied through.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies body to the response, flushing each chunk when flush is
// set, and the first in any case; a status line that hold keeps goes with
// the first byte, or at the end of an empty body. It sets *started before
// it writes the first byte and adds to *sent what reached the caller. With idle positive, a silence of
// the body longer than it calls cancel, which ends the upstream response.
// It returns nil at the body's end, errClientGone when the caller left,
// errIdle after such a silence, and the body's error otherwise.
//
// It runs after progress comments have stopped, in the goroutine that
// serves the request, so it writes without mu.
func (o *response) copyBody(body io.Reader, flush bool, idle time.Duration, cancel context.CancelCauseFunc, started *bool, sent *int64) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	w := watchIdle(idle, cancel, &o.rc)
	defer w.stop()
	for {
		n, err := body.Read(buf)
		if n > 0 {
			// The idle timeout is the upstream's silence: the time spent
			// writing to a slow caller does not count.
			w.pause()
			first := !*started
			if first {
				o.release()
			}
			*started = true
			if _, werr := o.w.Write(buf[:n]); werr != nil {
				return errClientGone
			}
			*sent += int64(n)
			// The first bytes go at once, with the status line, even if
			// the rest is buffered: a response recorded as committed has
			// reached the caller, and one cut short shows it.
			if (flush || first) && o.rc.Flush() != nil {
				return errClientGone
			}
			if first {
				o.flushed()
			}
			w.resume()
		}
		switch {
		case err == io.EOF:
			o.release() // an empty body
			return nil
		case err != nil && w.fired():
			return errIdle
		case err != nil:
			return err
		}
	}
}

// maxPending bounds the bytes of one event that a relay holds while it
// waits for the event's end: a longer event goes to the caller as it
// comes, its follower told of it at its end (see follower.passed).
const maxPending = 4 << 20

// copyEvents is copyBody for an event stream: it forwards whole events
// only, each as f passes or rewrites it, so that a break leaves no half
// event with the caller, and flushes once for the events that one read
// brought: they arrived together, and a flush each would cost a write
// each. At the body's clean end, what is left without a blank line after
// it goes to f as one more event. It returns as copyBody does, or with
// the error f returned to end the stream.
//
// It runs after progress comments have stopped, in the goroutine that
// serves the request, so it writes without mu.
func (o *response) copyEvents(body io.Reader, f follower, idle time.Duration, cancel context.CancelCauseFunc, started *bool, sent *int64) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	w := watchIdle(idle, cancel, &o.rc)
	defer w.stop()
	c := eventCopy{o: o, f: f, started: started, sent: sent, flushed: *sent}
	defer c.cutShort()
	for {
		n, err := body.Read(buf)
		if n > 0 {
			w.pause()
			if werr := c.take(buf[:n]); werr != nil {
				return werr
			}
			if werr := c.flush(); werr != nil {
				return werr
			}
			if e, ok := f.(ender); ok && e.over() {
				// The caller has the stream's last event: nothing after it
				// reaches the caller, so the stream ends here, not when an
				// upstream that keeps its response open ends it.
				drainEnd(body, buf, w)
				return c.endLine()
			}
			w.resume()
		}
		switch {
		case err == io.EOF:
			if werr := c.end(); werr != nil {
				return werr
			}
			return c.flush()
		case err != nil && w.fired():
			return errIdle
		case err != nil:
			return err
		}
	}
}

// endGrace bounds the wait for an upstream's response to end after its
// stream's last event.
const endGrace = time.Second

// drainEnd reads what follows a stream's last event, to the response's
// end, none of which reaches the caller, so that the upstream's
// connection can serve another request: an end that comes with the last
// event, as it mostly does, costs one read. An upstream that keeps its
// response open is waited for endGrace at most (w's timer, shortened),
// not its idle timeout; with no idle timeout, as long as it takes.
func drainEnd(body io.Reader, buf []byte, w *idleWatch) {
	if w.timer != nil {
		w.idle = min(w.idle, endGrace)
	}
	w.resume()
	for {
		if _, err := body.Read(buf); err != nil {
			return
		}
	}
}

// An ender is a follower that knows when the caller has a stream's last
// event ([DONE], message_stop).
type ender interface{ over() bool }

// eventCopy is copyEvents' state: the scanner over the stream, and the
// event begun in an earlier read.
type eventCopy struct {
	o       *response
	f       follower
	s       sse.Scanner
	pending []byte // the event under way, begun in an earlier read
	passing bool   // the event under way was too long to hold, and goes as it comes
	started *bool
	sent    *int64
	flushed int64 // the bytes sent at the last flush
	last    byte  // the last byte sent
}

// take forwards the whole events in p, the stream's next bytes, and
// keeps the start of the one that does not end in p.
func (c *eventCopy) take(p []byte) error {
	for len(p) > 0 {
		n, ended := c.s.Scan(p)
		raw := p[:n]
		p = p[n:]
		switch {
		case c.passing:
			if err := c.write(raw); err != nil {
				return err
			}
			if ended {
				c.passing = false
				c.f.passed(*c.s.Event())
			}
		case !ended:
			c.pending = append(c.pending, raw...)
			if len(c.pending) > maxPending {
				c.passing = true
				err := c.write(c.pending)
				c.pending = c.pending[:0]
				if err != nil {
					return err
				}
			}
		default:
			if len(c.pending) > 0 {
				c.pending = append(c.pending, raw...)
				raw = c.pending
			}
			out, err := c.f.event(raw, *c.s.Event())
			c.pending = c.pending[:0]
			if err != nil {
				return err
			}
			if err := c.write(out); err != nil {
				return err
			}
			if e, ok := c.f.(ender); ok && e.over() {
				return nil // the stream's last event: what follows it in p never reaches the caller
			}
		}
	}
	return nil
}

// end takes the stream's clean end: the event under way, without the
// blank line that would end it, goes to f as it is, and to the caller
// with that blank line, as f read it: a client drops an event that the
// stream's end cuts off, and whatever the gateway sends after it would
// join it. An event whose data the end cuts off mid-JSON, which no
// client could read, goes to neither: the stream ended before it.
func (c *eventCopy) end() error {
	if c.passing || len(c.pending) == 0 {
		return nil
	}
	raw := c.pending
	if _, ended := c.s.Scan(blankLine); !ended {
		return nil // blank lines alone: nothing a client reads
	}
	if cutJSON(c.s.Event().Data) {
		return nil
	}
	out, err := c.f.event(raw, *c.s.Event())
	if err != nil || len(out) == 0 {
		return err
	}
	if err := c.write(out); err != nil {
		return err
	}
	return c.write(eventEnd(out))
}

// cutJSON reports whether data is the start of a JSON object that does
// not end: an event's data that a stream's end cut off.
func cutJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && !json.Valid(t)
}

// eventEnd returns what ends the event out, if a client would not read
// it as ended: a blank line, after the line ending its last line lacks.
// After a lone "\r", "\n" would only make it "\r\n", one line ending.
func eventEnd(out []byte) []byte {
	switch _, rest := sse.Split(out); {
	case len(rest) == 0:
		return nil // a rewritten event, or one that its last "\r" ends
	case out[len(out)-1] == '\n':
		return blankLine[:1]
	}
	return blankLine
}

// endLine completes the line ending of the stream's last event, which
// the stream ends at: the scanner ends an event at the "\r" of its blank
// line, and a "\n" after it, which would be the next event's, never
// comes. A client that reads "\r\n" as the line ending would not see the
// event end without it; to a WHATWG client "\r\n" is the same as "\r".
func (c *eventCopy) endLine() error {
	if c.last != '\r' {
		return nil
	}
	if err := c.write(blankLine[:1]); err != nil {
		return err
	}
	return c.flush()
}

// cutShort, once the copy is over, deals with a body that ended inside an
// event too long to hold, part of which went to the caller: the follower
// hears of it, so that the stream is not carried on after half an event,
// and what the gateway sends next starts a new event (see midEvent).
func (c *eventCopy) cutShort() {
	if c.passing {
		c.f.passed(*c.s.Event())
		c.o.midEvent = true
	}
}

// blankLine ends an event.
var blankLine = []byte("\n\n")

// write sends out, if any, to the caller.
func (c *eventCopy) write(out []byte) error {
	if len(out) == 0 {
		return nil
	}
	*c.started = true
	if _, err := c.o.w.Write(out); err != nil {
		return errClientGone
	}
	*c.sent += int64(len(out))
	c.last = out[len(out)-1]
	return nil
}

// flush flushes what was written since the last flush.
func (c *eventCopy) flush() error {
	if *c.sent == c.flushed {
		return nil
	}
	c.flushed = *c.sent
	if c.o.rc.Flush() != nil {
		return errClientGone
	}
	c.o.flushed()
	return nil
}

// endStream ends a stream whose answer s saw whole, with the last events
// the upstream did not send: OpenAI's data: [DONE], Anthropic's
// message_stop.
func (o *response) endStream(s *splice, sent *int64) {
	if s.done {
		return
	}
	var end []byte
	switch s.api {
	case apiOpenAI:
		end = []byte("data: [DONE]\n\n")
	case apiAnthropic:
		end = []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	default:
		return
	}
	o.newEvent()
	if _, err := o.w.Write(end); err == nil {
		*sent += int64(len(end))
		o.rc.Flush()
	}
}

// idleWatch bounds the silence of a response being forwarded, either way,
// by its idle timeout: while it waits for the upstream's next bytes, a
// silence that long ends the upstream response, by calling cancel with
// errIdle; while it writes them, a caller that takes none of them for that
// long is gone, and the write ends (the connection's write deadline is
// put in the past), so that a caller that stops reading cannot hold the
// upstream's slot. With no timeout it does nothing.
type idleWatch struct {
	idle    time.Duration
	timer   *time.Timer
	writing atomic.Bool // between pause and resume
	silent  atomic.Bool // the timer fired while the upstream was awaited
}

func watchIdle(idle time.Duration, cancel context.CancelCauseFunc, rc *http.ResponseController) *idleWatch {
	if idle <= 0 {
		return &unwatched
	}
	w := &idleWatch{idle: idle}
	w.timer = time.AfterFunc(idle, func() {
		if w.writing.Load() {
			rc.SetWriteDeadline(time.Now()) // the blocked write fails: the caller is gone
			return
		}
		w.silent.Store(true)
		cancel(errIdle)
	})
	return w
}

// unwatched is the watch of every response with no idle timeout: without
// a timer, nothing changes it, and its methods only read it.
var unwatched idleWatch

// pause turns the watch to the writing of bytes that came.
func (w *idleWatch) pause() {
	if w.timer != nil {
		w.writing.Store(true)
		w.timer.Reset(w.idle)
	}
}

// resume turns the watch back to the upstream, unless it fired.
func (w *idleWatch) resume() {
	if w.timer != nil && !w.silent.Load() {
		w.writing.Store(false)
		w.timer.Reset(w.idle)
	}
}

// fired reports whether the response fell silent.
func (w *idleWatch) fired() bool { return w.silent.Load() }

func (w *idleWatch) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// readSnippet reads up to 4 KiB of a body for an error message.
func readSnippet(r io.Reader) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, 4<<10))
	return b
}

// writeError answers r, a request that never became an exchange, with an
// error the gateway made. Its body is not read (see unread). The caller
// has errorWriteBound to take the answer: one that pipelines requests and
// reads none of their answers would otherwise hold the connection's
// handler as long as it keeps it open.
func writeError(w http.ResponseWriter, r *http.Request, status int, kind, msg string) {
	unread(w, r)
	within(w, errorWriteBound, func() { apierr.Write(w, status, kind, msg) })
}

// within runs write, which writes an answer to w, and flushes it, all
// within d (no bound if d is not positive); the connection's write
// deadline is cleared after, for its next request.
func within(w http.ResponseWriter, d time.Duration, write func()) {
	rc := http.NewResponseController(w)
	if d > 0 {
		rc.SetWriteDeadline(time.Now().Add(d))
		defer rc.SetWriteDeadline(time.Time{})
	}
	write()
	rc.Flush()
}

// unread closes the connection after the answer to r, whose body the
// gateway does not read. net/http would read the rest of it, after the
// answer, with no bound on the time: a caller that announced a body it
// never sends would hold the handler as long as it kept the connection.
// The read deadline is passed, so that none of the body is waited for.
func unread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody { // -1: chunked
		w.Header().Set("Connection", "close")
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// errorWriteBound bounds the write of an error answered before a request
// is an upstream's, whose idle timeout would bound it, and of the
// gateway's health: a few hundred bytes, which a caller that reads takes
// at once.
const errorWriteBound = 10 * time.Second
