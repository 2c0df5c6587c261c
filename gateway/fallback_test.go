package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// fallbackCanary is the credential the gateway holds for the fallback: it
// must reach the fallback's requests and nothing else.
const fallbackCanary = "sk-canary-held-Fb7Q2x"

// twoUpstreams sends primary.test's attempts to primary and the rest to
// fallback, which answers 200 after a second and keeps what it got.
type twoUpstreams struct {
	primary http.RoundTripper

	mu     sync.Mutex
	got    []*http.Request
	bodies []string
}

func (u *twoUpstreams) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == "primary.test" {
		return u.primary.RoundTrip(r)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	u.mu.Lock()
	u.got, u.bodies = append(u.got, r), append(u.bodies, string(b))
	u.mu.Unlock()
	select {
	case <-time.After(time.Second):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"from":"fallback"}`)), Request: r}, nil
}

// fallbackGateway is a gateway with a primary that falls back to a
// second upstream, which renames gpt-4o and holds its own credential.
func fallbackGateway(t *testing.T, primary http.RoundTripper, prefer outlast.Preference, log io.Writer, obs record.Observer) (*gateway.Gateway, *twoUpstreams) {
	t.Helper()
	ups := &twoUpstreams{primary: primary}
	pu, _ := url.Parse("http://primary.test")
	fu, _ := url.Parse("http://fallback.test/openai")
	policy := &outlast.Policy{Waits: []time.Duration{2 * time.Second}, Reserve: 5 * time.Second}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{
			{Name: "primary", URL: pu, Policy: policy, Admission: &outlast.Admission{}, Fallbacks: []string{"fallback"}, Prefer: prefer},
			{Name: "fallback", Prefix: "/fallback", URL: fu, Policy: policy, Admission: &outlast.Admission{},
				Models: map[string]string{"gpt-4o": "my-gpt-4o-deployment"}, Auth: gateway.NewCredential("api-key", fallbackCanary)},
		},
		Transport: ups,
		Logger:    slog.New(slog.NewJSONHandler(log, nil)),
		Observer:  obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, ups
}

// markDown sends three requests with no time to wait, so that the
// primary's Admission marks it down.
func markDown(g http.Handler) {
	for range 3 {
		serve(g, `{"model":"gpt-4o"}`, map[string]string{"Outlast-Timeout": "10s", "Outlast-Retry": "off"})
	}
}

// The rule, both ways, in front of a primary down for 30 s. Preferring
// the primary (the default): a request with a 20 s deadline, which
// cannot outlast the outage less its 5 s reserve, moves to the fallback
// and succeeds there, its model renamed and the caller's credential
// replaced by the gateway's; one with a 2 min deadline waits for the
// primary. Preferring what is up, both move at once.
func TestGatewayFallback(t *testing.T) {
	for _, c := range []struct {
		name   string
		prefer outlast.Preference
		want   [][2]string // deadline, the upstream that answers; in order, from the outage's start
	}{
		{"prefer primary", outlast.PreferPrimary, [][2]string{{"20s", "fallback"}, {"2m", "primary"}}},
		{"prefer available", outlast.PreferAvailable, [][2]string{{"20s", "fallback"}, {"2m", "fallback"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				done := map[string]*record.Request{}
				obs := record.Observer{Done: func(r *record.Request) {
					mu.Lock()
					done[r.ID] = r
					mu.Unlock()
				}}
				var log bytes.Buffer
				g, ups := fallbackGateway(t, &outage{up: time.Now().Add(30 * time.Second)}, c.prefer, &lockedWriter{w: &log}, obs)
				markDown(g)
				ups.mu.Lock()
				ups.got, ups.bodies = nil, nil
				ups.mu.Unlock()
				for _, w := range c.want {
					deadline, want := w[0], w[1]
					rec := serve(g, `{"model":"gpt-4o","messages":[]}`, map[string]string{"Outlast-Timeout": deadline, "Authorization": "Bearer the-callers-key"})
					if rec.Code != 200 || rec.Header().Get("Outlast-Upstream") != want {
						t.Errorf("%s deadline: %d, Outlast-Upstream %q, want 200 from the %s", deadline, rec.Code, rec.Header().Get("Outlast-Upstream"), want)
						continue
					}
					r := done[rec.Header().Get("Outlast-Request-Id")]
					if r == nil {
						t.Fatalf("%s deadline: no record", deadline)
					}
					last := r.Attempts[len(r.Attempts)-1]
					if last.Upstream != want {
						t.Errorf("%s deadline: the last attempt went to %q, want %q", deadline, last.Upstream, want)
					}
					if want == "fallback" {
						moved := 0
						for _, a := range r.Attempts {
							if a.Fallback != "" {
								moved++
								if a.Upstream != "fallback" || (a.Fallback != "down" && a.Fallback != "spent") {
									t.Errorf("%s deadline: attempt %+v, want the first at the fallback to say why it moved: down or spent", deadline, a)
								}
							}
						}
						if moved != 1 {
							t.Errorf("%s deadline: %d attempts say the request moved, want 1", deadline, moved)
						}
					}
				}
				ups.mu.Lock()
				defer ups.mu.Unlock()
				for i, r := range ups.got {
					if r.Header.Get("Api-Key") != fallbackCanary || r.Header.Get("Authorization") != "" {
						t.Errorf("the fallback's request %d: api-key %q, Authorization %q, want the held credential and not the caller's", i, r.Header.Get("Api-Key"), r.Header.Get("Authorization"))
					}
					if ups.bodies[i] != `{"model":"my-gpt-4o-deployment","messages":[]}` {
						t.Errorf("the fallback's body %d: %s, want the model renamed", i, ups.bodies[i])
					}
					if r.URL.Path != "/openai/v1/chat/completions" {
						t.Errorf("the fallback's path %q, want its URL's path joined to the request's", r.URL.Path)
					}
				}
				if strings.Contains(log.String(), fallbackCanary) {
					t.Errorf("the held credential is in the log:\n%s", log.String())
				}
				mu.Lock()
				defer mu.Unlock()
				for _, r := range done {
					b, _ := json.Marshal(r)
					if bytes.Contains(b, []byte(fallbackCanary)) {
						t.Errorf("the held credential is in the record: %s", b)
					}
				}
			})
		})
	}
}

// With the fallback down too, the request gets the last failure, and its
// record shows the attempts at both.
func TestGatewayFallbackBothDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got *record.Request
		obs := record.Observer{Done: func(r *record.Request) { got = r }}
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{
				{Name: "a", URL: mustURL("http://a.test"), Policy: &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 2}, Fallbacks: []string{"b"}},
				{Name: "b", Prefix: "/b", URL: mustURL("http://b.test"), Policy: &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 2}},
			},
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				code := map[string]int{"a.test": 503, "b.test": 529}[r.URL.Host]
				return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
			}),
			Logger:   slog.New(slog.DiscardHandler),
			Observer: obs,
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(g, `{"model":"m"}`, nil)
		if rec.Code != 529 || rec.Header().Get("Outlast-Upstream") != "b" {
			t.Errorf("%d from %q, want the fallback's last failure, 529 from b", rec.Code, rec.Header().Get("Outlast-Upstream"))
		}
		var ups []string
		for i, a := range got.Attempts {
			ups = append(ups, a.Upstream+":"+a.Fallback)
			if a.N != i+1 {
				t.Errorf("attempt %d is numbered %d, want %d: across the request, for the journal's key", i, a.N, i+1)
			}
		}
		if strings.Join(ups, ",") != "a:,a:,b:spent,b:" {
			t.Errorf("attempts %v, want two at a, then two at b, the first saying the request moved for spent attempts", ups)
		}
	})
}

// Once a request has moved from a to b, it is b's: its attempts there
// tell b's pace, b's IdleTimeout bounds the body b sends, and a refusal
// from b, which then made no attempt, is b's, with b's name and b's
// Retry-After.
func TestGatewayFallbackAnswerIsTheFallbacks(t *testing.T) {
	for _, c := range []struct {
		name   string
		b      func(*gateway.Upstream)                     // b's settings
		answer func(*http.Request) (*http.Response, error) // b.test's answer
		before func(t *testing.T, g http.Handler)          // what comes first
		code   int
		kind   string // Outlast-Error
		after  [2]int // Retry-After's bounds, in seconds; none if zero
		body   string // in the body
	}{
		// b's queue is full. Its pace, 40 s an attempt, was learnt from
		// the request that moved to it before (a's attempts take no
		// time), and says when to come back.
		{name: "busy", b: func(u *gateway.Upstream) { u.Slots, u.Queue = 1, -1 },
			answer: func(r *http.Request) (*http.Response, error) { return after(r, 40*time.Second, 200, `{}`) },
			before: func(t *testing.T, g http.Handler) {
				if rec := serve(g, `{}`, nil); rec.Code != 200 {
					t.Fatalf("the request that moves to b first: got %d, want 200", rec.Code)
				}
				var holder sync.WaitGroup
				holder.Go(func() { serveAt(g, "/b/v1/chat/completions", `{}`, nil) }) // holds b's one slot for 40 s
				t.Cleanup(holder.Wait)
				synctest.Wait()
			},
			code: 503, kind: "busy", after: [2]int{40, 40}, body: "upstream b is busy"},
		// b is down, its next probe a minute away, jittered up by as
		// much as half: past the deadline, and when to come back.
		{name: "down", b: func(u *gateway.Upstream) {
			u.Admission = &outlast.Admission{DownAfter: 1, ProbeWaits: []time.Duration{time.Minute}}
		},
			answer: func(r *http.Request) (*http.Response, error) { return after(r, 0, 503, `{}`) },
			before: func(t *testing.T, g http.Handler) {
				serveAt(g, "/b/v1/chat/completions", `{}`, nil) // marks b down
			},
			code: 503, kind: "upstream-down", after: [2]int{60, 90}, body: "upstream b is down"},
		// b's body begins after 5 s: within b's idle bound, 10 s, if not
		// within a's, 1 s.
		{name: "slow body", b: func(u *gateway.Upstream) { u.IdleTimeout = 10 * time.Second },
			answer: func(r *http.Request) (*http.Response, error) {
				pr, pw := io.Pipe()
				go func() {
					select {
					case <-time.After(5 * time.Second):
						pw.Write([]byte(`{"from":"b"}`))
						pw.Close()
					case <-r.Context().Done():
						pw.CloseWithError(r.Context().Err())
					}
				}()
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: pr, Request: r}, nil
			},
			code: 200, body: `{"from":"b"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				policy := &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 1, Reserve: -1}
				b := gateway.Upstream{Name: "b", Prefix: "/b", URL: mustURL("http://b.test"), Policy: policy}
				c.b(&b)
				g, err := gateway.New(gateway.Config{
					Upstreams: []gateway.Upstream{
						{Name: "a", URL: mustURL("http://a.test"), Policy: policy, IdleTimeout: time.Second, Fallbacks: []string{"b"}}, b,
					},
					Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						if r.URL.Host == "a.test" {
							return after(r, 0, 503, `{}`)
						}
						return c.answer(r)
					}),
					Logger: slog.New(slog.DiscardHandler),
				})
				if err != nil {
					t.Fatal(err)
				}
				if c.before != nil {
					c.before(t, g)
				}
				rec := serve(g, `{}`, map[string]string{"Outlast-Timeout": "30s"})
				if rec.Code != c.code || rec.Header().Get("Outlast-Upstream") != "b" || rec.Header().Get("Outlast-Error") != c.kind {
					t.Errorf("got %d %q from %q, want %d %q from b", rec.Code, rec.Header().Get("Outlast-Error"), rec.Header().Get("Outlast-Upstream"), c.code, c.kind)
				}
				got := rec.Header().Get("Retry-After")
				if c.after == [2]int{} {
					if got != "" {
						t.Errorf("Retry-After: got %q, want none", got)
					}
				} else if n, err := strconv.Atoi(got); err != nil || n < c.after[0] || n > c.after[1] {
					t.Errorf("Retry-After: got %q, want %d to %d", got, c.after[0], c.after[1])
				}
				if !strings.Contains(rec.Body.String(), c.body) {
					t.Errorf("body: got %s, want it to hold %s", rec.Body.String(), c.body)
				}
			})
		})
	}
}

// A request that moves on from a fallback that made no attempt (b, its
// queue full) lands at c, whose first attempt says why it moved; the
// record's moves say from where: a to b, which no attempt tells of, and
// b to c, not a to c, though a's attempt is the one before c's.
func TestGatewayFallbackPastAnUpstreamWithNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got *record.Request
		policy := &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 1, Reserve: -1}
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{
				{Name: "a", URL: mustURL("http://a.test"), Policy: policy, Fallbacks: []string{"b", "c"}},
				{Name: "b", Prefix: "/b", URL: mustURL("http://b.test"), Policy: policy, Slots: 1, Queue: -1},
				{Name: "c", Prefix: "/c", URL: mustURL("http://c.test"), Policy: policy},
			},
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				switch r.URL.Host {
				case "a.test":
					return after(r, 0, 503, `{}`)
				case "b.test":
					return after(r, time.Minute, 200, `{}`)
				}
				return after(r, 0, 200, `{}`)
			}),
			Logger: slog.New(slog.DiscardHandler),
			Observer: record.Observer{Done: func(r *record.Request) {
				if r.Upstream == "a" { // not the holder's
					got = r
				}
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var holder sync.WaitGroup
		holder.Go(func() { serveAt(g, "/b/v1/chat/completions", `{}`, nil) }) // holds b's one slot
		synctest.Wait()
		rec := serve(g, `{}`, nil)
		if rec.Code != 200 || rec.Header().Get("Outlast-Upstream") != "c" {
			t.Errorf("got %d from %q, want 200 from c", rec.Code, rec.Header().Get("Outlast-Upstream"))
		}
		var attempts []string
		for _, a := range got.Attempts {
			attempts = append(attempts, a.Upstream+":"+a.Fallback)
		}
		if strings.Join(attempts, ",") != "a:,c:busy" {
			t.Errorf("attempts %v, want one at a, then one at c saying the request moved, busy", attempts)
		}
		want := []record.Move{{From: "a", To: "b", Reason: "spent"}, {From: "b", To: "c", Reason: "busy"}}
		if !slices.Equal(got.Moves, want) {
			t.Errorf("moves %v, want %v", got.Moves, want)
		}
		holder.Wait()
	})
}

// after answers r with code and body after d, or with r's context's error
// if it ends first.
func after(r *http.Request, d time.Duration, code int, body string) (*http.Response, error) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// A stream that has sent its first byte never moves: the primary's 200
// event stream sends one event and then breaks its connection, and the
// caller gets that event and then an error event, the primary's, while
// the fallback, which would have answered, is never asked. The record
// says the stream broke at the primary and that the request never moved.
func TestGatewayFallbackNeverAfterFirstByte(t *testing.T) {
	t.Parallel()
	const event = "data: {\"from\":\"primary\"}\n\n"
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, event)
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the connection breaks, with no end to the stream
	}))
	t.Cleanup(primary.Close)
	var asked atomic.Int32
	fallback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"from\":\"fallback\"}\n\n")
	}))
	t.Cleanup(fallback.Close)
	var got *record.Request
	policy := &outlast.Policy{Waits: []time.Duration{time.Second}, Reserve: -1}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{
			{Name: "primary", URL: mustURL(primary.URL), Policy: policy, Fallbacks: []string{"fallback"}},
			{Name: "fallback", Prefix: "/fallback", URL: mustURL(fallback.URL), Policy: policy},
		},
		Logger:   slog.New(slog.DiscardHandler),
		Observer: record.Observer{Done: func(r *record.Request) { got = r }},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(g, `{"model":"m","stream":true}`, map[string]string{"Accept": "text/event-stream"})
	body := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Outlast-Upstream") != "primary" {
		t.Errorf("got %d from %q, want 200 from the primary", rec.Code, rec.Header().Get("Outlast-Upstream"))
	}
	if rest, ok := strings.CutPrefix(body, event); !ok || !strings.HasPrefix(rest, "event: error\n") || !strings.Contains(rest, "upstream primary broke off the stream") {
		t.Errorf("got body %q, want the primary's event, then an error event saying the primary broke off", body)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the fallback got %d requests, want none", n)
	}
	if got.Moves != nil || got.Error != record.ErrorUpstreamBroke || !got.Committed {
		t.Errorf("record: got moves %v, error %q, committed %v; want no moves, %q, committed", got.Moves, got.Error, got.Committed, record.ErrorUpstreamBroke)
	}
	for _, a := range got.Attempts {
		if a.Upstream != "primary" || a.Fallback != "" {
			t.Errorf("attempt %d: got upstream %q, fallback %q; want the primary's, not moved", a.N, a.Upstream, a.Fallback)
		}
	}
}

// A failure that is not retryable never moves.
func TestGatewayFallbackNotRetryable(t *testing.T) {
	for _, c := range []struct {
		name string
		resp func(r *http.Request) *http.Response
		code int
	}{
		{"400", func(r *http.Request) *http.Response {
			return &http.Response{StatusCode: 400, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}
		}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, ups := fallbackGateway(t, roundTripFunc(func(r *http.Request) (*http.Response, error) { return c.resp(r), nil }), outlast.PreferPrimary, io.Discard, record.Observer{})
				rec := serve(g, `{"model":"gpt-4o","stream":true}`, map[string]string{"Accept": "text/event-stream"})
				if rec.Code != c.code || rec.Header().Get("Outlast-Upstream") != "primary" {
					t.Errorf("%d from %q, want %d from the primary", rec.Code, rec.Header().Get("Outlast-Upstream"), c.code)
				}
				ups.mu.Lock()
				defer ups.mu.Unlock()
				if len(ups.got) != 0 {
					t.Errorf("the fallback got %d requests, want none", len(ups.got))
				}
			})
		})
	}
}

// A fallback that names no upstream, or the upstream itself, is refused
// at New, by name.
func TestGatewayFallbackConfig(t *testing.T) {
	for _, c := range []struct {
		fallbacks []string
		want      string
	}{
		{[]string{"nope"}, `fallback "nope" names no upstream`},
		{[]string{"a"}, `fallback "a" is the upstream itself`},
		{[]string{"b", "b"}, `fallback "b" is named twice`},
	} {
		_, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{
			{Name: "a", URL: mustURL("http://a.test"), Fallbacks: c.fallbacks},
			{Name: "b", Prefix: "/b", URL: mustURL("http://b.test")},
		}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fallbacks %v: %v, want an error saying %s", c.fallbacks, err, c.want)
		}
	}
}

// The credential's String never shows the secret.
func TestCredentialString(t *testing.T) {
	c := gateway.NewCredential("x-api-key", fallbackCanary)
	u := gateway.Upstream{Name: "x", Auth: c}
	for _, s := range []string{c.String(), c.GoString(), fmtAll(u)} {
		if strings.Contains(s, fallbackCanary) {
			t.Errorf("%q shows the secret", s)
		}
	}
}

// A held credential replaces every credential the caller sent, whatever
// its header and its case, and nothing else the caller sent.
func TestCredentialReplacesTheCallers(t *testing.T) {
	for _, c := range []struct {
		name   string
		header string // the caller's, as the map holds it
	}{
		{"OpenAI's", "Authorization"},
		{"Anthropic's", "X-Api-Key"},
		{"Azure OpenAI's", "Api-Key"},
		// Gemini's, in redact's list but not in the gateway's own
		// before it used that list.
		{"Gemini's", "X-Goog-Api-Key"},
		// A hand-made request's map may hold a key that is not
		// canonical.
		{"in lower case", "x-goog-api-key"},
		// A session cookie is the caller's credential too.
		{"a cookie", "Cookie"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got http.Header
			g, err := gateway.New(gateway.Config{
				Upstreams: []gateway.Upstream{{URL: mustURL("http://up.test"), Auth: gateway.NewCredential("x-api-key", fallbackCanary)}},
				Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					got = r.Header.Clone()
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
				}),
				Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
			req.Header[c.header] = []string{"the-callers-key"}
			req.Header.Set("Openai-Organization", "org-1")
			g.ServeHTTP(httptest.NewRecorder(), req)
			for k, v := range got {
				if slices.Contains(v, "the-callers-key") {
					t.Errorf("the upstream got the caller's credential in %s", k)
				}
			}
			if v := got.Get("X-Api-Key"); v != fallbackCanary {
				t.Errorf("X-Api-Key: got %q, want the held credential", v)
			}
			if v := got.Get("Openai-Organization"); v != "org-1" {
				t.Errorf("Openai-Organization: got %q, want the caller's org-1", v)
			}
		})
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// lockedWriter serialises writes, for a log written from many goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fmtAll prints v every way fmt can.
func fmtAll(v any) string {
	return fmt.Sprintf("%v %+v %#v %s", v, v, v, v)
}
