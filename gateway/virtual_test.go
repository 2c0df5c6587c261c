package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// Tests of the gateway's timing, in virtual time: the handler is called
// directly, and the upstream is a RoundTripper in the same bubble.

// fakeUpstream answers attempt n with script[n-1], the last once past the
// end, after delay.
type fakeUpstream struct {
	mu     sync.Mutex // guards n
	n      int
	delay  time.Duration
	script []func() *http.Response
}

func (f *fakeUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.n++
	mk := f.script[min(f.n, len(f.script))-1]
	f.mu.Unlock()
	select {
	case <-time.After(f.delay):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	resp := mk()
	resp.Request = r
	return resp, nil
}

func (f *fakeUpstream) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func answer(code int, contentType, body string) func() *http.Response {
	return func() *http.Response {
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(strings.NewReader(body))}
	}
}

func virtualGateway(t *testing.T, f *fakeUpstream, p *outlast.Policy) *gateway.Gateway {
	t.Helper()
	return observedGateway(t, f, p, record.Observer{})
}

// observedGateway is virtualGateway with an observer.
func observedGateway(t *testing.T, f *fakeUpstream, p *outlast.Policy, obs record.Observer) *gateway.Gateway {
	t.Helper()
	u, _ := url.Parse("http://upstream.test")
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u, Policy: p, FirstByteTimeout: time.Minute}},
		Transport: f,
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func serve(g http.Handler, body string, header map[string]string) *httptest.ResponseRecorder {
	return serveAt(g, "/v1/chat/completions", body, header)
}

// serveAt is serve for a request to path.
func serveAt(g http.Handler, path, body string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec
}

// Outlast-Timeout with Outlast-Reserve: the last wait repeats while the
// deadline would keep the reserve, then the last failure is returned at
// once. The reserve is the caller's own: a reserve header may lower the
// operator's reserve as well as raise it.
func TestDeadlineWithReserve(t *testing.T) {
	for _, c := range []struct {
		name, reserve string
		attempts      int
		took          time.Duration
	}{
		// Attempts end at 1, 22, 43 and 64 s; after 64 s a 20 s wait
		// would leave 16 s, less than the operator's 30 s reserve.
		{"the operator's reserve", "", 4, 64 * time.Second},
		// After 64 s a 20 s wait leaves 16 s, more than 10 s: one more
		// attempt, to 85 s, after which a wait would pass the deadline.
		{"a lower reserve", "10s", 5, 85 * time.Second},
		{"no reserve", "0", 5, 85 * time.Second},
		// After 43 s a 20 s wait would leave 37 s, less than 50 s.
		{"a higher reserve", "50s", 3, 43 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeUpstream{delay: time.Second, script: []func() *http.Response{answer(503, "application/json", `{"error":"down"}`)}}
				g := virtualGateway(t, f, &outlast.Policy{Waits: []time.Duration{20 * time.Second}, Reserve: 30 * time.Second})
				start := time.Now()
				h := map[string]string{"Outlast-Timeout": "100s"}
				if c.reserve != "" {
					h["Outlast-Reserve"] = c.reserve
				}
				rec := serve(g, chat, h)
				if rec.Code != 503 || f.attempts() != c.attempts {
					t.Errorf("got %d after %d attempts, want 503 after %d", rec.Code, f.attempts(), c.attempts)
				}
				if got := time.Since(start); got != c.took {
					t.Errorf("answered after %v, want %v", got, c.took)
				}
			})
		})
	}
}

// A deadline that passes while an attempt is in flight gets 504 deadline.
func TestDeadlinePassesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeUpstream{delay: 10 * time.Second, script: []func() *http.Response{answer(200, "application/json", "{}")}}
		g := virtualGateway(t, f, &outlast.Policy{Waits: []time.Duration{time.Second}})
		rec := serve(g, chat, map[string]string{"Outlast-Timeout": "5s"})
		if rec.Code != 504 || rec.Header().Get("Outlast-Error") != "deadline" {
			t.Errorf("got %d %q, want 504 deadline", rec.Code, rec.Header().Get("Outlast-Error"))
		}
	})
}

// A streaming request that asks for progress gets SSE comments while it
// waits out the outage, at least every 15 s, then the stream.
func TestProgressComments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeUpstream{script: []func() *http.Response{
			answer(503, "application/json", "{}"),
			answer(503, "application/json", "{}"),
			answer(200, "text/event-stream", "data: hello\n\n"),
		}}
		g := virtualGateway(t, f, &outlast.Policy{Waits: []time.Duration{40 * time.Second, 40 * time.Second}})
		rec := serve(g, `{"stream":true}`, map[string]string{"Outlast-Progress": "sse"})
		want := ": outlast retrying attempt=2 in=40s status=503\n\n" +
			": outlast waiting\n\n" + // 15 s
			": outlast waiting\n\n" + // 30 s
			": outlast retrying attempt=3 in=40s status=503\n\n" + // 40 s
			": outlast waiting\n\n" + // 45 s
			": outlast waiting\n\n" + // 60 s
			": outlast waiting\n\n" + // 75 s
			"data: hello\n\n" // 80 s
		if rec.Code != 200 || rec.Body.String() != want {
			t.Errorf("got %d\n%s\nwant 200\n%s", rec.Code, rec.Body.String(), want)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("got Content-Type %q, want text/event-stream", ct)
		}
	})
}

// pausedBody is a body that sends its first part, waits pause, then
// sends the rest, in virtual time.
type pausedBody struct {
	first, rest string
	pause       time.Duration
}

func (b *pausedBody) Read(p []byte) (int, error) {
	switch {
	case b.first != "":
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	case b.pause > 0:
		time.Sleep(b.pause)
		b.pause = 0
	case b.rest == "":
		return 0, io.EOF
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *pausedBody) Close() error { return nil }

// The events before a stream's answer are held until its first content
// event, and progress comments flow while they are: a model that takes
// 40 s to its first token after message_start keeps the caller's
// connection alive, and the caller then reads the stream whole, its
// preamble once.
func TestProgressWhilePreambleHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n"
		text := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		f := &fakeUpstream{script: []func() *http.Response{func() *http.Response {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: &pausedBody{first: start, rest: text, pause: 40 * time.Second}}
		}}}
		g := virtualGateway(t, f, &outlast.Policy{Waits: []time.Duration{time.Second}})
		rec := serve(g, `{"stream":true}`, map[string]string{"Outlast-Progress": "sse"})
		want := ": outlast waiting\n\n" + ": outlast waiting\n\n" + start + text
		if rec.Code != 200 || rec.Body.String() != want || f.attempts() != 1 {
			t.Errorf("got %d after %d attempts\n%s\nwant 200 after 1\n%s", rec.Code, f.attempts(), rec.Body.String(), want)
		}
	})
}

// Once progress comments have gone out, an upstream failure before the
// stream starts ends the response as an error event, and the record
// keeps the failure the caller got, not the 200 that carried it.
func TestProgressThenFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeUpstream{script: []func() *http.Response{answer(503, "application/json", `{"error":"down"}`)}}
		var done record.Request
		g := observedGateway(t, f, &outlast.Policy{Waits: []time.Duration{20 * time.Second}}, record.Observer{Done: func(r *record.Request) { done = *r }})
		rec := serve(g, `{"stream":true}`, map[string]string{"Outlast-Progress": "sse"})
		if done.Status != 503 || done.Error != "upstream-error" {
			t.Errorf("recorded %d %q, want 503 upstream-error", done.Status, done.Error)
		}
		body := rec.Body.String()
		if rec.Code != 200 || !strings.HasPrefix(body, ": outlast retrying attempt=2 in=20s status=503\n\n: outlast waiting\n\n") {
			t.Fatalf("got %d %q, want progress comments first", rec.Code, body)
		}
		if !strings.Contains(body, "event: error\ndata: {") || !strings.Contains(body, `\"down\"`) {
			t.Errorf("got %q, want an error event carrying the upstream's answer", body)
		}
	})
}

// An error the gateway makes after progress comments comes as an error
// event, and the record keeps its status and kind.
func TestProgressThenDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeUpstream{delay: time.Minute, script: []func() *http.Response{answer(200, "text/event-stream", "data: late\n\n")}}
		var done record.Request
		g := observedGateway(t, f, &outlast.Policy{Waits: []time.Duration{time.Second}}, record.Observer{Done: func(r *record.Request) { done = *r }})
		rec := serve(g, `{"stream":true}`, map[string]string{"Outlast-Progress": "sse", "Outlast-Timeout": "20s"})
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "event: error") || !strings.Contains(rec.Body.String(), "outlast_deadline") {
			t.Errorf("got %d %q, want 200 with a deadline error event", rec.Code, rec.Body.String())
		}
		if done.Status != 504 || done.Error != "deadline" {
			t.Errorf("recorded %d %q, want 504 deadline", done.Status, done.Error)
		}
	})
}

// timedWriter is a ResponseWriter that notes when each write reached it,
// in virtual time. With block set, a write after the first event waits
// for the write deadline, as one to a caller that stopped reading does.
type timedWriter struct {
	header http.Header
	block  bool

	mu   sync.Mutex // guards code, body and at
	code int
	body strings.Builder
	at   []time.Time

	dmu      sync.Mutex // guards deadline and changed
	deadline time.Time
	changed  chan struct{} // closed when the deadline changes
}

func (w *timedWriter) Header() http.Header { return w.header }
func (w *timedWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = code
	}
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.block && strings.Contains(w.body.String(), "\n\n") {
		return 0, w.stall()
	}
	w.at = append(w.at, time.Now())
	w.body.Write(p)
	return len(p), nil
}

// stall waits for the write deadline to pass, as a write to a caller
// that reads nothing does.
func (w *timedWriter) stall() error {
	for {
		w.dmu.Lock()
		d := w.deadline
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.dmu.Unlock()
		var passed <-chan time.Time
		if !d.IsZero() {
			if !time.Now().Before(d) {
				return os.ErrDeadlineExceeded
			}
			passed = time.After(time.Until(d))
		}
		select {
		case <-changed:
		case <-passed:
		}
	}
}

func (w *timedWriter) Flush() {}

func (w *timedWriter) SetWriteDeadline(t time.Time) error {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	w.deadline = t
	if w.changed != nil {
		close(w.changed)
	}
	w.changed = make(chan struct{})
	return nil
}

// A stream carried on goes on hearing from the gateway while its
// continuation waits: a comment, which every SSE client skips, at least
// every ProgressInterval, whether or not the caller asked for progress,
// so that neither a proxy's nor an SDK's read timeout ends a stream that
// the gateway is about to carry on. A caller that takes none of it for
// the idle timeout is gone, and the continuation's attempts end.
func TestContinuationKeepsCallerHearing(t *testing.T) {
	broken := chunkEvent("Hel", "") + "\n\n"
	rest := chunkEvent("lo", "stop") + "\n\ndata: [DONE]\n\n"
	for _, reading := range []bool{true, false} {
		t.Run(map[bool]string{true: "reading", false: "not reading"}[reading], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The stream breaks after its first chunk; its
				// continuation's first five attempts get 503s, with
				// serve's waits: 62 s before the sixth.
				script := []func() *http.Response{answer(200, "text/event-stream", broken)}
				for range 5 {
					script = append(script, answer(503, "application/json", `{}`))
				}
				script = append(script, answer(200, "text/event-stream", rest))
				f := &fakeUpstream{script: script}
				u, _ := url.Parse("http://upstream.test")
				var records []record.Request
				g, err := gateway.New(gateway.Config{
					Upstreams: []gateway.Upstream{{URL: u, Continuation: gateway.ContinuePrefill, IdleTimeout: 20 * time.Second,
						Policy: &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second}}}},
					Transport: f,
					Logger:    slog.New(slog.DiscardHandler),
					Observer:  record.Observer{Done: func(r *record.Request) { records = append(records, *r) }},
				})
				if err != nil {
					t.Fatal(err)
				}
				w := &timedWriter{header: http.Header{}, block: !reading}
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(openAIStream))
				start := time.Now()
				g.ServeHTTP(w, req)
				took := time.Since(start)
				synctest.Wait()
				if !reading {
					// Its first comment, at 15 s, is not taken by 35 s.
					if n := f.attempts(); n == 7 || took > gateway.DefaultProgressInterval+20*time.Second {
						t.Errorf("%d attempts in %v for a caller gone since its first chunk, want the continuation's to end once the caller took no comment for the idle timeout", n, took)
					}
					if len(records) != 1 || records[0].Error != record.ErrorClientClosed {
						t.Errorf("records %+v, want one, client-closed", records)
					}
					return
				}
				if got := w.body.String(); !strings.Contains(got, `"Hel"`) || !strings.Contains(got, `"lo"`) || !strings.Contains(got, ": outlast continuing") {
					t.Fatalf("the caller got\n%s\nwant the whole answer, with comments while the continuation waited", got)
				}
				last := start
				for _, at := range w.at {
					if gap := at.Sub(last); gap > gateway.DefaultProgressInterval {
						t.Errorf("the caller heard nothing for %v, at %v, want at most %v", gap, last.Sub(start), gateway.DefaultProgressInterval)
					}
					last = at
				}
				if n := f.attempts(); n != 7 {
					t.Errorf("%d attempts, want 7: the stream, 5 failed continuations, the one that carried it on", n)
				}
			})
		})
	}
}
