package journal_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
)

// TestSecretsNeverStored writes requests whose headers and errors carry
// secrets, through a Writer, and then reads every column of every row of
// every table as text: "secret" must appear nowhere.
func TestSecretsNeverStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		spec := b.fresh(t)
		s := open(t, spec)
		h := http.Header{}
		h.Set("Authorization", "Bearer sk-secret")
		h.Set("X-Api-Key", "ak-secret")
		h.Set("Cookie", "s=secret")
		h.Set("Proxy-Authorization", "Basic c2VjcmV0")
		h.Set("X-Custom-Token", "ct-secret")
		h.Set("Content-Type", "application/json")

		// The gateway's way: Redact with its list, and FromAttempt.
		redacted := record("redacted", "", t0, 502, 0)
		redacted.Header = journal.Redact(h, []string{"x-custom-token"})
		redacted.Attempts = []journal.Attempt{journal.FromAttempt(outlast.Attempt{
			CallID: "c1", N: 1, Start: t0, End: t0,
			Err: &url.Error{Op: "Post", URL: "https://user:pw-secret@api.example.com/v1/chat?key=qs-secret&x=1", Err: syscall.ECONNREFUSED},
		})}

		// A careless caller: the raw header, and a raw message. The store
		// still removes the credentials and the URL's query, though it
		// cannot know the deployment's own list.
		careless := record("careless", "", t0, 500, 1)
		hc := h.Clone()
		hc.Del("X-Custom-Token")
		careless.Header = hc
		careless.Error = "upstream https://api.example.com/x?token=kind-secret"
		careless.Attempts[0].Error = `Get "http://h.example/v1?api_key=raw-secret": EOF`

		w := journal.NewWriter(s, journal.WriterConfig{Logger: quiet})
		w.Add(redacted)
		w.Add(careless)
		closeWriter(t, w)

		all := dump(t, b, spec)
		if strings.Contains(strings.ToLower(all), "secret") {
			t.Errorf("a secret reached the store:\n%s", all)
		}
		// The dump saw the rows: what is not secret is there.
		for _, want := range []string{"application/json", "https://api.example.com/v1/chat", "refused", "http://h.example/v1"} {
			if !strings.Contains(all, want) {
				t.Errorf("dump: got no %q, want it:\n%s", want, all)
			}
		}
	})
}

func TestRedact(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Authorization":       {"Bearer sk"},
		"X-Api-Key":           {"ak"},
		"Cookie":              {"a=b"},
		"Proxy-Authorization": {"Basic x"},
		"Api-Key":             {"azure"},
		"X-Goog-Api-Key":      {"gemini"},
		"X-Org-Secret":        {"org"},
		"Content-Type":        {"application/json"},
		"Accept":              {"text/event-stream", "application/json"},
		"x-lower":             {"not canonical"},
	}
	tests := []struct {
		name  string
		h     http.Header
		extra []string
		want  map[string][]string
	}{
		// The credentials go, always; the rest stays, canonicalized.
		{"defaults", h, nil, map[string][]string{
			"Content-Type": {"application/json"}, "Accept": {"text/event-stream", "application/json"},
			"X-Org-Secret": {"org"}, "X-Lower": {"not canonical"},
		}},
		// The deployment's names go too, in any case.
		{"extra", h, []string{"x-ORG-secret", " accept "}, map[string][]string{
			"Content-Type": {"application/json"}, "X-Lower": {"not canonical"},
		}},
		// No header is nil, not an empty map.
		{"nil", nil, nil, nil},
	}
	for _, c := range tests {
		if got := journal.Redact(c.h, c.extra); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	// Redact copies: changing its result leaves the request alone.
	journal.Redact(h, nil)["Content-Type"][0] = "changed"
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("after changing Redact's result: got %q, want application/json", got)
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		// The common case: no URL, unchanged.
		{"no url", "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		// url.Error's form: the quoted URL loses its query.
		{"url error", `Post "https://api.example.com/v1/chat?key=s3&x=1": EOF`, `Post "https://api.example.com/v1/chat": EOF`},
		// User info is a credential too; the last @ ends it.
		{"user info", "http://u:p@ss@host:8080/p?q", "http://host:8080/p"},
		// A fragment goes as the query does.
		{"fragment", "see https://h/p#tok=x now", "see https://h/p now"},
		// Every URL in the message, not only the first.
		{"two", "a http://x/?k=1 b 'https://y/z?k=2'", "a http://x/ b 'https://y/z'"},
		// An @ in the path is not user info.
		{"at in path", "http://h/@me?x", "http://h/@me"},
		// A URL that is all query.
		{"bare", "http://?k=v", "http://"},
		// A URL at the end of the message.
		{"at end", "failed: ws://h/s?t=1", "failed: ws://h/s"},
	}
	for _, c := range tests {
		if got := journal.Sanitize(c.in); got != c.want {
			t.Errorf("%s: Sanitize(%q): got %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// FuzzSanitize checks that Sanitize never panics, and that for a URL with
// a query, alone or quoted in an error as url.Error quotes it, none of the
// query's values survive unless the rest of the URL holds them too.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{
		"https://api.example.com/v1/chat?key=secret",
		"http://u:p@h/p?a=1&b=2#f",
		"http://h?x",
		"a://b://c?d=e",
		"http://h/p?k=v&k=w;x=y",
		"no url here",
		"://?=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		journal.Sanitize(s) // must not panic, whatever s is
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || u.Host == "" || u.RawQuery == "" {
			return
		}
		if strings.ContainsAny(s, " \t\n\r\v\f\"'`<>") {
			return // these end a URL in a message; see Sanitize
		}
		q := strings.IndexByte(s, '?')
		quote := func(s string) string { return fmt.Sprintf("Get %q: EOF", s) }
		for _, form := range []func(string) string{func(s string) string { return s }, quote} {
			msg := journal.Sanitize(form(s))
			keep := journal.Sanitize(form(s[:q])) // the message without the query
			if strings.Count(msg, "?") > strings.Count(keep, "?") {
				t.Errorf("Sanitize(%q) = %q: got a '?', want the query gone", form(s), msg)
			}
			for _, kv := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
				_, v, _ := strings.Cut(kv, "=")
				if v != "" && strings.Contains(msg, v) && !strings.Contains(keep, v) {
					t.Errorf("Sanitize(%q) = %q: got the query value %q, want it gone", form(s), msg, v)
				}
			}
		}
	})
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		// Success has no class.
		{"nil", nil, ""},
		// A failed status, however wrapped.
		{"status", fmt.Errorf("attempt: %w", &outlast.StatusError{StatusCode: 503}), journal.ClassStatus},
		// An error event rides in a StatusError, and names itself first.
		{"error event", &outlast.StatusError{StatusCode: 500, Err: fmt.Errorf("%w: overloaded", outlast.ErrErrorEvent)}, journal.ClassErrorEvent},
		{"busy", outlast.ErrBusy, journal.ClassBusy},
		{"stalled", fmt.Errorf("x: %w", outlast.ErrStalled), journal.ClassStalled},
		{"closed early", outlast.ErrClosedEarly, journal.ClassClosedEarly},
		// The caller's own context, cancellation or deadline.
		{"canceled", &url.Error{Op: "Post", URL: "http://h", Err: context.Canceled}, journal.ClassCanceled},
		{"caller deadline", &url.Error{Op: "Post", URL: "http://h", Err: context.DeadlineExceeded}, journal.ClassCanceled},
		// A timeout that only says it is like a deadline is the server's.
		{"server timeout", &url.Error{Op: "Post", URL: "http://h", Err: serverTimeout{}}, journal.ClassTimeout},
		// No connection: refused, or a name that does not resolve.
		{"refused", &url.Error{Op: "Post", URL: "http://h", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, journal.ClassRefused},
		{"dns", &url.Error{Op: "Post", URL: "http://h", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "h", IsNotFound: true}}}, journal.ClassRefused},
		// A connection that broke, or closed, before the response.
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, journal.ClassReset},
		{"eof", &url.Error{Op: "Post", URL: "http://h", Err: io.EOF}, journal.ClassReset},
		{"unexpected eof", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), journal.ClassReset},
		{"other", errors.New("something else"), journal.ClassOther},
	}
	for _, c := range tests {
		if got := journal.ClassOf(c.err); got != c.want {
			t.Errorf("%s: ClassOf(%v): got %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

// serverTimeout is shaped like net/http's own timeout errors: a timeout
// that says it is context.DeadlineExceeded through Is, without being it.
type serverTimeout struct{}

func (serverTimeout) Error() string        { return "net/http: timeout awaiting response headers" }
func (serverTimeout) Timeout() bool        { return true }
func (serverTimeout) Temporary() bool      { return true }
func (serverTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// TestFromAttempt checks the fields' mapping, and that the message is
// sanitized.
func TestFromAttempt(t *testing.T) {
	t.Parallel()
	a := outlast.Attempt{
		CallID: "c", N: 2, Key: "k", Ahead: 3, GateWait: 5, Start: t0, End: t0.Add(1),
		Status: 429, RetryAfter: 7, RetryIn: 9,
		Err: fmt.Errorf("Post %q: %w", "https://h/p?key=k1", &outlast.StatusError{StatusCode: 429}),
	}
	want := journal.Attempt{
		CallID: "c", N: 2, QueuedAhead: 3, GateWait: 5, Start: t0, End: t0.Add(1),
		Status: 429, ErrorClass: journal.ClassStatus, RetryAfter: 7, RetryIn: 9,
		Error: `Post "https://h/p": outlast: status 429 Too Many Requests`,
	}
	if got := journal.FromAttempt(a); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
