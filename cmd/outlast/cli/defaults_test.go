package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// Tests of outlast serve's defaults as an SDK drives them, in virtual
// time: the gateway is built from the settings table as serve builds it,
// with nothing set but the upstreams, and its upstreams are fake ones in
// the same bubble.

// fakeHosts is fake upstreams by host. Each answers its attempt n (from
// 1), sent at since after the test began, as its func says; it records
// when each attempt came.
type fakeHosts struct {
	start  time.Time
	answer map[string]func(r *http.Request, n int, since time.Duration) (*http.Response, error)

	mu   sync.Mutex // guards seen
	seen map[string][]time.Duration
}

func newFakeHosts(answer map[string]func(*http.Request, int, time.Duration) (*http.Response, error)) *fakeHosts {
	return &fakeHosts{start: time.Now(), answer: answer, seen: map[string][]time.Duration{}}
}

func (f *fakeHosts) RoundTrip(r *http.Request) (*http.Response, error) {
	since := time.Since(f.start)
	f.mu.Lock()
	f.seen[r.URL.Host] = append(f.seen[r.URL.Host], since)
	n := len(f.seen[r.URL.Host])
	f.mu.Unlock()
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	resp, err := f.answer[r.URL.Host](r, n, since)
	if resp != nil {
		resp.Request = r
	}
	return resp, err
}

// attempts returns when host saw each attempt.
func (f *fakeHosts) attempts(host string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.seen[host]...)
}

// reply is a response with status, headers and body.
func reply(status int, header map[string]string, body string) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range header {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1}
}

const answerJSON = `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`

// ok answers every attempt with a chat completion.
func ok(*http.Request, int, time.Duration) (*http.Response, error) {
	return reply(200, nil, answerJSON), nil
}

// always answers every attempt with status.
func always(status int) func(*http.Request, int, time.Duration) (*http.Response, error) {
	return func(*http.Request, int, time.Duration) (*http.Response, error) {
		return reply(status, nil, `{"error":{"message":"unavailable"}}`), nil
	}
}

// eventStream is a 200 event stream whose events come at their times
// after the attempt, the body ending after the last; a wait ends early,
// with the error, when the request's context does.
func eventStream(r *http.Request, events []timedEvent) *http.Response {
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: &timedBody{ctx: r, sent: time.Now(), events: events}, ContentLength: -1}
}

type timedEvent struct {
	at   time.Duration
	data string
}

type timedBody struct {
	ctx    *http.Request
	sent   time.Time
	events []timedEvent
	rest   string
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.rest == "" {
		if len(b.events) == 0 {
			return 0, io.EOF
		}
		e := b.events[0]
		b.events = b.events[1:]
		t := time.NewTimer(time.Until(b.sent.Add(e.at)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.ctx.Context().Done():
			return 0, b.ctx.Context().Err()
		}
		b.rest = "data: " + e.data + "\n\n"
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *timedBody) Close() error { return nil }

// defaultGateway is the gateway outlast serve builds from args and its
// defaults, over rt, its records told to done.
func defaultGateway(t *testing.T, rt http.RoundTripper, done func(*record.Request), args ...string) http.Handler {
	t.Helper()
	cfg := loadServe(t, args...).Gateway
	cfg.Transport = rt
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Observer = record.Observer{Done: done}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sdkPost sends a chat completion through g with the headers an SDK
// sends, and header, and returns the answer and how long it took.
func sdkPost(g http.Handler, path, body string, header map[string]string) (*httptest.ResponseRecorder, time.Duration) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Anthropic/JS 0.70.0")
	req.Header.Set("X-Stainless-Lang", "js")
	req.Header.Set("X-Stainless-Retry-Count", "0")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	g.ServeHTTP(rec, req)
	return rec, time.Since(start)
}

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`

// With the SDK's 6 s timeout and an upstream that is always 503, the
// answer comes before the SDK gives up, after a retry, and tells the SDK
// not to retry it: the 60 s reserve of old left a short deadline no retry.
func TestDefaultsShortSDKTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){"primary.test": always(503)})
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test")
		rec, took := sdkPost(g, "/v1/messages", chatBody, map[string]string{"X-Stainless-Timeout": "6"})
		if rec.Code != 503 || took >= 6*time.Second {
			t.Errorf("got %d after %v, want 503 before the SDK's 6 s", rec.Code, took)
		}
		if n := len(f.attempts("primary.test")); n < 2 {
			t.Errorf("%d attempts, want a retry at least", n)
		}
		if got := rec.Header().Get("X-Should-Retry"); got != "false" {
			t.Errorf("X-Should-Retry %q, want false: the gateway has retried", got)
		}
	})
}

// With the SDK's 20 s timeout, a 503 followed by a 200 gives the 200.
func TestDefaultsSDKTimeoutRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(r *http.Request, n int, _ time.Duration) (*http.Response, error) {
				if n == 1 {
					return reply(503, nil, `{}`), nil
				}
				return ok(r, n, 0)
			}})
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test")
		if rec, _ := sdkPost(g, "/v1/messages", chatBody, map[string]string{"X-Stainless-Timeout": "20"}); rec.Code != 200 {
			t.Errorf("got %d after %d attempts, want the 200 after the 503", rec.Code, len(f.attempts("primary.test")))
		}
	})
}

// A lone request through an 18 s outage (13 s of 502s, then 5 s of 429s
// with Retry-After: 5), with the SDK's 120 s timeout, is answered within
// 10 s of the outage's end: it follows its upstream's probes and the
// server's delay, not a long wait of its own.
func TestDefaultsLoneRequestThroughOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(r *http.Request, n int, since time.Duration) (*http.Response, error) {
				switch {
				case since < 13*time.Second:
					return reply(502, nil, `{}`), nil
				case since < 18*time.Second:
					return reply(429, map[string]string{"Retry-After": "5"}, `{}`), nil
				}
				return ok(r, n, since)
			}})
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test")
		rec, took := sdkPost(g, "/v1/messages", chatBody, map[string]string{"X-Stainless-Timeout": "120"})
		if rec.Code != 200 || took > 28*time.Second {
			t.Errorf("got %d after %v (attempts at %v), want 200 within 10 s of the outage's end at 18 s", rec.Code, took, f.attempts("primary.test"))
		}
	})
}

// fallbackConfig is a primary with a fallback, and nothing else set.
const fallbackConfig = `upstreams:
  - name: primary
    url: http://primary.test
    fallbacks: [fallback]
  - name: fallback
    prefix: /fallback
    url: http://fallback.test
`

// With a fallback, requests to a primary that is known to be down are
// answered by the fallback at once, from the fourth on at the latest:
// none waits in the primary's queue for its next chance.
func TestDefaultsFallbackWhenDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  always(503),
			"fallback.test": ok,
		})
		var mu sync.Mutex
		upstreams := map[string]string{}
		g := defaultGateway(t, f, func(r *record.Request) {
			mu.Lock()
			upstreams[r.ID] = r.Answered()
			mu.Unlock()
		}, "--config", writeConfig(t, fallbackConfig))
		// The first request finds the primary down: three 503s, then
		// the fallback.
		if rec, _ := sdkPost(g, "/v1/chat/completions", chatBody, nil); rec.Code != 200 {
			t.Fatalf("the first request: got %d, want the fallback's 200", rec.Code)
		}
		for i := range 10 {
			time.Sleep(700 * time.Millisecond)
			rec, took := sdkPost(g, "/v1/chat/completions", chatBody, nil)
			mu.Lock()
			by := upstreams[rec.Header().Get("Outlast-Request-Id")]
			mu.Unlock()
			if rec.Code != 200 || by != "fallback" || took >= time.Second {
				t.Errorf("request %d after the primary went down: got %d from %q after %v, want 200 from the fallback in under 1 s", i+2, rec.Code, by, took)
			}
		}
		if n := len(f.attempts("primary.test")); n > 3+10/2 {
			t.Errorf("the primary saw %d attempts, want its first 3 and a probe every 1 s to 4 s at most", n)
		}
	})
}

// A 400 saying the context is too long moves to the fallback after one
// attempt at the primary, in OpenAI's words and in Anthropic's; any other
// 400 is the answer.
func TestDefaultsContextTooLong(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"openai", `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, 200},
		{"anthropic", `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`, 200},
		{"content policy", `{"error":{"message":"Your request was rejected.","type":"invalid_request_error","code":"content_policy_violation"}}`, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
					"primary.test": func(*http.Request, int, time.Duration) (*http.Response, error) {
						return reply(400, nil, c.body), nil
					},
					"fallback.test": ok,
				})
				g := defaultGateway(t, f, nil, "--config", writeConfig(t, fallbackConfig))
				rec, _ := sdkPost(g, "/v1/chat/completions", chatBody, nil)
				if rec.Code != c.want || len(f.attempts("primary.test")) != 1 {
					t.Errorf("got %d after %d attempts at the primary, want %d after 1", rec.Code, len(f.attempts("primary.test")), c.want)
				}
				if c.want == 400 && rec.Body.String() != c.body {
					t.Errorf("got body %q, want the primary's whole", rec.Body.String())
				}
			})
		})
	}
}

// One 429 with a Retry-After of years does not hold the upstream for
// years: it is probed again within --max-retry-after (5 min), and a
// request with no deadline of its own is answered within its default
// deadline (9 min), the record saying the delay was cut.
func TestDefaultsRetryAfterCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(r *http.Request, n int, since time.Duration) (*http.Response, error) {
				if n == 1 {
					return reply(429, map[string]string{"Retry-After": "99999999999"}, `{}`), nil
				}
				return ok(r, n, since)
			}})
		var mu sync.Mutex
		var recs []*record.Request
		g := defaultGateway(t, f, func(r *record.Request) {
			mu.Lock()
			recs = append(recs, r)
			mu.Unlock()
		}, "--upstream", "http://primary.test")
		var wg sync.WaitGroup
		wg.Go(func() {
			if rec, took := sdkPost(g, "/v1/chat/completions", chatBody, nil); rec.Code != 200 || took > 9*time.Minute {
				t.Errorf("the first request: got %d after %v, want 200 within its default deadline of 9 min", rec.Code, took)
			}
		})
		time.Sleep(time.Minute)
		if rec, took := sdkPost(g, "/v1/chat/completions", chatBody, nil); rec.Code != 200 || took > 9*time.Minute {
			t.Errorf("a request a minute later: got %d after %v, want 200 within its default deadline of 9 min", rec.Code, took)
		}
		wg.Wait()
		if at := f.attempts("primary.test"); len(at) < 2 || at[1] > 5*time.Minute {
			t.Errorf("attempts at %v, want the upstream probed again within 5 min of the 429", at)
		}
		mu.Lock()
		defer mu.Unlock()
		cut := false
		for _, r := range recs {
			for _, a := range r.Attempts {
				cut = cut || (a.RetryAfterCut && a.RetryAfter == 5*time.Minute)
			}
		}
		if !cut {
			t.Errorf("no attempt's record says its delay was cut to 5 min")
		}
	})
}

// Outlast-Reserve is the caller's own: 1420ms, lower than the operator's
// reserve, with a 2 s deadline and 200 ms waits, makes three attempts at
// an upstream that is always 503.
func TestDefaultsReserveHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){"primary.test": always(503)})
		// The operator's waits are a floor for the request's: here
		// they are 200 ms too.
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test", "--waits", "200ms")
		rec, _ := sdkPost(g, "/v1/chat/completions", chatBody, map[string]string{
			"Outlast-Reserve": "1420ms", "Outlast-Timeout": "2s", "Outlast-Waits": "200ms"})
		if n := len(f.attempts("primary.test")); rec.Code != 503 || n != 3 {
			t.Errorf("got %d after %d attempts, want 503 after 3", rec.Code, n)
		}
	})
}

// The record says where each request's deadline came from: its own
// header, the SDK's timeout, or serve's default.
func TestDefaultsDeadlineSource(t *testing.T) {
	for _, c := range []struct {
		name   string
		header map[string]string
		source string
		in     time.Duration // the deadline, after arrival
	}{
		{"outlast", map[string]string{"Outlast-Timeout": "30s", "X-Stainless-Timeout": "600"}, record.DeadlineOutlast, 30 * time.Second},
		// 600 s less 5 s, so that the SDK reads the answer.
		{"sdk", map[string]string{"X-Stainless-Timeout": "600"}, record.DeadlineSDK, 595 * time.Second},
		// 6 s less a tenth.
		{"short sdk", map[string]string{"X-Stainless-Timeout": "6"}, record.DeadlineSDK, 5400 * time.Millisecond},
		// Not a number of seconds: the SDK's header is not the
		// gateway's to refuse.
		{"bad sdk", map[string]string{"X-Stainless-Timeout": "soon"}, record.DeadlineDefault, 9 * time.Minute},
		{"default", nil, record.DeadlineDefault, 9 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){"primary.test": ok})
				var got *record.Request
				g := defaultGateway(t, f, func(r *record.Request) { got = r }, "--upstream", "http://primary.test")
				start := time.Now()
				if rec, _ := sdkPost(g, "/v1/chat/completions", chatBody, c.header); rec.Code != 200 {
					t.Fatalf("got %d, want 200", rec.Code)
				}
				if got.DeadlineSource != c.source || got.Deadline.Sub(start) != c.in {
					t.Errorf("deadline %v after arrival from %q, want %v from %q", got.Deadline.Sub(start), got.DeadlineSource, c.in, c.source)
				}
			})
		})
	}
}

// A deadline bounds the time to the answer, not its length: a stream that
// began before the SDK's 6 s is forwarded whole, for 20 s.
func TestDefaultsStreamOutlivesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []timedEvent
		for i := range 20 {
			events = append(events, timedEvent{time.Duration(i) * time.Second, fmt.Sprintf(`{"n":%d}`, i)})
		}
		events = append(events, timedEvent{20 * time.Second, "[DONE]"})
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(r *http.Request, _ int, _ time.Duration) (*http.Response, error) {
				return eventStream(r, events), nil
			}})
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test")
		rec, took := sdkPost(g, "/v1/chat/completions", `{"model":"m","stream":true}`, map[string]string{"X-Stainless-Timeout": "6"})
		if body := rec.Body.String(); rec.Code != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Contains(body, "event: error") || took != 20*time.Second {
			t.Errorf("got %d after %v:\n%s\nwant the whole stream, 20 s long, past the 5.4 s deadline", rec.Code, took, body)
		}
	})
}

// A stream whose upstream sends no headers is given up on after 30 s and
// retried; one whose headers come at once and whose first event comes
// after 20 s, a model thinking, is not.
func TestDefaultsStreamHeaderTimeout(t *testing.T) {
	for _, c := range []struct {
		name     string
		silent   bool // the first attempt sends no headers
		attempts int
		took     time.Duration
	}{
		// Given up on at 30 s, then a retry after about 1 s whose
		// event comes 20 s after it.
		{"silent", true, 2, 0},
		{"thinking", false, 1, 21 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
					"primary.test": func(r *http.Request, n int, _ time.Duration) (*http.Response, error) {
						if c.silent && n == 1 {
							<-r.Context().Done()
							return nil, r.Context().Err()
						}
						return eventStream(r, []timedEvent{{20 * time.Second, `{"n":1}`}, {21 * time.Second, "[DONE]"}}), nil
					}})
				g := defaultGateway(t, f, nil, "--upstream", "http://primary.test")
				rec, took := sdkPost(g, "/v1/chat/completions", `{"model":"m","stream":true}`, nil)
				at := f.attempts("primary.test")
				if rec.Code != 200 || len(at) != c.attempts {
					t.Fatalf("got %d after %d attempts (%v), want 200 after %d", rec.Code, len(at), at, c.attempts)
				}
				if c.silent && (at[1] < 30*time.Second || at[1] > 32*time.Second) {
					t.Errorf("the retry went at %v, want after the 30 s header timeout and its 1 s wait", at[1])
				}
				if !c.silent && took != c.took {
					t.Errorf("answered after %v, want %v", took, c.took)
				}
			})
		})
	}
}

// The error of a request sent away from a down upstream says once what
// happened, names the upstream, and names the request's deadline and
// reserve and how to change them.
func TestDefaultsUpstreamDownMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(*http.Request, int, time.Duration) (*http.Response, error) {
				return reply(503, map[string]string{"Retry-After": "60"}, `{"error":{"message":"overloaded"}}`), nil
			}})
		g := defaultGateway(t, f, nil, "--upstream", "http://primary.test", "--name", "primary")
		sdkPost(g, "/v1/messages", chatBody, nil) // marks it down for a minute
		rec, took := sdkPost(g, "/v1/messages", chatBody, map[string]string{"X-Stainless-Timeout": "6"})
		msg := rec.Body.String()
		if rec.Code != 503 || rec.Header().Get("Outlast-Error") != "upstream-down" || took != 0 {
			t.Fatalf("got %d %q after %v, want 503 upstream-down at once", rec.Code, rec.Header().Get("Outlast-Error"), took)
		}
		for _, want := range []string{"upstream primary is down", "5.4s", "reserve of 1.35s", "Outlast-Reserve", "--reserve", "Outlast-Timeout", "503"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the error %s lacks %q", msg, want)
			}
		}
		if n := strings.Count(msg, "is down"); n != 1 || strings.Contains(msg, `admission ""`) {
			t.Errorf("the error %s says it is down %d times, or names an empty key; want once, and no empty key", msg, n)
		}
	})
}

// streamBody asks for a stream.
const streamBody = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// answerStream is a stream whose first content comes after first.
func answerStream(first time.Duration) func(*http.Request, int, time.Duration) (*http.Response, error) {
	return func(r *http.Request, _ int, _ time.Duration) (*http.Response, error) {
		return eventStream(r, []timedEvent{
			{first, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`},
			{first, "[DONE]"},
		}), nil
	}
}

// With serve's defaults and a fallback: a 429 with Retry-After: 2 is
// waited out at the primary, 2 s, with no attempt at the fallback, and
// the next request goes to the primary at once.
func TestDefaultsShortRateLimitWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(r *http.Request, n int, since time.Duration) (*http.Response, error) {
				if n == 1 {
					return reply(429, map[string]string{"Retry-After": "2"}, `{}`), nil
				}
				return answerStream(0)(r, n, since)
			},
			"fallback.test": answerStream(0),
		})
		g := defaultGateway(t, f, nil, "--config", writeConfig(t, fallbackConfig))
		if rec, _ := sdkPost(g, "/v1/chat/completions", streamBody, nil); rec.Code != 200 {
			t.Fatalf("got %d, want the primary's 200", rec.Code)
		}
		at := f.attempts("primary.test")
		if len(at) != 2 || at[1]-at[0] < 1800*time.Millisecond || len(f.attempts("fallback.test")) != 0 {
			t.Errorf("attempts at the primary at %v and %d at the fallback; want 2, at least 1.8 s apart, and none", at, len(f.attempts("fallback.test")))
		}
		if rec, took := sdkPost(g, "/v1/chat/completions", streamBody, nil); rec.Code != 200 || took != 0 || len(f.attempts("primary.test")) != 3 {
			t.Errorf("the next request: got %d after %v, %d attempts at the primary; want the primary's answer at once", rec.Code, took, len(f.attempts("primary.test"))-2)
		}
	})
}

// silent is an upstream that never answers: its attempts end only when
// they are cancelled.
func silent(r *http.Request, _ int, _ time.Duration) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// With serve's defaults and a fallback: a primary that never answers gets
// one attempt, and the fallback's answer comes within 45 s: the hedge
// goes after 10 s, and the silent primary's attempt is cancelled.
func TestDefaultsSilentPrimaryLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  silent,
			"fallback.test": answerStream(0),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, took := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || took > 45*time.Second || len(f.attempts("primary.test")) != 1 || rec.Answered() != "fallback" {
			t.Errorf("got %d from %q after %v, %d attempts at the primary; want the fallback's answer within 45 s, after 1", res.Code, rec.Answered(), took, len(f.attempts("primary.test")))
		}
	})
	// Without the hedge (off, or its budget spent), the one attempt ends
	// at the stream-header timeout, 30 s, and the request leaves: no
	// retry at the silent primary.
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  silent,
			"fallback.test": answerStream(0),
		})
		var rec record.Request
		cfg := strings.Replace(fallbackConfig, "    fallbacks: [fallback]\n", "    fallbacks: [fallback]\n    hedge: false\n", 1)
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, cfg))
		res, took := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || took > 45*time.Second || len(f.attempts("primary.test")) != 1 || rec.Answered() != "fallback" ||
			len(rec.Moves) != 1 || rec.Moves[0].Reason != "silent" {
			t.Errorf("got %d from %q after %v, %d attempts at the primary, moves %+v; want the fallback's answer within 45 s, after 1, moved as silent", res.Code, rec.Answered(), took, len(f.attempts("primary.test")), rec.Moves)
		}
	})
}

// With serve's defaults and a fallback: a primary whose first token comes
// after 20 s is hedged, and the caller has the fallback's whole answer
// within 15 s, the primary's attempt cancelled and recorded. Over 200
// streams to a primary whose first token always takes 12 s, at most one
// in twenty is hedged.
func TestDefaultsHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  answerStream(20 * time.Second),
			"fallback.test": answerStream(0),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, took := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || !strings.Contains(res.Body.String(), "[DONE]") || took > 15*time.Second {
			t.Fatalf("got %d after %v:\n%s\nwant the whole answer within 15 s", res.Code, took, res.Body.String())
		}
		// The hedge's attempt ends first, with the answer; the primary's
		// then, cancelled.
		if a := rec.Attempts; rec.Answered() != "fallback" || len(a) != 2 || a[0].Fallback != "hedge" || a[0].Bytes == 0 ||
			a[1].Upstream != "primary" || a[1].Class.String() != "canceled" || !strings.Contains(a[1].Error, "hedged") {
			t.Errorf("recorded %+v by %q; want the hedge's answer, and the primary's attempt cancelled as hedged", rec.Attempts, rec.Answered())
		}
		if len(rec.Moves) != 1 || rec.Moves[0].Reason != "hedge" {
			t.Errorf("moves %+v, want the hedge's", rec.Moves)
		}
	})
	// The hedge fires at 10 s, but the primary's first token comes at
	// 11 s, before the fallback's: the primary's answer is the caller's,
	// and the hedge's attempt is the one cancelled.
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  answerStream(11 * time.Second),
			"fallback.test": answerStream(5 * time.Second),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, _ := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || !strings.Contains(res.Body.String(), "[DONE]") {
			t.Fatalf("got %d:\n%s\nwant the whole answer", res.Code, res.Body.String())
		}
		if n := len(f.attempts("fallback.test")); n != 1 {
			t.Errorf("%d attempts at the fallback, want the hedge's 1", n)
		}
		a := rec.Attempts
		// The primary's attempt ends first, with its first token; the
		// hedge's then, cancelled.
		if rec.Answered() != "primary" || len(rec.Moves) != 0 || len(a) != 2 ||
			a[0].Upstream != "primary" || a[0].Error != "" || a[0].Bytes == 0 ||
			a[1].Upstream != "fallback" || a[1].Fallback != "hedge" || !strings.Contains(a[1].Error, "hedged") {
			t.Errorf("recorded %+v, moves %+v, by %q; want the primary's answer and the hedge cancelled", a, rec.Moves, rec.Answered())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  answerStream(12 * time.Second),
			"fallback.test": answerStream(0),
		})
		g := defaultGateway(t, f, nil, "--config", writeConfig(t, fallbackConfig))
		for range 200 {
			if res, _ := sdkPost(g, "/v1/chat/completions", streamBody, nil); res.Code != 200 {
				t.Fatalf("got %d, want 200", res.Code)
			}
		}
		if n := len(f.attempts("fallback.test")); n > 10 {
			t.Errorf("%d of 200 streams hedged, want at most 5 %%", n)
		}
	})
}

// A request that moved to the fallback on its own (the primary's 503s
// spent its attempts) is not hedged there again when the fallback's first
// token is slow: one attempt at the fallback.
func TestHedgeNotAfterMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  always(503),
			"fallback.test": answerStream(12 * time.Second),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, _ := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || len(f.attempts("fallback.test")) != 1 || len(rec.Moves) != 1 || rec.Moves[0].Reason != "spent" {
			t.Errorf("got %d, %d attempts at the fallback, moves %+v; want its answer after one, moved as spent", res.Code, len(f.attempts("fallback.test")), rec.Moves)
		}
	})
}

// hedge: false, per upstream, turns hedging off: a slow first token is
// waited for at the primary.
func TestHedgeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  answerStream(20 * time.Second),
			"fallback.test": answerStream(0),
		})
		cfg := strings.Replace(fallbackConfig, "    fallbacks: [fallback]\n", "    fallbacks: [fallback]\n    hedge: false\n", 1)
		g := defaultGateway(t, f, nil, "--config", writeConfig(t, cfg))
		res, took := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 || took < 20*time.Second || len(f.attempts("fallback.test")) != 0 {
			t.Errorf("got %d after %v, %d attempts at the fallback; want the primary's answer at 20 s, none there", res.Code, took, len(f.attempts("fallback.test")))
		}
	})
}

// twoFallbacksConfig is a primary with two fallbacks, in order.
const twoFallbacksConfig = `upstreams:
  - name: primary
    url: http://primary.test
    fallbacks: [fb1, fb2]
  - name: fb1
    prefix: /fb1
    url: http://fb1.test
  - name: fb2
    prefix: /fb2
    url: http://fb2.test
`

// slowThen answers its first attempt with status after 12 s, past the
// hedge's default delay, and every other at once.
func slowThen(status int) func(*http.Request, int, time.Duration) (*http.Response, error) {
	return func(r *http.Request, n int, _ time.Duration) (*http.Response, error) {
		if n == 1 {
			select {
			case <-time.After(12 * time.Second):
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
		return reply(status, nil, `{"error":{"message":"unavailable"}}`), nil
	}
}

// A hedge goes on along the fallbacks as a move would: with the first
// fallback failing too, the second serves the request, and the moves say
// how it got there.
func TestHedgeGoesOnToTheNextFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": slowThen(503),
			"fb1.test":     always(503),
			"fb2.test":     answerStream(0),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, twoFallbacksConfig))
		res, _ := sdkPost(g, "/v1/chat/completions", streamBody, map[string]string{"Outlast-Timeout": "25s"})
		if res.Code != 200 || rec.Answered() != "fb2" || len(f.attempts("fb2.test")) != 1 {
			t.Fatalf("got %d %q from %q, %d attempts at fb2; want fb2's answer", res.Code, res.Header().Get("Outlast-Error"), rec.Answered(), len(f.attempts("fb2.test")))
		}
		if m := rec.Moves; len(m) != 2 || m[0].Reason != "hedge" || m[0].To != "fb1" || m[1].From != "fb1" || m[1].To != "fb2" {
			t.Errorf("moves %+v; want the hedge to fb1, then on to fb2", m)
		}
	})
}

// When both sides of a hedge fail, the caller gets the failure an
// upstream answered, never the hedge's own cancellation as a 502.
func TestHedgeBothFail(t *testing.T) {
	for _, fallback := range []int{503, 400} {
		t.Run(strconv.Itoa(fallback), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
					"primary.test":  slowThen(503),
					"fallback.test": always(fallback),
				})
				g := defaultGateway(t, f, nil, "--config", writeConfig(t, fallbackConfig))
				res, _ := sdkPost(g, "/v1/chat/completions", streamBody, map[string]string{"Outlast-Timeout": "25s"})
				if res.Code != fallback || strings.Contains(res.Body.String(), "hedged") {
					t.Errorf("got %d %q: %s; want the fallback's %d", res.Code, res.Header().Get("Outlast-Error"), res.Body.String(), fallback)
				}
			})
		})
	}
}

// A side of a hedge whose stream ended in an error event before the
// answer (one not retried, which its upstream returns for the caller)
// has no answer: the other side's, which comes after it, wins.
func TestHedgeErrorEventIsNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overloaded := func(r *http.Request, _ int, _ time.Duration) (*http.Response, error) {
			return eventStream(r, []timedEvent{{12 * time.Second, `{"error":{"message":"Overloaded","type":"invalid_request_error"}}`}}), nil
		}
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  overloaded,
			"fallback.test": answerStream(5 * time.Second),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, _ := sdkPost(g, "/v1/chat/completions", streamBody, map[string]string{"Outlast-Timeout": "60s"})
		if res.Code != 200 || !strings.Contains(res.Body.String(), `"Hi"`) || strings.Contains(res.Body.String(), "Overloaded") || rec.Answered() != "fallback" {
			t.Errorf("got %d from %q:\n%s\nwant the fallback's answer", res.Code, rec.Answered(), res.Body.String())
		}
	})
}

// Both sides of a hedge reach their first content at the same instant:
// the side that lost is recorded cancelled as hedged, whatever its
// attempt had reached, and the record's answer is the winner's.
func TestHedgeTieRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test":  answerStream(15 * time.Second),
			"fallback.test": answerStream(5 * time.Second),
		})
		var rec record.Request
		g := defaultGateway(t, f, func(r *record.Request) { rec = *r }, "--config", writeConfig(t, fallbackConfig))
		res, _ := sdkPost(g, "/v1/chat/completions", streamBody, nil)
		if res.Code != 200 {
			t.Fatalf("got %d, want 200", res.Code)
		}
		won, lost := 0, 0
		for _, a := range rec.Attempts {
			switch {
			case a.Error == "" && a.Bytes > 0:
				won++
			case strings.Contains(a.Error, "hedged"):
				lost++
			}
		}
		if won != 1 || lost != 1 || rec.Answered() != res.Header().Get("Outlast-Upstream") {
			t.Errorf("recorded %+v, answered by %q, the caller's from %q; want one winner, one hedged, and the record's answer the caller's", rec.Attempts, rec.Answered(), res.Header().Get("Outlast-Upstream"))
		}
	})
}

// A request that asks for no retries (Outlast-Retry: off), or comes from
// an outer layer that retries it (Outlast-Attempt), makes one attempt
// and is moved to no fallback: a move is one more attempt, its caller's.
func TestNoRetriesNoMoves(t *testing.T) {
	for _, h := range []map[string]string{{"Outlast-Retry": "off"}, {"Outlast-Attempt": "1"}} {
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
					"primary.test": always(503),
					"fb1.test":     always(503),
					"fb2.test":     always(503),
				})
				g := defaultGateway(t, f, nil, "--config", writeConfig(t, twoFallbacksConfig))
				res, _ := sdkPost(g, "/v1/chat/completions", chatBody, h)
				if n := len(f.attempts("primary.test")) + len(f.attempts("fb1.test")) + len(f.attempts("fb2.test")); res.Code != 503 || n != 1 || res.Header().Get("Outlast-Attempts") != "1" {
					t.Errorf("got %d after %d attempts (Outlast-Attempts %q); want the primary's 503 after 1", res.Code, n, res.Header().Get("Outlast-Attempts"))
				}
			})
		})
	}
}

// With every upstream of the chain down, the 503's Retry-After says when
// the soonest of them has its next chance, not the last one tried.
func TestDownRetryAfterSoonest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeHosts(map[string]func(*http.Request, int, time.Duration) (*http.Response, error){
			"primary.test": func(*http.Request, int, time.Duration) (*http.Response, error) {
				return reply(429, map[string]string{"Retry-After": "10"}, `{}`), nil
			},
			"fallback.test": func(*http.Request, int, time.Duration) (*http.Response, error) {
				return reply(429, map[string]string{"Retry-After": "60"}, `{}`), nil
			},
		})
		g := defaultGateway(t, f, nil, "--config", writeConfig(t, fallbackConfig))
		sdkPost(g, "/v1/chat/completions", chatBody, map[string]string{"Outlast-Timeout": "20s"})
		res, _ := sdkPost(g, "/v1/chat/completions", chatBody, map[string]string{"Outlast-Timeout": "20s"})
		ra, _ := strconv.Atoi(res.Header().Get("Retry-After"))
		if res.Code != 503 || ra < 1 || ra > 11 {
			t.Errorf("got %d with Retry-After %q; want 503 and the primary's next chance, within 10 s", res.Code, res.Header().Get("Retry-After"))
		}
	})
}
