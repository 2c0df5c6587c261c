package gateway_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// The operator's policy is a ceiling that no client can raise. With
// --max-attempts 3 --waits 200ms,500ms, a client that asks for no cap, no
// wait, no reserve and a 5 s deadline still costs the upstream at most 3
// attempts, none sooner than 200 ms after the one before.
func TestOperatorPolicyIsACeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent []time.Time
		f := &fakeUpstream{script: []func() *http.Response{func() *http.Response {
			sent = append(sent, time.Now())
			return answer(503, "application/json", "{}")()
		}}}
		g := virtualGateway(t, f, &outlast.Policy{Waits: []time.Duration{200 * time.Millisecond, 500 * time.Millisecond}, MaxAttempts: 3, Reserve: -1})
		rec := serve(g, chat, map[string]string{
			"Outlast-Max-Attempts": "0", "Outlast-Waits": "0", "Outlast-Reserve": "0", "Outlast-Timeout": "5s",
		})
		if rec.Code != 503 || f.attempts() != 3 {
			t.Fatalf("got %d after %d attempts, want 503 after 3 at most", rec.Code, f.attempts())
		}
		for i := 1; i < len(sent); i++ {
			if gap := sent[i].Sub(sent[i-1]); gap < 200*time.Millisecond {
				t.Errorf("attempt %d came %v after the one before, want 200ms at least", i+1, gap)
			}
		}
	})
}

// Each policy header tightens the operator's policy, and asking for
// looser gives the operator's.
func TestPolicyHeadersOnlyTighten(t *testing.T) {
	operator := &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, MaxAttempts: 4, Reserve: 10 * time.Second}
	for _, c := range []struct {
		name     string
		header   map[string]string
		attempts int
	}{
		// The operator's own: 4 attempts, the cap.
		{"none", nil, 4},
		// Fewer attempts, and no more.
		{"fewer attempts", map[string]string{"Outlast-Max-Attempts": "2"}, 2},
		{"more attempts", map[string]string{"Outlast-Max-Attempts": "50"}, 4},
		{"no cap", map[string]string{"Outlast-Max-Attempts": "0"}, 4},
		// Without a deadline the waits bound the retries: one wait asked
		// for is one retry; ten are cut to the operator's three.
		{"one wait", map[string]string{"Outlast-Waits": "5s"}, 2},
		{"ten waits", map[string]string{"Outlast-Waits": "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s", "Outlast-Max-Attempts": "0"}, 4},
		// Under a 30 s deadline a reserve of 25 s leaves room for the
		// waits of 1 s and 2 s, and not for the 3 s after them; the
		// operator's 10 s leaves room for all three.
		{"a larger reserve", map[string]string{"Outlast-Timeout": "30s", "Outlast-Reserve": "25s"}, 3},
		{"a smaller reserve", map[string]string{"Outlast-Timeout": "30s", "Outlast-Reserve": "1s"}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeUpstream{script: []func() *http.Response{answer(503, "application/json", "{}")}}
				rec := serve(virtualGateway(t, f, operator), chat, c.header)
				if rec.Code != 503 || f.attempts() != c.attempts {
					t.Errorf("got %d after %d attempts, want 503 after %d", rec.Code, f.attempts(), c.attempts)
				}
			})
		})
	}
}

// Under a deadline a policy's last wait repeats: a short list of waits
// must not repeat a short wait where the operator's would wait longer.
// Each attempt of the request comes no sooner than the operator's own, and
// there are no more of them (an attacker once made 37 where the default
// policy makes 5).
func TestPolicyHeadersUnderADeadline(t *testing.T) {
	operator := &outlast.Policy{Waits: []time.Duration{15 * time.Second, 45 * time.Second, 120 * time.Second, 240 * time.Second}}
	// starts returns when each attempt was sent, from the first.
	starts := func(t *testing.T, header map[string]string) []time.Duration {
		var at []time.Duration
		var start time.Time
		obs := record.Observer{AttemptStart: func(r *record.Request, a record.Attempt) {
			if start.IsZero() {
				start = a.Start
			}
			at = append(at, a.Start.Sub(start))
		}}
		f := &fakeUpstream{script: []func() *http.Response{answer(503, "application/json", "{}")}}
		serve(observedGateway(t, f, operator, obs), chat, header)
		return at
	}
	synctest.Test(t, func(t *testing.T) {
		want := starts(t, map[string]string{"Outlast-Timeout": "10m"})
		for _, waits := range []string{"15s", "0", "1s,1s,1s,1s,1s,1s,1s,1s", "15s,15s"} {
			got := starts(t, map[string]string{"Outlast-Timeout": "10m", "Outlast-Waits": waits})
			if len(got) > len(want) {
				t.Errorf("Outlast-Waits %s: %d attempts, want %d at most, the operator's", waits, len(got), len(want))
				continue
			}
			for k := range got {
				if got[k] < want[k] {
					t.Errorf("Outlast-Waits %s: attempt %d at %v, want %v at the soonest", waits, k+1, got[k], want[k])
				}
			}
		}
		// A longer wait asked for is kept: fewer attempts.
		if got := starts(t, map[string]string{"Outlast-Timeout": "10m", "Outlast-Waits": "300s"}); len(got) != 2 {
			t.Errorf("Outlast-Waits 300s: %d attempts at %v, want 2: one wait of 300s leaves no room under 10m", len(got), got)
		}
	})
}

// A deadline header cannot reach past the operator's MaxTimeout, even one
// past what a time.Duration holds.
func TestMaxTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeUpstream{delay: time.Hour, script: []func() *http.Response{answer(200, "application/json", "{}")}}
		u, _ := url.Parse("http://upstream.test")
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Second}}, MaxTimeout: 10 * time.Second}},
			Transport: f,
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []map[string]string{{"Outlast-Timeout": "1h"}, {"Outlast-Timeout": "106752d"}, {"Outlast-Deadline": time.Now().Add(time.Hour).Format(time.RFC3339)}} {
			start := time.Now()
			rec := serve(g, chat, h)
			if rec.Code != 504 || rec.Header().Get("Outlast-Error") != "deadline" || time.Since(start) != 10*time.Second {
				t.Errorf("%v: got %d %q after %v, want 504 deadline after 10s", h, rec.Code, rec.Header().Get("Outlast-Error"), time.Since(start))
			}
		}
	})
}

// A deadline that has passed when the request would be sent leaves nothing
// to try: 504 deadline at once, and no attempt in the record or at the
// upstream.
func TestDeadlineAlreadyPast(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	records := make(chan record.Request, 1)
	base, _ := gwObserved(t, up, nil, record.Observer{Done: func(r *record.Request) { records <- *r }})
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", chat, map[string]string{"Outlast-Deadline": time.Now().Add(-time.Minute).Format(time.RFC3339)})
	if resp.StatusCode != 504 || resp.Header.Get("Outlast-Error") != "deadline" || resp.Header.Get("Outlast-Attempts") != "0" || !strings.Contains(body, "passed before it could be sent") || up.attempts() != 0 {
		t.Errorf("got %d %q, %s attempts, after %d at the upstream: %s; want 504 deadline, none", resp.StatusCode, resp.Header.Get("Outlast-Error"), resp.Header.Get("Outlast-Attempts"), up.attempts(), body)
	}
	if r := <-records; len(r.Attempts) != 0 || r.Error != "deadline" {
		t.Errorf("recorded %d attempts, error %q; want none, deadline", len(r.Attempts), r.Error)
	}
}

// A slot a client names must be one the operator configured: --slots N
// means 0 to N-1. Any other gets 400 naming where it came from, and
// nothing is sent.
func TestSlotsCannotBeInvented(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		slots  int
		body   string
		header map[string]string
		names  string
	}{
		{"past the slots", 2, chat, map[string]string{"Outlast-Slot": "2"}, "Outlast-Slot"},
		{"id_slot past the slots", 2, `{"id_slot":7}`, nil, "id_slot"},
		{"no slots", 0, chat, map[string]string{"Outlast-Slot": "0"}, "Outlast-Slot"},
		{"id_slot with no slots", 0, `{"id_slot":0}`, nil, "id_slot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, status(200, "{}"))
			base, _ := gw(t, up, func(u *gateway.Upstream) { u.Slots = c.slots })
			resp, body := send(t, http.MethodPost, base+"/completion", c.body, c.header)
			if resp.StatusCode != 400 || resp.Header.Get("Outlast-Error") != "invalid" || !strings.Contains(body, c.names) || up.attempts() != 0 {
				t.Errorf("got %d %q after %d attempts: %s; want 400 invalid naming %s, nothing sent", resp.StatusCode, resp.Header.Get("Outlast-Error"), up.attempts(), body, c.names)
			}
		})
	}
	// The slots that exist are served.
	up := newUpstream(t, status(200, "{}"))
	base, _ := gw(t, up, func(u *gateway.Upstream) { u.Slots = 2 })
	if resp, _ := send(t, http.MethodPost, base+"/completion", `{"id_slot":1}`, nil); resp.StatusCode != 200 {
		t.Errorf("slot 1 of 2: got %d, want 200", resp.StatusCode)
	}
}

// The upstream's bound holds whatever slots clients name: with two
// slots, requests for slot 0 and slot 1 fill it, and one that names none
// waits.
func TestNamedSlotsWithinTheBound(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		status(200, "{}")(w, r)
	})
	obs, ev := events()
	base, g := gwObserved(t, up, func(u *gateway.Upstream) { u.Slots = 2 }, obs)
	done := make(chan struct{}, 3)
	for _, c := range []struct{ body, reached string }{
		{`{"id_slot":0}`, "sent 0"},
		{`{"id_slot":1}`, "sent 1"},
		{chat, "queued "},
	} {
		go func() {
			http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
			done <- struct{}{}
		}()
		await(t, ev, c.reached)
	}
	if h := g.Health().Upstreams[0]; h.InFlight != 2 || h.Queued != 1 {
		t.Errorf("got %d in flight, %d queued; want 2 and 1", h.InFlight, h.Queued)
	}
	close(release)
	for range 3 {
		<-done
	}
	if up.attempts() != 3 {
		t.Errorf("the upstream saw %d requests, want 3", up.attempts())
	}
}

// The record keeps a body's model bounded and clean, cut with a marker;
// the body forwarded upstream is the caller's, byte for byte.
func TestRecordKeepsModelBounded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	got := make(chan string, 2)
	base, _ := gwObserved(t, up, nil, record.Observer{Done: func(r *record.Request) { got <- r.Model }})
	long := `{"model":"` + strings.Repeat("m", 8<<20) + `"}`
	send(t, http.MethodPost, base+"/v1/chat/completions", long, nil)
	if m := <-got; len(m) > 256 || !strings.HasSuffix(m, "…") || !strings.HasPrefix(m, "mmm") {
		t.Errorf("an 8 MB model: kept %d bytes (%.20q…), want at most 256 ending in …", len(m), m)
	}
	if b := up.bodies[0]; b != long {
		t.Errorf("the upstream got %d bytes, want the caller's %d unchanged", len(b), len(long))
	}
	send(t, http.MethodPost, base+"/v1/chat/completions", `{"model":"gpt\u0000-4o\u001b[31m"}`, nil)
	if m := <-got; !utf8.ValidString(m) || strings.ContainsAny(m, "\x00\x1b") {
		t.Errorf("a model with control characters: kept %q, want them replaced", m)
	}
}

// Paths stay under the upstream's base: dot-segments are resolved, raw
// and encoded, before the upstream is chosen, and what is forwarded is
// the resolved path; a path that would climb out is refused, and nothing
// is sent.
func TestPathsStayUnderTheBase(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200, "{}"))
	u, _ := url.Parse(up.URL + "/base/v1")
	g, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Prefix: "/a"}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	for _, c := range []struct {
		path   string
		status int
		sent   string // the path the upstream saw, or "" for none
	}{
		{"/a/..%2f..%2fsecret", 400, ""},
		{"/a/%2e%2e/%2e%2e/secret", 400, ""},
		{"/a/../../secret", 400, ""},
		{"/a/chat/./completions", 200, "/base/v1/chat/completions"},
		{"/a/x/%2e%2e/models", 200, "/base/v1/models"},
		// Resolved first, then routed: this is not /a's path at all.
		{"/a/../b", 404, ""},
	} {
		before := up.attempts()
		resp := rawRequest(t, s.URL, "GET "+c.path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != c.status {
			t.Errorf("%s: got %d, want %d", c.path, resp.StatusCode, c.status)
		}
		switch {
		case c.sent == "" && up.attempts() != before:
			t.Errorf("%s: the upstream saw %s, want nothing", c.path, up.request(before).URL.RawPath+up.request(before).URL.Path)
		case c.sent != "" && (up.attempts() != before+1 || up.request(before).RequestURI != c.sent):
			t.Errorf("%s: the upstream saw %d requests, the last %q; want one, %q", c.path, up.attempts()-before, up.request(up.attempts()-1).RequestURI, c.sent)
		}
	}
}

// rawRequest writes text to the server at base on a connection of its own
// and reads one response: for requests that an HTTP client would clean up.
func rawRequest(t *testing.T, base, text string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
