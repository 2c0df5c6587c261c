package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/owned"
	"github.com/outlast-llm/outlast/internal/sse"
)

// wholeBodies is the base RoundTripper of every upstream's Transport: it
// reads an answer that is not an event stream to its end, up to max
// bytes, before it returns it, so that a JSON answer is committed only
// when whole. A body cut half-way is then a failed attempt, retried or
// moved like any other, where once it reached the caller as a cut
// connection. The Transport's first-byte timeout bounds the whole read:
// for an answer that is not a stream, its first byte comes with its last.
//
// The answers held at once share the gateway's budget, so that the
// memory they take is bounded whatever their number and size. An answer
// longer than max, or one the budget has no room for, is returned as it
// comes: its first part, if it was read, and then the rest, for as long
// as it takes. The exchange's heldAnswers, if its
// context carries them, are told of each answer held whole.
type wholeBodies struct {
	base   http.RoundTripper
	max    int64
	budget *holdBudget
}

func (w wholeBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		// The gateway never asks for an upgrade (Upgrade is a hop's
		// header, not forwarded): forwarded, a 101 would leave the caller
		// waiting on a protocol nobody speaks.
		resp.Body.Close()
		return nil, errSwitched
	}
	if err != nil || sse.IsStream(resp.Header) || !holds(resp, r.Method, w.max) {
		return resp, err
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		heldIn(r.Context()).add(resp) // whole already: there is nothing to cut
		return resp, nil
	}
	h := &heldBody{budget: w.budget}
	if resp.ContentLength >= 0 && !h.reserve(resp.ContentLength) {
		// No room to hold it: it goes as it comes.
		return resp, nil
	}
	ended, err := h.fill(resp.Body, resp.ContentLength, w.max)
	if !ended {
		// Too long to hold, or the budget ran out half-way: the rest
		// goes as it comes, for as long as it takes.
		h.rest = resp.Body
		resp.Body = h
		resp.ContentLength = -1 // past what was declared, if anything was
		return resp, nil
	}
	resp.Body.Close()
	if err != nil {
		h.Close()
		if r.Context().Err() != nil {
			return nil, err // the Transport's own timer, or the caller: it knows which
		}
		return nil, &brokeOff{n: h.size, err: err}
	}
	resp.Body = h
	resp.ContentLength = h.size
	heldIn(r.Context()).add(resp)
	return resp, nil
}

// errSwitched is an upstream's 101 Switching Protocols, to a request that
// asked for no upgrade.
var errSwitched = errors.New("the upstream answered 101 Switching Protocols to a request that asked for no upgrade")

// holds reports whether an answer that is not a stream, to a request of
// method, is one a wholeBodies of max reads whole if the budget has room:
// one with a body, whose declared length, if any, is within max.
func holds(resp *http.Response, method string, max int64) bool {
	return method != http.MethodHead && resp.StatusCode != http.StatusSwitchingProtocols && resp.ContentLength <= max
}

// CloseIdleConnections closes the base's idle connections, if it can.
func (w wholeBodies) CloseIdleConnections() {
	type closer interface{ CloseIdleConnections() }
	if c, ok := w.base.(closer); ok {
		c.CloseIdleConnections()
	}
}

// holdBudget bounds the bytes of the answers that one Gateway's
// wholeBodies hold at once, across all its requests. It never makes a
// request wait: an answer that does not fit is not held. It is safe for
// concurrent use.
type holdBudget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes, and reports whether they fit.
func (b *holdBudget) take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// give gives back n bytes that take reserved.
func (b *holdBudget) give(n int64) {
	b.used.Add(-n)
}

// The sizes of the chunks an answer is read into. One of known length
// is read into chunks of up to holdChunk bytes: a short answer, the
// common case, into one buffer of its size. One of unknown length starts
// with firstChunk, and each chunk after is as long as those before it,
// up to holdChunk: its memory follows the bytes that came, and none is
// copied once read, as io.ReadAll's doubling copies them.
const (
	firstChunk = 4 << 10
	holdChunk  = 64 << 10
)

// chunkPool keeps the chunks of holdChunk bytes that have been read, for
// the next answers to be read into: without it, the chunks of the
// answers that went before are garbage until the collector comes, and
// the memory the answers take grows to about twice the budget.
var chunkPool = sync.Pool{New: func() any { return new([holdChunk]byte) }}

// newChunk returns a chunk of n bytes, holdChunk at most, to read into.
func newChunk(n int64) []byte {
	if n == holdChunk {
		return chunkPool.Get().(*[holdChunk]byte)[:]
	}
	return make([]byte, n)
}

// recycle puts c, a chunk read and no longer used, in chunkPool if it is
// one of holdChunk bytes.
func recycle(c []byte) {
	if cap(c) == holdChunk {
		chunkPool.Put((*[holdChunk]byte)(c[:holdChunk]))
	}
}

// heldBody is an answer's body read into memory before the commit, in
// chunks, with its bytes reserved from the gateway's hold budget. Each
// chunk's reservation is given back once the chunk has been read, and
// what is left of it at the body's end or when it is closed, whichever
// comes first, once. A heldBody with a rest is the first part of an
// answer that did not fit, followed by the rest as it comes.
//
// It is an io.WriterTo, as a bytes.Reader is, so that io.Copy writes
// its chunks as they are.
type heldBody struct {
	budget *holdBudget
	size   int64         // the bytes read into chunks
	rest   io.ReadCloser // the answer's unread rest, or nil for one held whole

	// mu guards what follows once the body is handed on, as fill, which
	// comes before, needs not: a caller may close the body to abort a
	// read in another goroutine.
	mu       sync.Mutex
	chunks   [][]byte  // the chunks not yet read, oldest first
	one      [1][]byte // chunks' array for an answer of one chunk
	off      int       // the bytes of chunks[0] already read
	reserved int64     // the bytes taken from budget, not yet given back
	closed   bool
}

// errClosedBody is a read of a heldBody after its Close.
var errClosedBody = errors.New("outlast: read of a closed answer body")

// reserve takes n bytes of the budget for h, and reports whether they
// fit.
func (h *heldBody) reserve(n int64) bool {
	if !h.budget.take(n) {
		return false
	}
	h.reserved += n
	return true
}

// fill reads r into h's chunks until r ends or fails, or until another
// chunk would pass limit bytes or does not fit the budget. size is r's
// declared length, reserved already, or -1. ended reports whether r
// ended, cleanly (err nil) or not; if not, what r has left is its rest.
func (h *heldBody) fill(r io.Reader, size, limit int64) (ended bool, err error) {
	for h.size < size {
		c := newChunk(min(size-h.size, holdChunk))
		n, err := readChunk(r, c)
		h.push(c[:n])
		switch {
		case err == io.EOF && h.size < size:
			return true, fmt.Errorf("%w: it ended at %d of its %d bytes", io.ErrUnexpectedEOF, h.size, size)
		case err != nil:
			return true, cleanEnd(err) // net/http's last read may bring io.EOF with its bytes
		}
	}
	if size >= 0 {
		// Its end: net/http's body reports io.EOF at the declared
		// length. A Transport that reads past it gets the rest read as
		// an answer of unknown length would be.
		var one [1]byte
		n, err := r.Read(one[:])
		if n > 0 {
			h.push([]byte{one[0]}) // a byte that no reservation covers
		}
		if n == 0 || err != nil {
			return true, cleanEnd(err)
		}
	}
	for {
		n := min(max(h.size, firstChunk), holdChunk, limit+1-h.size)
		if n <= 0 || !h.reserve(n) {
			return false, nil
		}
		c := newChunk(n)
		m, err := readChunk(r, c)
		h.push(c[:m])
		if err != nil {
			return true, cleanEnd(err)
		}
	}
}

// readChunk reads r into c until c is full or r's read fails: io.EOF at
// r's clean end, which may come with c's last bytes, and another error,
// io.ErrUnexpectedEOF among them, for a body cut short. Unlike
// io.ReadFull, it keeps the two apart.
func readChunk(r io.Reader, c []byte) (int, error) {
	n := 0
	for n < len(c) {
		m, err := r.Read(c[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// cleanEnd returns err, a read's, or nil for io.EOF: a clean end.
func cleanEnd(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// push adds c, read, to h's chunks.
func (h *heldBody) push(c []byte) {
	if len(c) == 0 {
		return
	}
	h.size += int64(len(c))
	if h.chunks == nil {
		h.chunks = h.one[:0]
	}
	h.chunks = append(h.chunks, c)
}

// giveBack gives back n bytes of h's reservation, or what is left of it.
// mu is held.
func (h *heldBody) giveBack(n int64) {
	n = min(n, h.reserved)
	h.reserved -= n
	h.budget.give(n)
}

// next takes the next bytes out of h, and gives back the reservation of
// each chunk it finishes. With p, it copies what p has room for into p,
// and returns p's part that it filled; without, it returns the rest of
// the chunk under way, for the caller to recycle once used. ok is false
// once no chunk is left; err is errClosedBody after Close.
func (h *heldBody) next(p []byte) (c []byte, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false, errClosedBody
	}
	if len(h.chunks) == 0 {
		h.giveBack(h.reserved) // what no chunk's reading gave back: nothing is held now
		return nil, false, nil
	}
	c = h.chunks[0][h.off:]
	if p != nil {
		n := copy(p, c)
		if n < len(c) {
			h.off += n
			return p[:n], true, nil
		}
		recycle(h.chunks[0]) // copied out whole: nothing refers to it now
		c = p[:n]
	}
	h.giveBack(int64(cap(h.chunks[0])))
	h.chunks[0] = nil // for the collector: the chunk has been read
	h.chunks, h.off = h.chunks[1:], 0
	return c, true, nil
}

func (h *heldBody) Read(p []byte) (int, error) {
	c, ok, err := h.next(p)
	switch {
	case err != nil:
		return 0, err
	case ok:
		return len(c), nil
	case h.rest == nil:
		return 0, io.EOF
	}
	return h.rest.Read(p)
}

// WriteTo writes h's chunks to w as they are, then its rest, if any.
func (h *heldBody) WriteTo(w io.Writer) (int64, error) {
	var written int64
	for {
		c, ok, err := h.next(nil)
		if err != nil {
			return written, err
		}
		if !ok {
			break
		}
		n, err := w.Write(c)
		recycle(c) // a Writer must not keep c
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
	if h.rest == nil {
		return written, nil
	}
	n, err := io.Copy(w, h.rest)
	return written + n, err
}

// Close gives back what h still holds of the budget and closes its rest,
// if any. A second Close does nothing.
func (h *heldBody) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.giveBack(h.reserved)
	for _, c := range h.chunks {
		recycle(c)
	}
	h.chunks, h.one = nil, [1][]byte{} // for the collector: a body thrown away may be kept a while
	h.mu.Unlock()
	if h.rest != nil {
		return h.rest.Close()
	}
	return nil
}

// heldAnswers are the answers that wholeBodies held whole for one
// exchange's attempts: the outlast Transport wraps an answer's body in
// its own, so the exchange cannot tell from the body's type, at the
// commit, whether the answer it forwards is in memory. The zero value
// holds none; it is safe for concurrent use, as a hedge's two sides
// hold answers at once. Nil holds none, and add does nothing.
type heldAnswers struct {
	mu    sync.Mutex // guards resps
	resps []*http.Response
	few   [2]*http.Response // resps' array for the first two
}

// heldIn returns the heldAnswers of the exchange whose context ctx is,
// or nil.
func heldIn(ctx context.Context) *heldAnswers {
	if x, ok := owned.Of(ctx).(*exchange); ok {
		return &x.held
	}
	return nil
}

// add notes that resp was held whole.
func (h *heldAnswers) add(resp *http.Response) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resps == nil {
		h.resps = h.few[:0]
	}
	h.resps = append(h.resps, resp)
}

// has reports whether resp was held whole: its body, read to its end
// before its first byte went, is in memory, and a cut would have been
// retried.
func (h *heldAnswers) has(resp *http.Response) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.resps {
		if r == resp {
			return true
		}
	}
	return false
}

// brokeOff is an answer whose body broke off after n bytes: a failure
// before the commit, which errors.Is reads as outlast.ErrClosedEarly.
type brokeOff struct {
	n   int64
	err error
}

func (e *brokeOff) Error() string {
	return fmt.Sprintf("the answer's body broke off after %d bytes: %v", e.n, e.err)
}

func (e *brokeOff) Unwrap() []error { return []error{outlast.ErrClosedEarly, e.err} }
