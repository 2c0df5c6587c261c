package outlast_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// step is one scripted answer of a fakeRT.
type step struct {
	status int               // 0 means 200
	header map[string]string // response headers
	body   string            // response body
	err    error             // a transport error instead of a response
	delay  time.Duration     // virtual time before the answer
	// bodyErr makes the body fail with this error after body is read.
	bodyErr error
	// stall makes the body block until the request's context ends.
	stall bool
	// bodyDelay holds the body's first byte back this long after the
	// headers, as a stream whose first event comes when generation
	// starts.
	bodyDelay time.Duration
}

var errRefused = &netOpError{syscall.ECONNREFUSED}

// netOpError stands for a dial error without a network: a refused
// connection as syscall reports it.
type netOpError struct{ errno syscall.Errno }

func (e *netOpError) Error() string { return "dial tcp 127.0.0.1:1: connect: " + e.errno.Error() }
func (e *netOpError) Unwrap() error { return e.errno }

// seen is what a fakeRT saw of one attempt.
type seen struct {
	at      time.Time
	attempt string // the Outlast-Attempt header
	body    string
}

// fakeRT answers requests from a script, one step per request, repeating
// the last step once the script runs out. It is safe for concurrent use.
type fakeRT struct {
	mu     sync.Mutex // guards script, seen and closed
	script []step
	seen   []seen
	closed int // response bodies closed
}

func newFake(script ...step) *fakeRT { return &fakeRT{script: script} }

func (f *fakeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	var body string
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		body = string(b)
	}
	f.mu.Lock()
	i := min(len(f.seen), len(f.script)-1)
	s := f.script[i]
	f.seen = append(f.seen, seen{at: time.Now(), attempt: r.Header.Get(outlast.AttemptHeader), body: body})
	f.mu.Unlock()
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return nil, r.Context().Err()
		}
	}
	if s.err != nil {
		return nil, s.err
	}
	return f.response(r, s), nil
}

func (f *fakeRT) response(r *http.Request, s step) *http.Response {
	status := s.status
	if status == 0 {
		status = http.StatusOK
	}
	h := http.Header{}
	for k, v := range s.header {
		h.Set(k, v)
	}
	cc := &closeCounter{f: f, done: make(chan struct{})}
	var rc io.Reader = strings.NewReader(s.body)
	if s.bodyDelay > 0 {
		rc = io.MultiReader(&delayReader{ctx: r.Context(), d: s.bodyDelay}, rc)
	}
	switch {
	case s.stall:
		rc = io.MultiReader(rc, &stallReader{ctx: r.Context(), closed: cc.done})
	case s.bodyErr != nil:
		rc = io.MultiReader(rc, &errReader{s.bodyErr})
	}
	cc.Reader = rc
	return &http.Response{
		StatusCode:    status,
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		Header:        h,
		Body:          cc,
		ContentLength: -1,
		Request:       r,
	}
}

func (f *fakeRT) attempts() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.seen...)
}

func (f *fakeRT) closedBodies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

type closeCounter struct {
	io.Reader
	f    *fakeRT
	once sync.Once
	done chan struct{} // closed by Close: a read that stalls ends, as a connection's does
}

func (c *closeCounter) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		c.f.closed++
		c.f.mu.Unlock()
		close(c.done)
	})
	return nil
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// stallReader blocks until ctx ends, as a server that stopped sending,
// or until its body is closed.
type stallReader struct {
	ctx    context.Context
	closed <-chan struct{}
}

func (s *stallReader) Read([]byte) (int, error) {
	select {
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	case <-s.closed:
		return 0, errors.New("read on a closed body")
	}
}

// delayReader reads nothing and ends after d, or fails when ctx ends
// first: a pause before the body's first byte.
type delayReader struct {
	ctx  context.Context
	d    time.Duration
	done bool
}

func (r *delayReader) Read([]byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	t := time.NewTimer(r.d)
	defer t.Stop()
	select {
	case <-t.C:
		r.done = true
		return 0, io.EOF
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
}

// recorder collects the attempts reported to hooks.
type recorder struct {
	mu     sync.Mutex // guards all below
	starts []outlast.Attempt
	ends   []outlast.Attempt
	queued []int
	events []string // "start N" and "end N", in order
}

func (r *recorder) hooks() outlast.Hooks {
	return outlast.Hooks{
		AttemptStart: func(a outlast.Attempt) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.starts = append(r.starts, a)
			r.events = append(r.events, "start "+strconv.Itoa(a.N))
		},
		AttemptEnd: func(a outlast.Attempt) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.ends = append(r.ends, a)
			r.events = append(r.events, "end "+strconv.Itoa(a.N))
		},
		Queued: func(key string, ahead int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.queued = append(r.queued, ahead)
		},
	}
}

// retryIns returns the RetryIn of each ended attempt.
func (r *recorder) retryIns() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, a := range r.ends {
		d = append(d, a.RetryIn)
	}
	return d
}

// get sends a GET through rt with ctx and returns the status and body, or
// the error.
func get(t *testing.T, ctx context.Context, rt http.RoundTripper) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://model.test/v1/chat/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, string(b), err
	}
	return resp.StatusCode, string(b), nil
}

func ms(n ...int) []time.Duration {
	d := make([]time.Duration, len(n))
	for i, v := range n {
		d[i] = time.Duration(v) * time.Millisecond
	}
	return d
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
