package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/sse"
)

// wholeBodies is the base RoundTripper of every upstream's Transport: it
// reads an answer that is not an event stream to its end, up to max
// bytes, before it returns it, so that a JSON answer is committed only
// when whole. A body cut half-way is then a failed attempt, retried or
// moved like any other, where once it reached the caller as a cut
// connection. A longer body is returned as it comes, as before. The
// Transport's first-byte timeout bounds the whole read: for an answer
// that is not a stream, its first byte comes with its last.
type wholeBodies struct {
	base http.RoundTripper
	max  int64
}

func (w wholeBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody || sse.IsStream(resp.Header) || !holds(resp, r.Method, w.max) {
		return resp, err
	}
	body, err := readUpTo(resp.Body, resp.ContentLength, w.max+1)
	if int64(len(body)) > w.max {
		// Too long to hold: the rest goes as it comes, for as long as it
		// takes (see wasReadWhole).
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		resp.ContentLength = -1 // past what was declared, if anything was
		return resp, nil
	}
	resp.Body.Close()
	if err != nil {
		if r.Context().Err() != nil {
			return nil, err // the Transport's own timer, or the caller: it knows which
		}
		return nil, &brokeOff{n: len(body), err: err}
	}
	if resp.ContentLength > int64(len(body)) {
		return nil, &brokeOff{n: len(body), err: fmt.Errorf("it ended at %d of its %d bytes", len(body), resp.ContentLength)}
	}
	resp.Body = newMemBody(body)
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// memBody is an answer's body read whole: one allocation, where
// io.NopCloser(bytes.NewReader(b)) makes two; like that, it is an
// io.WriterTo. (A request's body stays io.NopCloser(bytes.NewReader(b)):
// http.Transport knows that one is in memory, and writes it with the
// headers rather than after flushing them.)
type memBody struct{ bytes.Reader }

func newMemBody(b []byte) *memBody {
	m := new(memBody)
	m.Reset(b)
	return m
}

func (*memBody) Close() error { return nil }

// holds reports whether an answer that is not a stream, to a request of
// method, is one a wholeBodies of max reads whole: one with a body,
// whose declared length, if any, is within max.
func holds(resp *http.Response, method string, max int64) bool {
	return method != http.MethodHead && resp.StatusCode != http.StatusSwitchingProtocols && resp.ContentLength <= max
}

// wasReadWhole reports whether resp, an answer to a request of method
// that is not a stream, was read whole by a wholeBodies of max: its
// length is known, since the read set it, and within max. Such an
// answer is in memory, and cannot fall silent.
func wasReadWhole(resp *http.Response, method string, max int64) bool {
	return resp.ContentLength >= 0 && holds(resp, method, max)
}

// CloseIdleConnections closes the base's idle connections, if it can.
func (w wholeBodies) CloseIdleConnections() {
	type closer interface{ CloseIdleConnections() }
	if c, ok := w.base.(closer); ok {
		c.CloseIdleConnections()
	}
}

// brokeOff is an answer whose body broke off after n bytes: a failure
// before the commit, which errors.Is reads as outlast.ErrClosedEarly.
type brokeOff struct {
	n   int
	err error
}

func (e *brokeOff) Error() string {
	return fmt.Sprintf("the answer's body broke off after %d bytes: %v", e.n, e.err)
}

func (e *brokeOff) Unwrap() []error { return []error{outlast.ErrClosedEarly, e.err} }

type readCloser struct {
	io.Reader
	io.Closer
}

// wholeAnswer is the longest answer of known length read into one
// buffer of its size.
const wholeAnswer = 1 << 20

// readUpTo reads r to its end, or to limit bytes. A body of known length
// (size, 0 to wholeAnswer) is read into one buffer of its size, which its
// end is checked past: a server that sends more than it declared is read
// as io.ReadAll would. A longer one grows as its bytes come, so that an
// upstream that declares much and sends little holds little.
func readUpTo(r io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size >= limit || size > wholeAnswer {
		return io.ReadAll(io.LimitReader(r, limit))
	}
	b := make([]byte, size, size+1)
	n, err := io.ReadFull(r, b)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return b[:n], io.ErrUnexpectedEOF
	case err != nil:
		return b[:n], err
	}
	// Its end: net/http's body reports io.EOF at the declared length.
	var one [1]byte
	m, err := r.Read(one[:])
	if m > 0 {
		rest, err := io.ReadAll(io.LimitReader(r, limit-size-1))
		return append(append(b, one[0]), rest...), err
	}
	if err == io.EOF {
		err = nil
	}
	return b, err
}
