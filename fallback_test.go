package outlast_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
)

// attemptLog keeps the attempts that Transports report.
type attemptLog struct {
	mu       sync.Mutex
	attempts []outlast.Attempt
	moves    []string
}

func (r *attemptLog) hooks() outlast.Hooks {
	return outlast.Hooks{AttemptEnd: func(a outlast.Attempt) {
		r.mu.Lock()
		r.attempts = append(r.attempts, a)
		r.mu.Unlock()
	}}
}

func (r *attemptLog) upstreams() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.attempts {
		out = append(out, a.Upstream)
	}
	return out
}

// pair is a primary down for 30 s (refusing) and a healthy fallback, each
// a Transport of its own with an Admission, under one Fallback.
type pair struct {
	primary  *upstream
	fallback *fakeRT
	rec      *attemptLog
	f        *outlast.Fallback
}

func newPair(t *testing.T, prefer outlast.Preference) *pair {
	p := &pair{
		primary:  &upstream{up: time.Now().Add(30 * time.Second), service: time.Second},
		fallback: newFake(step{delay: time.Second}),
		rec:      &attemptLog{},
	}
	policy := &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, Reserve: 5 * time.Second}
	primary := &outlast.Transport{Name: "primary", Base: p.primary, Policy: policy, Admission: &outlast.Admission{}, Hooks: p.rec.hooks()}
	fallback := &outlast.Transport{Name: "fallback", Base: p.fallback, Policy: policy, Admission: &outlast.Admission{}, Hooks: p.rec.hooks()}
	p.f = &outlast.Fallback{Upstreams: []*outlast.Transport{primary, fallback}, Prefer: prefer,
		OnFallback: func(_ *http.Request, from, to int, reason outlast.FallbackReason, err error) {
			p.rec.mu.Lock()
			p.rec.moves = append(p.rec.moves, strconv.Itoa(from)+">"+strconv.Itoa(to)+" "+string(reason))
			p.rec.mu.Unlock()
		}}
	// The outage begins: three refusals mark the primary down.
	for i := range 3 {
		send1(t.Context(), &outlast.Transport{Base: p.primary, Admission: primary.Admission}, "mark"+strconv.Itoa(i))
	}
	return p
}

func (p *pair) send(t *testing.T, deadline time.Duration) (served string, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model.test/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	resp, err := p.f.RoundTrip(req)
	if err != nil {
		return "", time.Since(start), err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", time.Since(start), errors.New(resp.Status)
	}
	ups := p.rec.upstreams()
	return ups[len(ups)-1], time.Since(start), nil
}

// The rule, both ways. Preferring the primary, a request whose deadline
// less reserve cannot outlast the outage moves to the fallback once its
// next chance at the primary no longer fits, and succeeds there; one
// whose deadline can outlast it waits for the primary. Preferring what is
// available (the default), both move at once.
func TestFallbackRule(t *testing.T) {
	for _, c := range []struct {
		name     string
		prefer   outlast.Preference
		deadline time.Duration
		want     string
		before   time.Duration // the move, or the answer, comes before this
		after    time.Duration // ... and not before this
	}{
		{"prefer primary, 20 s deadline", outlast.PreferPrimary, 20 * time.Second, "fallback", 17 * time.Second, 5 * time.Second},
		{"prefer primary, 2 min deadline", outlast.PreferPrimary, 2 * time.Minute, "primary", 40 * time.Second, 30 * time.Second},
		{"prefer available, 20 s deadline", outlast.PreferAvailable, 20 * time.Second, "fallback", 1500 * time.Millisecond, 0},
		{"prefer available, 2 min deadline", outlast.PreferAvailable, 2 * time.Minute, "fallback", 1500 * time.Millisecond, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, c.prefer)
				served, took, err := p.send(t, c.deadline)
				if err != nil {
					t.Fatalf("%v after %v, want an answer from the %s", err, took, c.want)
				}
				if served != c.want {
					t.Errorf("served by %s, want the %s", served, c.want)
				}
				if took >= c.before || took < c.after {
					t.Errorf("answered after %v, want in [%v, %v)", took, c.after, c.before)
				}
				// The move's reason: down when the primary's next chance
				// came too late, spent when the request was the probe
				// and its policy had no retry left that fitted.
				if c.want == "fallback" && (len(p.rec.moves) != 1 || !(strings.HasSuffix(p.rec.moves[0], " down") || strings.HasSuffix(p.rec.moves[0], " spent"))) {
					t.Errorf("moves %v, want one, for the primary being down or its attempts spent", p.rec.moves)
				}
				if c.want == "primary" && len(p.rec.moves) != 0 {
					t.Errorf("moves %v, want none", p.rec.moves)
				}
			})
		})
	}
}

// A failure that is not retryable is the answer: it never moves on. Nor
// does a response returned to be read, whatever its body does after its
// first byte.
func TestFallbackKeepsFinalAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		step   step
		status int
	}{
		{"400", step{status: 400}, 400},
		{"401", step{status: 401}, 401},
		{"a stream that broke after its first byte", step{body: "data: {}\n\n", bodyErr: io.ErrUnexpectedEOF, header: map[string]string{"Content-Type": "text/event-stream"}}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary, fallback := newFake(c.step), newFake(step{})
				policy := &outlast.Policy{Waits: []time.Duration{time.Second}}
				f := &outlast.Fallback{Upstreams: []*outlast.Transport{{Base: primary, Policy: policy}, {Base: fallback, Policy: policy}}}
				req, _ := http.NewRequest(http.MethodPost, "http://primary.test/", strings.NewReader("{}"))
				resp, err := f.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Errorf("status %d, want %d", resp.StatusCode, c.status)
				}
				if n := len(fallback.attempts()); n != 0 {
					t.Errorf("the fallback got %d attempts, want none", n)
				}
			})
		})
	}
}

// With the fallback down too, the request gets the last failure, and the
// attempts show both upstreams, each attempt named by its own.
func TestFallbackBothDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &attemptLog{}
		policy := &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 2}
		f := &outlast.Fallback{Upstreams: []*outlast.Transport{
			{Name: "a", Base: newFake(step{status: 503}), Policy: policy, Hooks: rec.hooks()},
			{Name: "b", Base: newFake(step{status: 529}), Policy: policy, Hooks: rec.hooks()},
		}}
		req, _ := http.NewRequest(http.MethodPost, "http://a.test/", strings.NewReader("{}"))
		resp, err := f.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 529 {
			t.Errorf("status %d, want the fallback's last failure, 529", resp.StatusCode)
		}
		if got, want := strings.Join(rec.upstreams(), ","), "a,a,b,b"; got != want {
			t.Errorf("attempts at %s, want %s", got, want)
		}
	})
}

// Rewrite makes the fallback's request: its model and its credentials
// reach the fallback, and the caller's credentials do not.
func TestFallbackRewrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got *http.Request
		var body string
		fallback := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			got = r
			b, _ := io.ReadAll(r.Body)
			body = string(b)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		f := &outlast.Fallback{
			Upstreams: []*outlast.Transport{{Base: newFake(step{status: 503})}, {Base: fallback}},
			Rewrite: func(r *http.Request, i int) (*http.Request, error) {
				r.URL.Host = "fallback.test"
				r.Header.Set("Authorization", "Bearer held-by-the-gateway")
				b, _ := io.ReadAll(r.Body)
				nb := strings.Replace(string(b), `"gpt-4o"`, `"my-deployment"`, 1)
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(nb)), int64(len(nb))
				return r, nil
			},
		}
		req, _ := http.NewRequest(http.MethodPost, "http://primary.test/", strings.NewReader(`{"model":"gpt-4o"}`))
		req.Header.Set("Authorization", "Bearer the-callers")
		resp, err := f.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got == nil {
			t.Fatal("the fallback got nothing")
		}
		if got.URL.Host != "fallback.test" || got.Header.Get("Authorization") != "Bearer held-by-the-gateway" || body != `{"model":"my-deployment"}` {
			t.Errorf("the fallback got %s %q %s, want fallback.test, the held credentials and the rewritten model", got.URL.Host, got.Header.Get("Authorization"), body)
		}
	})
}

// A request that waited for its primary to the end, and was then sent
// away, still has the fallback's reserve left, and moves: the primary's
// wait ends at the deadline less its reserve and the fallback's, and the
// fallback's one attempt fits in the rest. Here the primary's probe
// hangs, so the next chance never comes and the wait runs to that bound.
func TestFallbackAfterWaitingToTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		primary := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n <= 3 {
				return nil, errRefused // the outage begins
			}
			<-r.Context().Done() // then every attempt hangs
			return nil, r.Context().Err()
		})
		policy := &outlast.Policy{Waits: []time.Duration{time.Second}, Reserve: 5 * time.Second}
		rec := &attemptLog{}
		pt := &outlast.Transport{Name: "primary", Base: primary, Policy: policy, Admission: &outlast.Admission{}, Hooks: rec.hooks()}
		f := &outlast.Fallback{Prefer: outlast.PreferPrimary, Upstreams: []*outlast.Transport{pt, {Name: "fallback", Base: newFake(step{delay: time.Second}), Policy: policy, Hooks: rec.hooks()}}}
		for i := range 3 {
			send1(t.Context(), &outlast.Transport{Base: primary, Admission: pt.Admission}, "mark"+strconv.Itoa(i))
		}
		// The probe: a request with all the time in the world, which hangs.
		probeCtx, stopProbe := context.WithCancel(t.Context())
		defer stopProbe()
		go send1(probeCtx, pt, "probe")
		synctest.Wait()
		time.Sleep(2 * time.Second) // the probe is in flight
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://model.test/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := f.RoundTrip(req)
		if err != nil {
			t.Fatalf("%v after %v, want the fallback's answer", err, time.Since(start))
		}
		resp.Body.Close()
		ups := rec.upstreams()
		if took := time.Since(start); resp.StatusCode != 200 || ups[len(ups)-1] != "fallback" || took < 30*time.Second || took > 32*time.Second {
			t.Errorf("%d from %v after %v, want 200 from the fallback, after waiting 30 s for the primary (40 s less both 5 s reserves) and 1 s there", resp.StatusCode, ups, took)
		}
		stopProbe()
	})
}

// Preferring what is available, a request never waits at a down primary:
// while no probe is due it moves at once, without an attempt there; when
// one is due it is the probe, and moves only if the probe fails; and once
// a probe is answered, the primary takes requests again.
func TestFallbackAvailableProbesOnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, outlast.PreferAvailable) // down since now, until 30 s
		// Marked down at 0: the first probe is due in 1 s to 1.5 s.
		if served, took, err := p.send(t, time.Minute); err != nil || served != "fallback" || took != time.Second {
			t.Fatalf("before the probe is due: served by %q after %v (%v), want the fallback after its 1 s", served, took, err)
		}
		if n := p.primary.sentBetween(time.Time{}, time.Now().Add(time.Hour)); n != 3 {
			t.Errorf("the primary saw %d attempts, want the 3 that marked it down", n)
		}
		time.Sleep(time.Second) // at 2 s: the first probe is due
		before := time.Now()
		if served, _, err := p.send(t, time.Minute); err != nil || served != "fallback" {
			t.Fatalf("with the probe due: served by %q (%v), want the fallback", served, err)
		}
		if n := p.primary.sentBetween(before, time.Now()); n != 1 {
			t.Errorf("with the probe due, the primary saw %d attempts, want 1: the request was the probe", n)
		}
		time.Sleep(time.Until(p.primary.up.Add(5 * time.Second))) // up, and a probe due
		if served, _, err := p.send(t, time.Minute); err != nil || served != "primary" {
			t.Fatalf("after the outage: served by %q (%v), want the primary, through the probe", served, err)
		}
		if served, _, err := p.send(t, time.Minute); err != nil || served != "primary" {
			t.Errorf("after the probe: served by %q (%v), want the primary", served, err)
		}
	})
}

// Preferring what is available, a request moves on after MaxAttempts of
// its own failures at an upstream (3 unless set), even where its key is
// never marked down, as under a 429 without a delay; preferring the
// primary, it retries there as its policy allows.
func TestFallbackAttemptsCap(t *testing.T) {
	for _, c := range []struct {
		name   string
		prefer outlast.Preference
		max    int
		want   int // attempts at the primary
	}{
		{"available, default", outlast.PreferAvailable, 0, 3},
		{"available, 2", outlast.PreferAvailable, 2, 2},
		// The policy's own cap, 6, is lower than none.
		{"primary", outlast.PreferPrimary, 0, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary, fallback := newFake(step{status: 429}), newFake(step{})
				policy := &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 6}
				a := &outlast.Admission{}
				f := &outlast.Fallback{Prefer: c.prefer, MaxAttempts: c.max, Upstreams: []*outlast.Transport{
					{Base: primary, Policy: policy, Admission: a}, {Base: fallback, Policy: policy}}}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://primary.test/", strings.NewReader("{}"))
				resp, err := f.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := len(primary.attempts()); resp.StatusCode != 200 || got != c.want {
					t.Errorf("%d after %d attempts at the primary, want 200 from the fallback after %d", resp.StatusCode, got, c.want)
				}
			})
		})
	}
}

// A 400 that says the request is too long for the model's context moves
// to the fallback after one attempt, in each API's words; any other 400
// is the answer, its body whole.
func TestFallbackContextLength(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String()
	}
	for _, c := range []struct {
		name   string
		body   string
		move   bool
		coding string // the body's Content-Encoding
	}{
		{"openai", `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, true, ""},
		// An SDK asks for gzip, and the gateway passes its Accept-Encoding on.
		{"openai, gzip", gz(`{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`), true, "gzip"},
		{"content policy, gzip", gz(`{"error":{"message":"Your request was rejected by our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}`), false, "gzip"},
		{"anthropic", `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`, true, ""},
		{"llama.cpp", `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, true, ""},
		{"vllm", `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}`, true, ""},
		// Another 400 is the caller's to fix, wherever it goes.
		{"content policy", `{"error":{"message":"Your request was rejected by our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`, false, ""},
		{"anthropic, another invalid request", `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`, false, ""},
		{"not json", `prompt is too long`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary, fallback := newFake(step{status: 400, body: c.body, header: map[string]string{"Content-Encoding": c.coding}}), newFake(step{body: "ok"})
				var reasons []outlast.FallbackReason
				policy := &outlast.Policy{Waits: []time.Duration{time.Second}}
				f := &outlast.Fallback{Upstreams: []*outlast.Transport{{Base: primary, Policy: policy}, {Base: fallback, Policy: policy}},
					OnFallback: func(_ *http.Request, _, _ int, reason outlast.FallbackReason, _ error) {
						reasons = append(reasons, reason)
					}}
				req, _ := http.NewRequest(http.MethodPost, "http://primary.test/", strings.NewReader("{}"))
				resp, err := f.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if n := len(primary.attempts()); n != 1 {
					t.Errorf("%d attempts at the primary, want 1", n)
				}
				switch {
				case c.move && (resp.StatusCode != 200 || len(reasons) != 1 || reasons[0] != outlast.FallbackContextLength):
					t.Errorf("%d, moves %v; want 200 from the fallback after a move for context-length", resp.StatusCode, reasons)
				case !c.move && (resp.StatusCode != 400 || string(body) != c.body || len(fallback.attempts()) != 0):
					t.Errorf("%d %q, %d attempts at the fallback; want the primary's 400, its body whole, and none", resp.StatusCode, body, len(fallback.attempts()))
				}
			})
		})
	}
}

// FuzzContextTooLong reads arbitrary bodies as a 400's: it never panics,
// and says "too long" only of JSON.
func FuzzContextTooLong(f *testing.F) {
	for _, s := range []string{
		`{"error":{"code":"context_length_exceeded"}}`,
		`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 1 tokens > 0 maximum"}}`,
		`{"error":{"code":400,"type":"exceed_context_size_error"}}`,
		`{"message":"This model's maximum context length is 4096 tokens.","code":400}`,
		`{"error":"context_length_exceeded"}`,
		`{"error":{"code":["context_length_exceeded"]}}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if outlast.IsContextTooLong(body) && !json.Valid(body) {
			t.Errorf("%q: too long, but not JSON", body)
		}
	})
}

// A short rate limit is waited for, not fled: a 429 with Retry-After: 2 at
// a healthy primary is retried there after 2 s, with no attempt at the
// fallback and no wait of the policy's own; the key is not held, so the
// next request goes to the primary at once. A longer delay holds the key
// and sends the request on, as before.
func TestFallbackWaitsOutShortRateLimit(t *testing.T) {
	for _, c := range []struct {
		name       string
		retryAfter string
		primary    int           // attempts at the primary
		fallback   int           // and at the fallback
		second     time.Duration // the primary's second attempt, after its first
	}{
		{"short", "2", 2, 0, 2 * time.Second},
		{"long", "30", 1, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary := newFake(step{status: 429, header: map[string]string{"Retry-After": c.retryAfter}}, step{})
				fallback := newFake(step{})
				// serve's defaults: waits of 1 s, 2 s, …, an Admission,
				// preferring what is available.
				p := &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}}
				a := &outlast.Admission{}
				f := &outlast.Fallback{Upstreams: []*outlast.Transport{
					{Base: primary, Policy: p, Admission: a, Logger: discardLogger()},
					{Base: fallback, Policy: p, Admission: &outlast.Admission{}, Logger: discardLogger()},
				}}
				ctx, cancel := context.WithTimeout(t.Context(), 9*time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://primary.test/v1/chat/completions", strings.NewReader("{}"))
				resp, err := f.RoundTrip(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("got %v, %v; want the answer", resp, err)
				}
				resp.Body.Close()
				at := primary.attempts()
				if len(at) != c.primary || len(fallback.attempts()) != c.fallback {
					t.Fatalf("%d attempts at the primary and %d at the fallback, want %d and %d", len(at), len(fallback.attempts()), c.primary, c.fallback)
				}
				if c.second > 0 && at[1].at.Sub(at[0].at) != c.second {
					t.Errorf("the second attempt %v after the first, want the server's %v", at[1].at.Sub(at[0].at), c.second)
				}
				if st := a.State("primary.test"); c.name == "short" && (st.State != outlast.Healthy || !st.NotBefore.IsZero()) {
					t.Errorf("the primary's key is %v, not before %v; want it healthy, not held", st.State, st.NotBefore)
				}
			})
		})
	}
}

// A silent primary is left after one attempt: no headers within the
// stream-header timeout, and the request moves to the fallback at once
// (FallbackSilent), rather than wait out the same silence twice more.
// Preferring the primary, it retries there as its policy allows.
func TestFallbackLeavesSilentUpstream(t *testing.T) {
	for _, c := range []struct {
		name    string
		prefer  outlast.Preference
		primary int
		took    time.Duration
	}{
		{"available", outlast.PreferAvailable, 1, 30 * time.Second},
		{"primary", outlast.PreferPrimary, 3, 90*time.Second + 3*time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary := newFake(step{delay: time.Hour})
				fallback := newFake(step{})
				p := &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, MaxAttempts: 3}
				var reasons []outlast.FallbackReason
				f := &outlast.Fallback{Prefer: c.prefer, Upstreams: []*outlast.Transport{
					{Base: primary, Policy: p, ResponseHeaderTimeout: 30 * time.Second, Logger: discardLogger()},
					{Base: fallback, Policy: p, Logger: discardLogger()},
				}, OnFallback: func(_ *http.Request, _, _ int, reason outlast.FallbackReason, _ error) {
					reasons = append(reasons, reason)
				}}
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, "http://primary.test/v1/chat/completions", strings.NewReader("{}"))
				resp, err := f.RoundTrip(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("got %v, %v; want the fallback's answer", resp, err)
				}
				resp.Body.Close()
				if n := len(primary.attempts()); n != c.primary || time.Since(start) != c.took {
					t.Errorf("%d attempts at the primary, answered after %v; want %d, %v", n, time.Since(start), c.primary, c.took)
				}
				if len(reasons) != 1 || reasons[0] != outlast.FallbackSilent && c.prefer == outlast.PreferAvailable {
					t.Errorf("moved for %v, want once, silent", reasons)
				}
			})
		})
	}
}

// A stream that fails with an error event before its answer began
// (Anthropic's overloaded_error after message_start) fails as its status
// would: once its upstream retries it no more, the request moves on, as
// after a 529, and the caller reads the fallback's answer.
func TestFallbackAfterErrorEvent(t *testing.T) { synctest.Test(t, testFallbackAfterErrorEvent) }

func testFallbackAfterErrorEvent(t *testing.T) {
	overloaded := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	answer := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
	stream := func(events string) roundTripFunc {
		return func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(events)), Request: r}, nil
		}
	}
	policy := &outlast.Policy{Waits: []time.Duration{time.Millisecond}, MaxAttempts: 2}
	var moves []outlast.FallbackReason
	f := &outlast.Fallback{
		Upstreams: []*outlast.Transport{
			{Name: "primary", Base: stream(overloaded), Policy: policy, FirstByteTimeout: time.Second},
			{Name: "fallback", Base: stream(answer), Policy: policy, FirstByteTimeout: time.Second},
		},
		OnFallback: func(_ *http.Request, _, _ int, reason outlast.FallbackReason, _ error) { moves = append(moves, reason) },
	}
	req, _ := http.NewRequest(http.MethodPost, "http://model.test/v1/messages", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := f.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "msg_2") || strings.Contains(string(b), "overloaded_error") || len(moves) != 1 || moves[0] != outlast.FallbackSpent {
		t.Errorf("got %q after moves %v; want the fallback's answer, after one move for the primary's attempts spent", b, moves)
	}
}

// A nil upstream in a Fallback, or a nil member in a Pool, is an error
// that names it, and the request's body is closed, not a nil dereference.
func TestNilUpstreams(t *testing.T) {
	for name, rt := range map[string]http.RoundTripper{
		"fallback": &outlast.Fallback{Upstreams: []*outlast.Transport{{}, nil}},
		"pool":     &outlast.Pool{Members: []*outlast.Transport{{}, nil}},
	} {
		body := &closeTracker{Reader: strings.NewReader("{}")}
		req, _ := http.NewRequest(http.MethodPost, "http://model.test/", body)
		resp, err := rt.RoundTrip(req)
		if resp != nil || err == nil || !strings.Contains(err.Error(), "1 is nil") || !body.closed {
			t.Errorf("%s: got %v, %v, body closed %v; want an error naming the nil one, and the body closed", name, resp, err, body.closed)
		}
	}
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }
