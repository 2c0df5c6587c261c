package outlast_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// plainBusy is a busy refusal from another package that only says so:
// a Busy method and no Is.
type plainBusy struct{}

func (plainBusy) Error() string { return "othergate: busy" }
func (plainBusy) Busy() bool    { return true }

// gateBusy is shaped like package gate's ErrBusy: Busy, and an Is that
// matches any busy error, so errors.Is(gateBusy{}, outlast.ErrBusy) holds
// without either package importing the other.
type gateBusy struct{}

func (gateBusy) Error() string { return "gate: queue is full" }
func (gateBusy) Busy() bool    { return true }
func (gateBusy) Is(target error) bool {
	b, ok := target.(interface{ Busy() bool })
	return ok && b.Busy()
}

// status returns a *StatusError with code and, if the pairs are given,
// those headers.
func status(code int, kv ...string) *outlast.StatusError {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &outlast.StatusError{StatusCode: code, Header: h}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	type row struct {
		name          string
		err           error
		wantRetryable bool
		wantGone      bool
	}
	var tests []row
	// Statuses that may succeed later: the list IsRetryable documents, and
	// 599 for "any other 5xx". ServerGone is the narrower rule: of all
	// statuses, only 503 means a local server is away.
	for _, c := range []int{408, 425, 429, 500, 502, 503, 504, 529, 599} {
		tests = append(tests, row{fmt.Sprintf("status %d", c), status(c), true, c == 503})
	}
	// Other 4xx fail the same way every time.
	for _, c := range []int{400, 401, 403, 404, 409, 422} {
		tests = append(tests, row{fmt.Sprintf("status %d", c), status(c), false, false})
	}
	tests = append(tests, []row{
		// x-should-retry overrides the status both ways, as in the OpenAI
		// and Anthropic SDKs. ServerGone looks only at the status: a 400 is
		// never a server that went away.
		{"should-retry true on 400", status(400, "X-Should-Retry", "true"), true, false},
		// The header downward. ServerGone is narrower than IsRetryable,
		// never broader, so it follows the server's "false" too.
		{"should-retry false on 503", status(503, "X-Should-Retry", "false"), false, false},
		// Header values are matched without case or surrounding space.
		{"should-retry TRUE padded on 422", status(422, "X-Should-Retry", " TRUE "), true, false},
		// A value that is neither leaves the status in charge.
		{"should-retry garbage on 500", status(500, "X-Should-Retry", "maybe"), true, false},
		// A nil Header is documented as possible and must not panic.
		{"nil header 502", &outlast.StatusError{StatusCode: 502}, true, false},

		// errors.As must find a wrapped StatusError.
		{"wrapped 503", fmt.Errorf("chat: %w", status(503)), true, true},
		{"wrapped 404", fmt.Errorf("chat: %w", status(404)), false, false},
		{"doubly wrapped 429", fmt.Errorf("a: %w", fmt.Errorf("b: %w", status(429))), true, false},

		// The caller's own end is never the server's fault.
		{"context canceled", context.Canceled, false, false},
		{"deadline exceeded", context.DeadlineExceeded, false, false},
		{"wrapped canceled", fmt.Errorf("send: %w", context.Canceled), false, false},
		{"wrapped deadline", fmt.Errorf("send: %w", context.DeadlineExceeded), false, false},
		// DeadlineExceeded is also a net.Error timeout; the caller's deadline
		// must win over the timeout rule.
		{"deadline in url error", &url.Error{Op: "Post", URL: "http://model.test/v1/messages", Err: context.DeadlineExceeded}, false, false},

		// A busy gate already said waiting will not help.
		{"ErrBusy", outlast.ErrBusy, false, false},
		{"wrapped ErrBusy", fmt.Errorf("acquire: %w", outlast.ErrBusy), false, false},
		// Any type with Busy() true is a busy refusal, from any package.
		{"custom Busy", plainBusy{}, false, false},
		{"gate-shaped busy", gateBusy{}, false, false},
		// A busy error wins even where it wraps something retryable.
		{"busy status", &outlast.StatusError{StatusCode: 503, Err: outlast.ErrBusy}, false, false},

		// The transport's own first-byte failures: nothing reached the caller.
		{"ErrStalled", outlast.ErrStalled, true, true},
		{"ErrClosedEarly", outlast.ErrClosedEarly, true, true},
		{"wrapped ErrStalled", fmt.Errorf("attempt 2: %w", outlast.ErrStalled), true, true},
		{"wrapped ErrClosedEarly", fmt.Errorf("attempt 2: %w", outlast.ErrClosedEarly), true, true},

		// net/http returns these when the server closes before a response.
		{"EOF", io.EOF, true, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, true},

		// A refused or reset connection as the net package reports it.
		{"dial refused", opErr("dial", syscall.ECONNREFUSED), true, true},
		{"read reset", opErr("read", syscall.ECONNRESET), true, true},
		{"write broken pipe", opErr("write", syscall.EPIPE), true, true},
		// Any dial failure is a server that is not there (yet).
		{"dial unreachable", opErr("dial", syscall.EHOSTUNREACH), true, true},
		// An OpError that is not a dial and not a known errno is not
		// known to be safe.
		{"read other errno", opErr("read", syscall.EINVAL), false, false},
		// As net/http wraps it for Client.Do.
		{"url error refused", &url.Error{Op: "Get", URL: "http://model.test/v1/models", Err: opErr("dial", syscall.ECONNREFUSED)}, true, true},

		// A name that does not exist will not exist in a minute, even
		// though it failed in a dial.
		{"dns not found", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "model.invalid", IsNotFound: true}}, false, false},
		// A DNS timeout may pass.
		{"dns timeout", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "model.test", IsTimeout: true}}, true, true},
		// A temporary DNS failure (SERVFAIL) may pass too.
		{"dns temporary", &net.DNSError{Err: "server misbehaving", Name: "model.test", IsTemporary: true}, true, true},

		// A timeout that is not the caller's: a net.Error with Timeout true.
		{"os deadline", opErr("read", os.ErrDeadlineExceeded), true, true},

		// Anything unknown is refused.
		{"plain error", errors.New("x"), false, false},
		{"nil", nil, false, false},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := outlast.IsRetryable(tt.err); got != tt.wantRetryable {
				t.Errorf("IsRetryable(%v): got %v, want %v", tt.err, got, tt.wantRetryable)
			}
			if got := outlast.ServerGone(tt.err); got != tt.wantGone {
				t.Errorf("ServerGone(%v): got %v, want %v", tt.err, got, tt.wantGone)
			}
		})
	}
}

// TestClassifyRealRefused classifies the error net/http really returns for
// a port that nobody listens on, not a hand-built imitation.
func TestClassifyRealRefused(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1, and no listener on port 0 is given it;
	// a port just closed could be given to a parallel test's listener.
	addr := "127.0.0.1:1"

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	resp, err := c.Get("http://" + addr + "/v1/models")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want a refused connection", resp.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("got %v, want ECONNREFUSED (something else took the port?)", err)
	}
	if !outlast.IsRetryable(err) {
		t.Errorf("IsRetryable(%v): got false, want true", err)
	}
	if !outlast.ServerGone(err) {
		t.Errorf("ServerGone(%v): got false, want true", err)
	}
}

// TestClassifyRealReset classifies the error of a server that reads the
// request and then resets the connection without answering.
func TestClassifyRealReset(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		http.ReadRequest(bufio.NewReader(c))
		// Linger 0 makes Close send RST instead of FIN.
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want a reset connection", resp.StatusCode)
	}
	t.Logf("RoundTrip: %v", err)
	if !outlast.IsRetryable(err) {
		t.Errorf("IsRetryable(%v): got false, want true", err)
	}
	if !outlast.ServerGone(err) {
		t.Errorf("ServerGone(%v): got false, want true", err)
	}
}

// TestClassifyRealHeaderTimeout classifies http.Transport's own
// ResponseHeaderTimeout error: a server that accepted the request and
// never answered, as a model that is still loading. It takes 50 ms of real
// time.
func TestClassifyRealHeaderTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	// Cleanups run last-in first-out: release the handler before Close
	// waits for it.
	t.Cleanup(func() { close(release) })

	tr := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want a header timeout", resp.StatusCode)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a net.Error timeout", err)
	}
	if !outlast.IsRetryable(err) {
		t.Errorf("IsRetryable(%v): got false, want true", err)
	}
	if !outlast.ServerGone(err) {
		t.Errorf("ServerGone(%v): got false, want true", err)
	}
}

func TestStatusErrorError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *outlast.StatusError
		want string
	}{
		// The doc's own example.
		{"plain", &outlast.StatusError{StatusCode: 503}, "outlast: status 503 Service Unavailable"},
		// A server delay is worth showing in a log line.
		{"retry after", &outlast.StatusError{StatusCode: 429, RetryAfter: 2 * time.Second}, "outlast: status 429 Too Many Requests (retry after 2s)"},
		// The cause follows the status.
		{"cause", &outlast.StatusError{StatusCode: 200, Err: errors.New("overloaded_error")}, "outlast: status 200 OK: overloaded_error"},
		// Anthropic's 529 has no standard text: the code alone, with no
		// trailing space (529 is the status most often logged for Anthropic).
		{"unknown code", &outlast.StatusError{StatusCode: 529}, "outlast: status 529"},
		// Nor a double space before the delay.
		{"unknown code with delay", &outlast.StatusError{StatusCode: 529, RetryAfter: 20 * time.Millisecond}, "outlast: status 529 (retry after 20ms)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStatusErrorWrapping checks that callers reach a StatusError and its
// cause with errors.As and errors.Is, as rule 4 of STYLE.md asks.
func TestStatusErrorWrapping(t *testing.T) {
	t.Parallel()
	cause := errors.New("overloaded_error")
	se := &outlast.StatusError{StatusCode: 529, Err: cause}
	err := fmt.Errorf("chat: %w", fmt.Errorf("attempt 3: %w", se))

	var got *outlast.StatusError
	if !errors.As(err, &got) {
		t.Fatalf("errors.As(%v): got false, want true", err)
	}
	if got != se {
		t.Errorf("errors.As: got %p, want %p", got, se)
	}
	if u := se.Unwrap(); u != cause {
		t.Errorf("Unwrap: got %v, want %v", u, cause)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause): got false, want true", err)
	}
	if u := (&outlast.StatusError{StatusCode: 500}).Unwrap(); u != nil {
		t.Errorf("Unwrap without cause: got %v, want nil", u)
	}
}

func TestErrBusyIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		// The sentinel is itself.
		{"self", outlast.ErrBusy, outlast.ErrBusy, true},
		// Wrapping keeps it.
		{"wrapped", fmt.Errorf("acquire: %w", outlast.ErrBusy), outlast.ErrBusy, true},
		// A busy error from another package with package gate's Is method
		// matches without importing this one.
		{"gate-shaped", gateBusy{}, outlast.ErrBusy, true},
		// And the other way round: outlast's Is matches any busy error.
		{"root is gate-shaped", outlast.ErrBusy, gateBusy{}, true},
		{"root is plain busy", outlast.ErrBusy, plainBusy{}, true},
		// ErrBusy is not some other sentinel.
		{"not stalled", outlast.ErrBusy, outlast.ErrStalled, false},
		// A plain error is not busy.
		{"plain", errors.New("x"), outlast.ErrBusy, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v): got %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

// opErr is err as the net package wraps a system call's failure.
func opErr(op string, err error) *net.OpError {
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, Err: err}
}

// headerTimeout is shaped like net/http's own timeout errors: a timeout
// that says it is context.DeadlineExceeded through Is, without being it.
type headerTimeout struct{}

func (headerTimeout) Error() string        { return "net/http: timeout awaiting response headers" }
func (headerTimeout) Timeout() bool        { return true }
func (headerTimeout) Temporary() bool      { return true }
func (headerTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// Classify names each kind of failure once, for the journal, metrics and
// traces; the order matters where kinds nest.
func TestClassifyNamesFailures(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want outlast.Class
	}{
		{"nil is no failure", nil, outlast.ClassNone},
		// Statuses are split by what they ask of the client.
		{"429 asks to slow down", &outlast.StatusError{StatusCode: 429}, outlast.ClassRateLimited},
		{"529 is Anthropic's overload", &outlast.StatusError{StatusCode: 529}, outlast.ClassOverloaded},
		{"another 4xx", &outlast.StatusError{StatusCode: 408}, outlast.ClassStatus4xx},
		{"another 5xx", &outlast.StatusError{StatusCode: 503}, outlast.ClassStatus5xx},
		{"a status outside 400-599", &outlast.StatusError{StatusCode: 302}, outlast.ClassOther},
		// An error event comes inside a StatusError; the event wins.
		{"an error event", &outlast.StatusError{StatusCode: 529, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)}, outlast.ClassErrorEvent},
		{"busy", fmt.Errorf("gate: %w", outlast.ErrBusy), outlast.ClassBusy},
		// A stall is a timeout too; stalled is the more precise.
		{"stalled", outlast.ErrStalled, outlast.ClassStalled},
		{"closed early", fmt.Errorf("%w: %w", outlast.ErrClosedEarly, io.ErrUnexpectedEOF), outlast.ClassClosedEarly},
		{"the caller's deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), outlast.ClassCanceled},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, outlast.ClassRefused},
		// A dial that failed for any other reason made no connection either.
		{"a failed dial", &net.OpError{Op: "dial", Err: errors.New("no route to host")}, outlast.ClassRefused},
		{"aborted", opErr("read", syscall.ECONNABORTED), outlast.ClassReset},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, outlast.ClassReset},
		{"closed before the response", io.EOF, outlast.ClassReset},
		{"a timeout that is not the caller's", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, outlast.ClassTimeout},
		{"anything else", errors.New("x"), outlast.ClassOther},

		// The shapes the Transport and net/http really produce, which the
		// journal's, the metrics' and the traces' own tests checked when
		// each of them classified.
		{"a wrapped status", fmt.Errorf("attempt: %w", &outlast.StatusError{StatusCode: 503}), outlast.ClassStatus5xx},
		// A 200 stream that opens with an error event must not read as a
		// status outside 400-599.
		{"an error event on a 200 stream", &outlast.StatusError{StatusCode: 200, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)}, outlast.ClassErrorEvent},
		// A stall is a timeout too, even when the chain says so.
		{"a stall that is also a timeout", fmt.Errorf("%w: %w", outlast.ErrStalled, opErr("read", os.ErrDeadlineExceeded)), outlast.ClassStalled},
		// The caller's context, as net/http wraps it: url.Error says a
		// deadline is a timeout, and it is still the caller's.
		{"the caller's cancellation in a url.Error", &url.Error{Op: "Post", URL: "http://h", Err: context.Canceled}, outlast.ClassCanceled},
		{"the caller's deadline in a url.Error", &url.Error{Op: "Post", URL: "http://h", Err: context.DeadlineExceeded}, outlast.ClassCanceled},
		// Through the other Unwrap form.
		{"the caller's deadline, joined", errors.Join(errors.New("send"), context.DeadlineExceeded), outlast.ClassCanceled},
		// net/http's own header timeout says it is context.DeadlineExceeded
		// through Is without being it: it is the server's.
		{"a server timeout that says it is a deadline", &url.Error{Op: "Post", URL: "http://h", Err: headerTimeout{}}, outlast.ClassTimeout},
		{"refused, as net/http reports it", &url.Error{Op: "Post", URL: "http://h", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, outlast.ClassRefused},
		// The errno alone says refused, whatever the operation.
		{"refused on a read", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, outlast.ClassRefused},
		// A name that does not resolve never made a connection.
		{"a name that does not resolve", &url.Error{Op: "Post", URL: "http://h", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "h", IsNotFound: true}}}, outlast.ClassRefused},
		{"EOF, as net/http reports it", &url.Error{Op: "Post", URL: "http://h", Err: io.EOF}, outlast.ClassReset},
		{"an unexpected EOF", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), outlast.ClassReset},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := outlast.Classify(c.err); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	reset := error(&net.OpError{Op: "read", Err: syscall.ECONNRESET})
	if n := testing.AllocsPerRun(100, func() { outlast.Classify(reset) }); n != 0 {
		t.Errorf("Classify allocates %v times, want 0", n)
	}
}

// A class is written as its name and read back from it, so that stored
// classes survive a reordering of the constants; every class has a name of
// its own, and an unknown name is an error that quotes it.
func TestClassText(t *testing.T) {
	seen := map[string]outlast.Class{}
	for _, c := range outlast.Classes() {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatalf("%d: %v", c, err)
		}
		if prev, ok := seen[string(b)]; ok {
			t.Errorf("classes %d and %d are both %q", prev, c, b)
		}
		seen[string(b)] = c
		var back outlast.Class
		if err := back.UnmarshalText(b); err != nil || back != c {
			t.Errorf("%q read back as %v (%v), want %v", b, back, err, c)
		}
		if c.String() != string(b) {
			t.Errorf("String %q, MarshalText %q; want the same", c.String(), b)
		}
	}
	if outlast.Classes()[0] != outlast.ClassNone || outlast.ClassNone.String() != "" {
		t.Errorf("the first class is %v (%q), want ClassNone, written as nothing", outlast.Classes()[0], outlast.ClassNone.String())
	}
	var c outlast.Class
	if err := c.UnmarshalText([]byte("teapot")); err == nil || !strings.Contains(err.Error(), `"teapot"`) {
		t.Errorf("an unknown name: got %v, want an error quoting it", err)
	}
	if _, err := outlast.Class(200).MarshalText(); err == nil {
		t.Error("Class(200).MarshalText: got no error, want one")
	}
}

// IsStatus is true of the classes StatusClass returns for failed
// statuses, and of no other.
func TestClassIsStatus(t *testing.T) {
	status := map[outlast.Class]bool{}
	for _, code := range []int{400, 408, 429, 500, 503, 529, 599} {
		status[outlast.StatusClass(code)] = true
	}
	for _, c := range outlast.Classes() {
		if got := c.IsStatus(); got != status[c] {
			t.Errorf("%v.IsStatus(): got %v, want %v", c, got, status[c])
		}
	}
}
