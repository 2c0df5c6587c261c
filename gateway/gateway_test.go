package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// downAddr is an address that refuses connections: nothing listens on
// port 1, and no listener on port 0 is given it. A port just closed
// would not do: a parallel test's listener can be given it meanwhile,
// and a request meant to be refused would reach that test's server (a
// CI run got 504 from one that hung).
const downAddr = "127.0.0.1:1"

// upstream is an httptest server that answers attempt n with script[n-1]
// (the last entry once past the end) and records what it saw.
type upstream struct {
	*httptest.Server
	mu     sync.Mutex // guards seen
	seen   []*http.Request
	bodies []string
	script []http.HandlerFunc
}

func newUpstream(t *testing.T, script ...http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{script: script}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.bodies = append(u.bodies, string(b))
		h := u.script[min(len(u.seen), len(u.script))-1]
		u.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) attempts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func (u *upstream) request(i int) *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[i]
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hang answers nothing until the request ends. It reads the body first:
// the HTTP/1 server notices a client gone only once the body is read.
func hang(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

func sse(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}
}

// gw starts a gateway in front of up with the given changes to its
// upstream settings, and returns its URL.
func gw(t *testing.T, up *upstream, change func(*gateway.Upstream)) (string, *gateway.Gateway) {
	t.Helper()
	return gwObserved(t, up, change, record.Observer{})
}

// gwObserved is gw with an observer.
func gwObserved(t *testing.T, up *upstream, change func(*gateway.Upstream), obs record.Observer) (string, *gateway.Gateway) {
	t.Helper()
	u, _ := url.Parse(up.URL)
	cfg := gateway.Upstream{
		URL:              u,
		Policy:           &outlast.Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}},
		FirstByteTimeout: 2 * time.Second,
	}
	if change != nil {
		change(&cfg)
	}
	g, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{cfg}, Logger: slog.New(slog.DiscardHandler), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	return s.URL, g
}

// events returns an observer that sends "queued SLOT", "sent SLOT" and
// "done SLOT" for each request as it happens, and the channel it sends
// them on, which the test reads to wait for a request to reach a state.
func events() (record.Observer, chan string) {
	ch := make(chan string, 64)
	return record.Observer{
		Queued:       func(r *record.Request, _ string, _ int) { ch <- "queued " + r.Slot },
		AttemptStart: func(r *record.Request, _ record.Attempt) { ch <- "sent " + r.Slot },
		Done:         func(r *record.Request) { ch <- "done " + r.Slot },
	}, ch
}

// await reads events until want comes, failing the test after 10 s.
func await(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q in 10s", want)
		}
	}
}

func send(t *testing.T, method, target, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// Retried to success: the caller sees the last attempt's answer unchanged,
// with the gateway's headers; the upstream saw each attempt numbered, with
// the body, the caller's credentials, and none of the gateway's headers.
func TestRetriedToSuccess(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503, `{"error":"down"}`), status(502, `{"error":"down"}`), status(200, `{"ok":true}`))
	base, _ := gw(t, up, nil)
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions?x=1", chat, map[string]string{
		"Authorization": "Bearer sk-secret", "X-Api-Key": "ak", "Outlast-Run": "run-1",
		"Connection": "X-Hop", "X-Hop": "drop me",
	})
	if resp.StatusCode != 200 || body != `{"ok":true}` {
		t.Fatalf("got %d %s, want 200 {\"ok\":true}", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Outlast-Attempts"); got != "3" || up.attempts() != 3 {
		t.Errorf("got Outlast-Attempts %q and %d upstream attempts, want 3 and 3", got, up.attempts())
	}
	if resp.Header.Get("Outlast-Request-Id") == "" {
		t.Error("no Outlast-Request-Id")
	}
	for i := range 3 {
		r := up.request(i)
		if got := r.Header.Get("Outlast-Attempt"); got != fmt.Sprint(i+1) {
			t.Errorf("attempt %d carried Outlast-Attempt %q", i+1, got)
		}
		if r.URL.Path != "/v1/chat/completions" || r.URL.RawQuery != "x=1" {
			t.Errorf("attempt %d went to %s?%s", i+1, r.URL.Path, r.URL.RawQuery)
		}
		if r.Header.Get("Authorization") != "Bearer sk-secret" || r.Header.Get("X-Api-Key") != "ak" {
			t.Errorf("attempt %d lost the caller's credentials", i+1)
		}
		if r.Header.Get("Outlast-Run") != "" || r.Header.Get("X-Hop") != "" {
			t.Errorf("attempt %d carried headers that must be removed: %v", i+1, r.Header)
		}
	}
	if up.bodies[2] != chat {
		t.Errorf("the last attempt's body is %q, want %q", up.bodies[2], chat)
	}
}

// To the bound: the last failure is returned unchanged, its Retry-After
// kept.
func TestRetriedToBound(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		status(429, `{"error":{"type":"rate_limit_error"}}`)(w, r)
	})
	base, _ := gw(t, up, nil)
	resp, body := send(t, http.MethodPost, base+"/v1/messages", chat, nil)
	if resp.StatusCode != 429 || body != `{"error":{"type":"rate_limit_error"}}` || resp.Header.Get("Retry-After") != "0" {
		t.Fatalf("got %d %s Retry-After %q, want the upstream's 429", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if got := resp.Header.Get("Outlast-Attempts"); got != "3" || up.attempts() != 3 {
		t.Errorf("got Outlast-Attempts %q, %d upstream attempts; want 3, 3", got, up.attempts())
	}
	if resp.Header.Get("Outlast-Error") != "" {
		t.Error("an upstream's answer carries Outlast-Error")
	}
}

// A 400 is not retried.
func TestBadRequestNotRetried(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(400, `{"error":"bad"}`))
	base, _ := gw(t, up, nil)
	resp, _ := send(t, http.MethodPost, base+"/v1/chat/completions", chat, nil)
	if resp.StatusCode != 400 || up.attempts() != 1 || resp.Header.Get("Outlast-Attempts") != "1" {
		t.Errorf("got %d after %d attempts, want 400 after 1", resp.StatusCode, up.attempts())
	}
}

// The Outlast-* headers set the request's policy; a bad one is refused
// with 400 naming it, and nothing is sent.
func TestHeaderOverrides(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		header   map[string]string
		status   int
		attempts int
		errText  string
	}{
		{"retry off", map[string]string{"Outlast-Retry": "off"}, 503, 1, ""},
		// A header may only tighten the operator's policy (two waits):
		// more waits are cut to the operator's number.
		{"more waits", map[string]string{"Outlast-Waits": "1ms,1ms,1ms,1ms"}, 503, 3, ""},
		{"fewer waits", map[string]string{"Outlast-Waits": "1ms"}, 503, 2, ""},
		{"max attempts", map[string]string{"Outlast-Max-Attempts": "2"}, 503, 2, ""},
		// An outer outlast layer is retrying: one attempt only.
		{"outer layer", map[string]string{"Outlast-Attempt": "2"}, 503, 1, ""},
		{"bad waits", map[string]string{"Outlast-Waits": "15s,soon"}, 400, 0, "Outlast-Waits"},
		{"empty waits", map[string]string{"Outlast-Waits": ","}, 400, 0, "Outlast-Waits"},
		{"bad timeout", map[string]string{"Outlast-Timeout": "-3s"}, 400, 0, "Outlast-Timeout"},
		{"bad deadline", map[string]string{"Outlast-Deadline": "tomorrow"}, 400, 0, "Outlast-Deadline"},
		{"bad reserve", map[string]string{"Outlast-Reserve": "lots"}, 400, 0, "Outlast-Reserve"},
		{"bad max attempts", map[string]string{"Outlast-Max-Attempts": "-1"}, 400, 0, "Outlast-Max-Attempts"},
		{"bad retry", map[string]string{"Outlast-Retry": "maybe"}, 400, 0, "Outlast-Retry"},
		{"bad slot", map[string]string{"Outlast-Slot": "first"}, 400, 0, "Outlast-Slot"},
		{"bad progress", map[string]string{"Outlast-Progress": "yes"}, 400, 0, "Outlast-Progress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, status(503, "{}"))
			base, _ := gw(t, up, nil)
			resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", chat, c.header)
			if resp.StatusCode != c.status || up.attempts() != c.attempts {
				t.Fatalf("got %d after %d attempts, want %d after %d (%s)", resp.StatusCode, up.attempts(), c.status, c.attempts, body)
			}
			if c.errText != "" {
				e := decodeError(t, body)
				if !strings.Contains(e.Error.Message, c.errText) || resp.Header.Get("Outlast-Error") != "invalid" {
					t.Errorf("got error %q (Outlast-Error %q), want one naming %s", e.Error.Message, resp.Header.Get("Outlast-Error"), c.errText)
				}
			}
		})
	}
}

type errorShape struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeError(t *testing.T, body string) errorShape {
	t.Helper()
	var e errorShape
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("body %q is not the OpenAI error shape: %v", body, err)
	}
	return e
}

// A body over --max-body gets 413 and is never forwarded.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	u, _ := url.Parse(up.URL)
	g, _ := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u}}, MaxBody: 10, Logger: slog.New(slog.DiscardHandler)})
	s := httptest.NewServer(g)
	defer s.Close()
	for _, chunked := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(chat))
		if chunked {
			req.ContentLength = -1 // the gateway must count, not trust the header
			req.Body = io.NopCloser(strings.NewReader(chat))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || resp.Header.Get("Outlast-Error") != "too-large" {
			t.Errorf("chunked %v: got %d %q, want 413 too-large", chunked, resp.StatusCode, resp.Header.Get("Outlast-Error"))
		}
		decodeError(t, string(b))
	}
	if up.attempts() != 0 {
		t.Errorf("the upstream saw %d attempts, want 0", up.attempts())
	}
}

// With one slot and no queue, a second request is refused at once as busy,
// with a Retry-After estimate; the first still succeeds.
func TestBusy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		status(200, "{}")(w, r)
	})
	obs, ev := events()
	base, _ := gwObserved(t, up, func(u *gateway.Upstream) { u.Slots, u.Queue = 1, -1 }, obs)
	done := make(chan int)
	go func() {
		resp, _ := send(t, http.MethodPost, base+"/v1/chat/completions", chat, nil)
		done <- resp.StatusCode
	}()
	await(t, ev, "sent ") // the first holds the one slot
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", chat, nil)
	close(release)
	if resp.StatusCode != 503 || resp.Header.Get("Outlast-Error") != "busy" || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("got %d %q Retry-After %q X-Should-Retry %q, want 503 busy with Retry-After and X-Should-Retry: false",
			resp.StatusCode, resp.Header.Get("Outlast-Error"), resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"))
	}
	if e := decodeError(t, body); e.Error.Type != "outlast_busy" {
		t.Errorf("got error type %q, want outlast_busy", e.Error.Type)
	}
	if code := <-done; code != 200 {
		t.Errorf("the first request got %d, want 200", code)
	}
}

// An upstream that cannot be reached gets 502; one whose first byte never
// comes gets 504.
func TestUnreachableAndTimeout(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("http://" + downAddr)
	g, _ := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}}}, Logger: slog.New(slog.DiscardHandler)})
	s := httptest.NewServer(g)
	defer s.Close()
	resp, body := send(t, http.MethodPost, s.URL+"/v1/chat/completions", chat, nil)
	if resp.StatusCode != 502 || resp.Header.Get("Outlast-Error") != "unreachable" || resp.Header.Get("Outlast-Attempts") != "2" {
		t.Errorf("got %d %q after %s attempts, want 502 unreachable after 2", resp.StatusCode, resp.Header.Get("Outlast-Error"), resp.Header.Get("Outlast-Attempts"))
	}
	decodeError(t, body)

	stall := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	base, _ := gw(t, stall, func(u *gateway.Upstream) { u.FirstByteTimeout = 50 * time.Millisecond })
	resp, _ = send(t, http.MethodPost, base+"/v1/chat/completions", `{"stream":true}`, nil)
	// The attempts the gateway made: on a loaded machine the last may be
	// cancelled at its first-byte timeout before the upstream's handler
	// has run, and the upstream would count one fewer.
	if resp.StatusCode != 504 || resp.Header.Get("Outlast-Error") != "timeout" || resp.Header.Get("Outlast-Attempts") != "3" {
		t.Errorf("got %d %q after %s attempts, want 504 timeout after 3", resp.StatusCode, resp.Header.Get("Outlast-Error"), resp.Header.Get("Outlast-Attempts"))
	}
	// A status path that gets no answer within the first-byte timeout is
	// a timeout too, not an unreachable upstream.
	silent := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	base, _ = gw(t, silent, func(u *gateway.Upstream) { u.FirstByteTimeout = 50 * time.Millisecond })
	resp, _ = send(t, http.MethodGet, base+"/health", "", nil)
	if resp.StatusCode != 504 || resp.Header.Get("Outlast-Error") != "timeout" {
		t.Errorf("GET /health of a silent upstream: got %d %q, want 504 timeout", resp.StatusCode, resp.Header.Get("Outlast-Error"))
	}
}

// A stream that fails before its first byte is retried; the caller gets
// the whole second stream.
func TestStreamRetriedBeforeFirstByte(t *testing.T) {
	t.Parallel()
	up := newUpstream(t,
		func(w http.ResponseWriter, r *http.Request) { // headers, then silence
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
		sse("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"), // Anthropic's overload
		sse("data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"),
	)
	base, _ := gw(t, up, func(u *gateway.Upstream) { u.FirstByteTimeout = 100 * time.Millisecond })
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", `{"model":"m","stream":true}`, nil)
	if resp.StatusCode != 200 || body != "data: one\n\ndata: two\n\ndata: [DONE]\n\n" {
		t.Fatalf("got %d %q, want the third attempt's stream", resp.StatusCode, body)
	}
	if resp.Header.Get("Outlast-Attempts") != "3" || up.attempts() != 3 {
		t.Errorf("got Outlast-Attempts %q, %d upstream attempts; want 3, 3", resp.Header.Get("Outlast-Attempts"), up.attempts())
	}
}

// A body that is not a stream, broken off by the upstream, is never
// passed off as complete: the gateway reads an answer that is not a stream
// to its end before it commits, so a body broken off anywhere is a failed
// attempt, retried like any other. After the last, the caller gets a 502
// with Outlast-Error: upstream-broke; if a retry is whole, the caller gets
// it, and never a byte of the broken one.
func TestBodyBrokenOff(t *testing.T) {
	t.Parallel()
	// brokeAfter answers 200 with a Content-Length of 100, sends n bytes
	// of it, and closes the connection, for the first fails attempts.
	brokeAfter := func(n int, fails int32) http.HandlerFunc {
		var seen atomic.Int32
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if seen.Add(1) > fails {
				io.WriteString(w, `{"whole":true}`)
				return
			}
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			io.WriteString(w, strings.Repeat("x", n))
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}
	}
	for _, c := range []struct {
		name   string
		n      int
		fails  int32
		status int
		body   string
	}{
		{"before the first byte, every attempt", 0, 9, 502, "broke off"},
		{"after 10 bytes, every attempt", 10, 9, 502, "broke off"},
		{"after 10 bytes, once", 10, 1, 200, `{"whole":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			obs, records := doneRecords()
			base, _ := gwObserved(t, newUpstream(t, brokeAfter(c.n, c.fails)), func(u *gateway.Upstream) { u.FirstByteTimeout = 0 }, obs)
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chat))
			if err != nil {
				t.Fatalf("got %v, want a status line", err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != c.status || !strings.Contains(string(body), c.body) || strings.Contains(string(body), "xxx") {
				t.Errorf("got %d %q, error %v; want %d with %q, whole, and no byte of a broken body", resp.StatusCode, body, err, c.status, c.body)
			}
			r := <-records
			if c.status == 502 && (r.Error != "upstream-broke" || r.Committed || len(r.Attempts) < 2) {
				t.Errorf("recorded %d %q, committed %v, %d attempts; want 502 upstream-broke, not committed, retried", r.Status, r.Error, r.Committed, len(r.Attempts))
			}
		})
	}
}

// doneRecords returns an observer that sends each finished record on the
// channel it returns.
func doneRecords() (record.Observer, chan record.Request) {
	ch := make(chan record.Request, 16)
	return record.Observer{Done: func(r *record.Request) { ch <- *r }}, ch
}

// A stream that fails after its first byte is not retried: it ends with
// an error event carrying JSON.
func TestStreamFailsAfterFirstByte(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	base, _ := gw(t, up, nil)
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", `{"stream":true}`, nil)
	if resp.StatusCode != 200 || up.attempts() != 1 {
		t.Fatalf("got %d after %d attempts, want 200 after 1", resp.StatusCode, up.attempts())
	}
	rest, ok := strings.CutPrefix(body, "data: one\n\nevent: error\ndata: ")
	if !ok {
		t.Fatalf("got %q, want the first event, then an error event", body)
	}
	decodeError(t, strings.TrimSpace(rest))
}

// Stream chunks are forwarded as they arrive, not buffered.
func TestStreamNotBuffered(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "data: two\n\n")
	})
	base, _ := gw(t, up, nil)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("got %q %v before the second event was sent, want the first event", line, err)
	}
	close(next)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Errorf("got the rest %q", rest)
	}
}

// A path in the upstream URL is a prefix joined to the request's path, and
// an upstream's prefix routes and is removed.
func TestRouting(t *testing.T) {
	t.Parallel()
	a := newUpstream(t, status(200, "a"))
	b := newUpstream(t, status(200, "b"))
	ua, _ := url.Parse(a.URL + "/v1")
	ub, _ := url.Parse(b.URL + "/api?key=k")
	g, err := gateway.New(gateway.Config{Logger: slog.New(slog.DiscardHandler), Upstreams: []gateway.Upstream{
		{Name: "a", URL: ua},
		{Name: "b", Prefix: "/llama/", URL: ub},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	defer s.Close()
	cases := []struct{ path, body, seenPath, seenQuery string }{
		{"/chat/completions?q=1", "a", "/v1/chat/completions", "q=1"},
		{"/llama/completion", "b", "/api/completion", "key=k"},
		{"/llamas", "a", "/v1/llamas", ""},
	}
	for _, c := range cases {
		resp, body := send(t, http.MethodGet, s.URL+c.path, "", nil)
		if resp.StatusCode != 200 || body != c.body {
			t.Errorf("%s: got %d %q, want 200 %q", c.path, resp.StatusCode, body, c.body)
		}
	}
	if r := a.request(0); r.URL.Path != "/v1/chat/completions" || r.URL.RawQuery != "q=1" {
		t.Errorf("a saw %s?%s", r.URL.Path, r.URL.RawQuery)
	}
	if r := b.request(0); r.URL.Path != "/api/completion" || r.URL.RawQuery != "key=k" {
		t.Errorf("b saw %s?%s", r.URL.Path, r.URL.RawQuery)
	}
}

// A request that names a llama.cpp slot waits for that slot alone.
func TestNamedSlots(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		status(200, "{}")(w, r)
	})
	obs, ev := events()
	base, g := gwObserved(t, up, func(u *gateway.Upstream) { u.Slots = 2 }, obs)
	var wg sync.WaitGroup
	// Each request is sent once the one before it has reached the gate:
	// slot 0 is taken, the second waits for it, and slot 1 is free.
	for _, c := range []struct{ body, reached string }{
		{`{"id_slot":0}`, "sent 0"},
		{`{"id_slot":0}`, "queued 0"},
		{`{"id_slot":1}`, "sent 1"},
	} {
		wg.Go(func() { send(t, http.MethodPost, base+"/completion", c.body, nil) })
		await(t, ev, c.reached)
	}
	if h := g.Health().Upstreams[0]; h.InFlight != 2 || h.Queued != 1 || h.Named["slot 0"] != 1 {
		t.Errorf("got %d in flight, %d queued, %v by slot; want 2, 1 and slot 0 with 1", h.InFlight, h.Queued, h.Named)
	}
	close(release)
	wg.Wait()
	if up.attempts() != 3 {
		t.Errorf("got %d attempts, want 3", up.attempts())
	}
}

// The health endpoint names the upstreams and their load; other paths
// under /outlast/ are the gateway's, not forwarded.
func TestOwnEndpoints(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	base, _ := gw(t, up, func(u *gateway.Upstream) { u.Name, u.Slots = "llama", 2 })
	resp, body := send(t, http.MethodGet, base+"/outlast/health", "", nil)
	var h gateway.Health
	if err := json.Unmarshal([]byte(body), &h); err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %d %q: %v", resp.StatusCode, body, err)
	}
	if len(h.Upstreams) != 1 || h.Upstreams[0].Name != "llama" || h.Upstreams[0].Slots != 2 || h.Version == "" {
		t.Errorf("got %+v", h)
	}
	resp, _ = send(t, http.MethodGet, base+"/outlast/nothing", "", nil)
	if resp.StatusCode != 404 || up.attempts() != 0 {
		t.Errorf("got %d with %d upstream attempts, want 404 and nothing forwarded", resp.StatusCode, up.attempts())
	}
}

// SIGINT or SIGTERM drains: a request in flight when serving ends still
// gets its answer, and Serve returns nil.
func TestGracefulDrain(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		status(200, `{"late":true}`)(w, r)
	})
	u, _ := url.Parse(up.URL)
	g, _ := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u}}, Logger: slog.New(slog.DiscardHandler)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gateway.Serve(ctx, l, g, gateway.ServerConfig{Grace: 10 * time.Second}) }()
	answer := make(chan string, 1)
	go func() {
		resp, body := send(t, http.MethodPost, "http://"+l.Addr().String()+"/v1/x", chat, nil)
		answer <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	<-started
	cancel()
	close(release)
	select {
	case got := <-answer:
		if got != `200 {"late":true}` {
			t.Errorf("got %s, want the answer", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight did not finish")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

// Endpoints mount handlers under /outlast/, exact or by prefix, and
// Observers tells every observer, in order.
func TestEndpointsAndObservers(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	u, _ := url.Parse(up.URL)
	var mu sync.Mutex
	var calls []string
	told := make(chan struct{}, 2)
	note := func(s string) func(*record.Request) {
		return func(*record.Request) { mu.Lock(); calls = append(calls, s); mu.Unlock(); told <- struct{}{} }
	}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u}},
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  record.Observers(record.Observer{Done: note("a")}, record.Observer{}, record.Observer{Done: note("b")}),
		Endpoints: map[string]http.Handler{
			"metrics":   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m") }),
			"requests/": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "r:"+r.URL.Path) }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	defer s.Close()
	for path, want := range map[string]string{
		"/outlast/metrics":       "m",
		"/outlast/requests/abc":  "r:/outlast/requests/abc",
		"/outlast/metrics/extra": `{"type":"error"`,
	} {
		_, body := send(t, http.MethodGet, s.URL+path, "", nil)
		if !strings.HasPrefix(body, want) {
			t.Errorf("%s: got %q, want %q", path, body, want)
		}
	}
	send(t, http.MethodPost, s.URL+"/v1/chat/completions", chat, nil)
	// The observers hear of the request once its answer is sent, which
	// the caller may have read by then.
	<-told
	<-told
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(calls, ",") != "a,b" {
		t.Errorf("got observer calls %v, want [a b]", calls)
	}
}

// Observers never see credentials or the headers named in Redact; the
// upstream still gets them.
func TestObserverHeadersRedacted(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	u, _ := url.Parse(up.URL)
	got := make(chan http.Header, 1)
	g, _ := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u}},
		Logger:    slog.New(slog.DiscardHandler),
		Redact:    []string{"X-Org-Secret"},
		Observer:  record.Observer{Headers: true, Done: func(r *record.Request) { got <- r.Header.Clone() }},
	})
	s := httptest.NewServer(g)
	defer s.Close()
	send(t, http.MethodPost, s.URL+"/v1/messages", chat, map[string]string{
		"Authorization": "Bearer sk-1", "X-Api-Key": "ak-2", "Cookie": "c=3", "X-Org-Secret": "o-4", "User-Agent": "host/1",
	})
	h := <-got
	for _, k := range []string{"Authorization", "X-Api-Key", "Cookie", "X-Org-Secret"} {
		if h.Get(k) != "" {
			t.Errorf("the observer saw %s", k)
		}
	}
	if h.Get("User-Agent") != "host/1" {
		t.Errorf("got User-Agent %q, want host/1", h.Get("User-Agent"))
	}
	if r := up.request(0); r.Header.Get("X-Org-Secret") != "o-4" || r.Header.Get("Authorization") != "Bearer sk-1" {
		t.Error("the upstream lost a header that only the record must not keep")
	}

	// No observer reads headers: none are copied for the record.
	g2, _ := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u}},
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  record.Observer{Done: func(r *record.Request) { got <- r.Header }},
	})
	s2 := httptest.NewServer(g2)
	defer s2.Close()
	send(t, http.MethodPost, s2.URL+"/v1/messages", chat, map[string]string{"User-Agent": "host/1"})
	if h := <-got; h != nil {
		t.Errorf("with no observer reading headers, got %v, want none copied", h)
	}
}

// A failure the gateway has retried or decided says so, with
// X-Should-Retry: false, which the OpenAI and Anthropic SDKs honour: a
// client retrying it would multiply the gateway's attempts. A failure the
// gateway did not retry (retries off, or an outer outlast layer that
// retries itself) leaves the client free to.
func TestShouldRetryFalse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		script []http.HandlerFunc // nil: the upstream is down
		header map[string]string
		status int
		want   string // X-Should-Retry
	}{
		// The upstream's last failure, after the gateway's retries.
		{"retried to the bound", []http.HandlerFunc{status(503, "{}")}, nil, 503, "false"},
		// The policy judged it: a 400 would fail again.
		{"not retryable", []http.HandlerFunc{status(400, "{}")}, nil, 400, "false"},
		{"unreachable after retries", nil, nil, 502, "false"},
		// The deadline is the caller's, and it has passed.
		{"deadline", []http.HandlerFunc{hang}, map[string]string{"Outlast-Timeout": "50ms"}, 504, "false"},
		// Nothing was retried: the client's choice stands.
		{"retries off", []http.HandlerFunc{status(503, "{}")}, map[string]string{"Outlast-Retry": "off"}, 503, ""},
		{"unreachable, retries off", nil, map[string]string{"Outlast-Retry": "off"}, 502, ""},
		// An outer outlast layer retries: it must be free to.
		{"outer layer", []http.HandlerFunc{status(503, "{}")}, map[string]string{"Outlast-Attempt": "1"}, 503, ""},
		{"success", []http.HandlerFunc{status(200, "{}")}, nil, 200, ""},
		// A 200 stream that opens with an error is a failure the policy
		// has judged too.
		{"error event first, retried to the bound", []http.HandlerFunc{sse("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n")}, nil, 200, "false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var base string
			if c.script == nil {
				u, _ := url.Parse("http://" + downAddr)
				g, _ := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}}}, Logger: slog.New(slog.DiscardHandler)})
				s := httptest.NewServer(g)
				t.Cleanup(s.Close)
				base = s.URL
			} else {
				base, _ = gw(t, newUpstream(t, c.script...), nil)
			}
			resp, _ := send(t, http.MethodPost, base+"/v1/chat/completions", chat, c.header)
			if resp.StatusCode != c.status || resp.Header.Get("X-Should-Retry") != c.want {
				t.Errorf("got %d with X-Should-Retry %q, want %d with %q", resp.StatusCode, resp.Header.Get("X-Should-Retry"), c.status, c.want)
			}
		})
	}
}

// A health or status endpoint is forwarded once, outside the gate, and
// kept out of the record: a host polling llama.cpp's /health while the
// model loads sees its "loading" 503 at once, even while the one slot is
// busy. The same path by POST, or with no status paths, is a model
// request like any other.
func TestStatusPaths(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/health":
			status(503, `{"error":{"message":"Loading model"}}`)(w, r)
		case r.Method == http.MethodGet:
			status(200, `{"path":"`+r.URL.Path+`"}`)(w, r)
		default:
			<-release
			status(200, "{}")(w, r)
		}
	})
	obs, ev := events()
	var recorded []string
	var mu sync.Mutex
	done := obs.Done
	obs.Done = func(r *record.Request) {
		mu.Lock()
		recorded = append(recorded, r.Method+" "+r.Path)
		mu.Unlock()
		done(r)
	}
	base, _ := gwObserved(t, up, func(u *gateway.Upstream) { u.Slots, u.Queue = 1, -1 }, obs)
	held := make(chan error, 1)
	go func() { // holds the slot
		resp, err := http.Post(base+"/completion", "application/json", strings.NewReader(chat))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	await(t, ev, "sent ")
	resp, body := send(t, http.MethodGet, base+"/health", "", nil)
	if resp.StatusCode != 503 || !strings.Contains(body, "Loading model") || resp.Header.Get("Outlast-Request-Id") != "" {
		t.Errorf("GET /health: got %d %q (request id %q), want the upstream's 503 as it came, unrecorded", resp.StatusCode, body, resp.Header.Get("Outlast-Request-Id"))
	}
	for _, path := range []string{"/slots", "/v1/models", "/v1/models/gpt-4o"} {
		if resp, body := send(t, http.MethodGet, base+path, "", nil); resp.StatusCode != 200 || !strings.Contains(body, path) {
			t.Errorf("GET %s: got %d %q, want the upstream's 200 past the busy slot", path, resp.StatusCode, body)
		}
	}
	if got := up.attempts(); got != 5 {
		t.Errorf("the upstream saw %d requests, want 5: one each, none retried", got)
	}
	// Not a status path: /healthz is a model request, refused by the
	// full gate.
	if resp, _ := send(t, http.MethodGet, base+"/healthz", "", nil); resp.StatusCode != 503 || resp.Header.Get("Outlast-Error") != "busy" {
		t.Errorf("GET /healthz: got %d %q, want 503 busy", resp.StatusCode, resp.Header.Get("Outlast-Error"))
	}
	await(t, ev, "done ") // the busy one
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	await(t, ev, "done ") // the slot's
	mu.Lock()
	defer mu.Unlock()
	for _, r := range recorded {
		if r != "POST /completion" && r != "GET /healthz" {
			t.Errorf("recorded %s, want only model requests", r)
		}
	}

	// With no status paths, /health is retried like any request.
	up2 := newUpstream(t, status(503, "{}"))
	base2, _ := gw(t, up2, func(u *gateway.Upstream) { u.StatusPaths = []string{} })
	if resp, _ := send(t, http.MethodGet, base2+"/health", "", nil); resp.StatusCode != 503 || up2.attempts() != 3 {
		t.Errorf("no status paths: got %d after %d attempts, want 503 after 3", resp.StatusCode, up2.attempts())
	}
}

// With a token, a browser reaches the timeline page by HTTP Basic
// authentication, the token as the password: it is asked for it on
// /outlast/ alone. Basic authentication never admits a request that is
// forwarded, whose Authorization is the provider's.
func TestTokenByBasicAuthForThePage(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	u, _ := url.Parse(up.URL)
	g, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u}}, Token: "t0ken", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	for _, c := range []struct {
		path, user, password string
		status               int
		challenge            string
	}{
		{"/outlast/health", "", "", 401, "Basic"},
		{"/outlast/health", "anyone", "t0ken", 200, ""},
		{"/outlast/health", "anyone", "t0kem", 401, "Basic"},
		{"/v1/models", "", "", 401, "Outlast-Token"},
		{"/v1/models", "anyone", "t0ken", 401, "Outlast-Token"},
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+c.path, nil)
		if c.user != "" {
			req.SetBasicAuth(c.user, c.password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if challenge, _, _ := strings.Cut(resp.Header.Get("WWW-Authenticate"), " "); resp.StatusCode != c.status || challenge != c.challenge {
			t.Errorf("%s as %q:%q: got %d, challenge %q; want %d, %q", c.path, c.user, c.password, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.status, c.challenge)
		}
	}
	if up.attempts() != 0 {
		t.Errorf("the upstream got %d requests, want none", up.attempts())
	}
}

// TestGatewayAnswerBeforeRecord checks that the caller has the whole
// answer before the record is finished: the observers and the log line
// cost the caller nothing, whether the answer is JSON or an error. (A
// stream's last chunk is net/http's to write, once the handler returns.)
func TestGatewayAnswerBeforeRecord(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer http.HandlerFunc
	}{
		// Larger than one read of the body, so that its end is not
		// flushed with its first bytes.
		{"json", status(200, `{"id":"x","pad":"`+strings.Repeat("p", 97<<10)+`"}`)},
		{"error", status(400, `{"error":{"message":"no"}}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := make(chan struct{})
			recorded := make(chan struct{})
			up := newUpstream(t, c.answer)
			url, _ := gwObserved(t, up, nil, record.Observer{Done: func(*record.Request) {
				defer close(recorded)
				select {
				case <-read:
				case <-time.After(10 * time.Second):
					t.Error("the record was finished before the caller had the whole answer")
				}
			}})
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.Contains(string(b), "x") && c.name != "error" {
				t.Fatalf("read %q, %v; want the whole answer", b, err)
			}
			close(read)
			<-recorded
		})
	}
}

// TestGatewayIdleBeyondMaxBody checks that an answer not read whole
// before commit, over MaxBody or finding no room in the hold budget,
// still has its idle timeout: it streams from the upstream with its
// length declared, and may fall silent half-way. Its record says it was
// not held.
func TestGatewayIdleBeyondMaxBody(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  gateway.Config
	}{
		{"over MaxBody", gateway.Config{MaxBody: 1024}},
		{"over the hold budget", gateway.Config{HoldBudget: 1024}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "4096")
				io.WriteString(w, strings.Repeat("x", 2048))
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
				}
			})
			u, _ := url.Parse(up.URL)
			done := make(chan record.Request, 1)
			cfg := c.cfg
			cfg.Upstreams = []gateway.Upstream{{URL: u, IdleTimeout: 200 * time.Millisecond, FirstByteTimeout: 2 * time.Second}}
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Observer = record.Observer{Done: func(r *record.Request) { done <- *r }}
			g, err := gateway.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := httptest.NewServer(g)
			defer s.Close()
			defer close(release) // first: the upstream's handler ends, and then the servers
			read := make(chan error, 1)
			go func() {
				resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				read <- err
			}()
			select {
			case err := <-read:
				if err == nil {
					t.Error("the answer that fell silent half-way was read as whole")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("an answer that fell silent was not cut at the idle timeout")
			}
			if rec := <-done; rec.Held || rec.Error != record.ErrorUpstreamBroke {
				t.Errorf("recorded held %v, error %q; want not held, %q", rec.Held, rec.Error, record.ErrorUpstreamBroke)
			}
		})
	}
}

// TestGatewayErrorLength checks that an error the gateway makes goes with
// its length, not chunked, though it is flushed before the handler
// returns.
func TestGatewayErrorLength(t *testing.T) {
	up := newUpstream(t, status(200, `{}`))
	url, _ := gw(t, up, nil)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Outlast-Timeout", "bogus")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.ContentLength != int64(len(b)) || len(resp.TransferEncoding) > 0 {
		t.Errorf("got %d, length %d, %v for a %d-byte body; want 400 with its length, not chunked", resp.StatusCode, resp.ContentLength, resp.TransferEncoding, len(b))
	}
}

// Two upstreams of one name are refused: health, metrics and the record
// tell upstreams by name, and one's outage would hide in the other's
// counts. The default name, the URL's host, collides too.
func TestUpstreamNamesUnique(t *testing.T) {
	u, _ := url.Parse("http://llm.test:8080")
	for _, names := range [][2]string{{"llm", "llm"}, {"", ""}} {
		_, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{
			{Name: names[0], URL: u, Prefix: "/a"},
			{Name: names[1], URL: u, Prefix: "/b"},
		}})
		if err == nil || !strings.Contains(err.Error(), "is used twice") {
			t.Errorf("names %q: got %v, want the name refused as used twice", names, err)
		}
	}
}
