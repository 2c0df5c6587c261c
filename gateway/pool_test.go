package gateway_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// keyed is a fake provider behind several hosts, one API key each, with a
// limit of requests a minute per host, refilled continuously. Each answer
// carries OpenAI's headers; past the limit it is 429 with Retry-After.
type keyed struct {
	mu      sync.Mutex
	limit   float64
	left    map[string]float64
	at      map[string]time.Time
	always  map[string]int // a host that answers this status, whatever its limit
	sent    map[string]int
	hits    map[string]int
	auth    map[string][]string // the Authorization each host got
	models  map[string][]string // the model each host got
	latency time.Duration
}

func newKeyed(limit float64) *keyed {
	return &keyed{limit: limit, left: map[string]float64{}, at: map[string]time.Time{}, always: map[string]int{},
		sent: map[string]int{}, hits: map[string]int{}, auth: map[string][]string{}, models: map[string][]string{}, latency: 100 * time.Millisecond}
}

func (k *keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var b struct{ Model string }
	json.Unmarshal(body, &b)
	host := r.URL.Host
	k.mu.Lock()
	now := time.Now()
	left, ok := k.left[host]
	if !ok {
		left = k.limit
	} else {
		left = min(k.limit, left+now.Sub(k.at[host]).Minutes()*k.limit)
	}
	k.sent[host]++
	k.auth[host] = append(k.auth[host], r.Header.Get("Authorization"))
	k.models[host] = append(k.models[host], b.Model)
	status := k.always[host]
	if status == 0 {
		status = http.StatusOK
		if left < 1 {
			status = http.StatusTooManyRequests
		} else {
			left--
		}
	}
	if status == http.StatusTooManyRequests {
		k.hits[host]++
	}
	k.left[host], k.at[host] = left, now
	refill := func(n float64) time.Duration {
		return time.Duration(math.Ceil(max(n, 0) / k.limit * float64(time.Minute)))
	}
	h := http.Header{"Content-Type": {"application/json"}}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(int(k.limit)))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(int(left)))
	h.Set("X-Ratelimit-Reset-Requests", refill(k.limit-left).String())
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(refill(1-left).Seconds()))))
	}
	k.mu.Unlock()
	if status == http.StatusOK {
		select {
		case <-time.After(k.latency):
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h, Request: r,
		Body: io.NopCloser(strings.NewReader(`{"host":"` + host + `"}`))}, nil
}

func (k *keyed) count(host string) (sent, hits int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sent[host], k.hits[host]
}

// attemptsOf collects the record of each request that ends.
type attemptsOf struct {
	mu   sync.Mutex
	reqs []record.Request
}

func (a *attemptsOf) observer() record.Observer {
	return record.Observer{Done: func(r *record.Request) {
		a.mu.Lock()
		a.reqs = append(a.reqs, *r)
		a.mu.Unlock()
	}}
}

func (a *attemptsOf) last() record.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reqs[len(a.reqs)-1]
}

// poolGateway is a gateway with one pool, "keys", of members a, b and c
// on their own hosts, each with its own credential; b renames the model.
func poolGateway(t *testing.T, k *keyed, obs record.Observer) *gateway.Gateway {
	t.Helper()
	var members []gateway.Member
	for _, name := range []string{"a", "b", "c"} {
		m := gateway.Member{Name: name, URL: mustURL("http://" + name + ".test/v1"), Auth: gateway.NewCredential("Authorization", "key-"+name), Admission: &outlast.Admission{}}
		if name == "b" {
			m.Models = map[string]string{"gpt": "gpt-deployment-b"}
		}
		members = append(members, m)
	}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "keys", Members: members, FirstByteTimeout: time.Minute,
			Policy: &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, Reserve: time.Second}}},
		Transport: k,
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

const poolBody = `{"model":"gpt","max_tokens":10,"messages":[]}`

// A 429 at one member is answered by another at once; each member gets
// its own credential and model name, and the record names the member of
// each attempt.
func TestGatewayPool429AnsweredByAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeyed(100)
		k.always["a.test"] = http.StatusTooManyRequests
		var recs attemptsOf
		g := poolGateway(t, k, recs.observer())
		start := time.Now()
		w := serveAt(g, "/v1/chat/completions", poolBody, map[string]string{"Authorization": "Bearer caller"})
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if took := time.Since(start); took != k.latency {
			t.Errorf("took %v, want the answering member's latency alone, %v", took, k.latency)
		}
		if got := w.Header().Get(gateway.HeaderUpstream); got != "b" {
			t.Errorf("%s = %q, want b", gateway.HeaderUpstream, got)
		}
		rec := recs.last()
		if rec.Upstream != "keys" || len(rec.Attempts) != 2 || rec.Attempts[0].Upstream != "a" || rec.Attempts[0].Status != 429 || rec.Attempts[1].Upstream != "b" {
			t.Fatalf("record: upstream %q, attempts %+v; want keys, a's 429 then b", rec.Upstream, rec.Attempts)
		}
		if len(rec.Moves) != 1 || rec.Moves[0] != (record.Move{From: "a", To: "b", Reason: record.ReasonRateLimited}) {
			t.Errorf("moves %+v, want a to b, rate-limited", rec.Moves)
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.auth["a.test"][0] != "Bearer key-a" || k.auth["b.test"][0] != "Bearer key-b" {
			t.Errorf("credentials %v, want each member's own", k.auth)
		}
		if k.models["a.test"][0] != "gpt" || k.models["b.test"][0] != "gpt-deployment-b" {
			t.Errorf("models %v, want b's renamed", k.models)
		}
	})
}

// A request that no member can take waits for the earliest refill and is
// served then, rather than sent to collect a 429.
func TestGatewayPoolHoldsUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeyed(2) // 2 a minute each: one refills in 30 s
		g := poolGateway(t, k, record.Observer{})
		for i := range 6 {
			if w := serve(g, poolBody, nil); w.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
			}
		}
		start := time.Now()
		w := serve(g, poolBody, map[string]string{"Outlast-Timeout": "120"})
		if w.Code != http.StatusOK {
			t.Fatalf("held request: %d %s", w.Code, w.Body)
		}
		if waited := time.Since(start) - k.latency; waited < 20*time.Second || waited > 31*time.Second {
			t.Errorf("held %v, want until the first member refills a request (under 30 s)", waited)
		}
		for _, h := range []string{"a.test", "b.test", "c.test"} {
			if _, hits := k.count(h); hits != 0 {
				t.Errorf("%s answered %d 429s, want none", h, hits)
			}
		}
	})
}

// With every member spent past a short deadline, the caller gets 429 at
// once, with a Retry-After that says when the first member has room, and
// no member is sent the request.
func TestGatewayPoolSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeyed(2)
		g := poolGateway(t, k, record.Observer{})
		for range 6 {
			serve(g, poolBody, nil)
		}
		var sent int
		for _, h := range []string{"a.test", "b.test", "c.test"} {
			s, _ := k.count(h)
			sent += s
		}
		start := time.Now()
		w := serve(g, poolBody, map[string]string{"Outlast-Timeout": "5", "Outlast-Reserve": "1"})
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if time.Since(start) != 0 {
			t.Errorf("answered after %v, want at once", time.Since(start))
		}
		ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil || ra < 20 || ra > 30 {
			t.Errorf("Retry-After %q, want the first member's refill, 20 to 30 s", w.Header().Get("Retry-After"))
		}
		if got := w.Header().Get("Outlast-Error"); got != "rate-limited" {
			t.Errorf("Outlast-Error %q, want rate-limited", got)
		}
		if !strings.Contains(w.Body.String(), "pool keys") {
			t.Errorf("body %s, want it to name the pool", w.Body)
		}
		var now int
		for _, h := range []string{"a.test", "b.test", "c.test"} {
			s, _ := k.count(h)
			now += s
		}
		if now != sent {
			t.Errorf("%d requests sent for it, want none", now-sent)
		}
		// Sent again after Retry-After, it is served.
		time.Sleep(time.Duration(ra) * time.Second)
		if w := serve(g, poolBody, map[string]string{"Outlast-Timeout": "5", "Outlast-Reserve": "1"}); w.Code != http.StatusOK {
			t.Errorf("after Retry-After: %d %s", w.Code, w.Body)
		}
	})
}

// Health lists the pool and its members, with the headroom each member's
// answers stated; Loads names each member's pool.
func TestGatewayPoolHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeyed(100)
		g := poolGateway(t, k, record.Observer{})
		serve(g, poolBody, nil)
		h := g.Health()
		var names []string
		for _, u := range h.Upstreams {
			names = append(names, u.Name)
		}
		if strings.Join(names, ",") != "keys,a,b,c" {
			t.Fatalf("health upstreams %v, want keys, a, b, c", names)
		}
		if m := h.Upstreams[0].Members; strings.Join(m, ",") != "a,b,c" {
			t.Errorf("pool's members %v", m)
		}
		a := h.Upstreams[1]
		if a.Pool != "keys" || a.Headroom == nil || a.Headroom.Requests == nil || a.Headroom.Requests.Limit != 100 || a.Headroom.Requests.Remaining != 99 {
			t.Errorf("member a's health %+v (headroom %+v), want pool keys and 99 of 100 requests left", a, a.Headroom)
		}
		if b := h.Upstreams[2]; b.Headroom == nil || b.Headroom.Requests != nil {
			t.Errorf("member b, never sent a request, has headroom %+v; want none known", b.Headroom)
		}
		loads := g.Loads()
		if len(loads) != 4 || loads[1].Pool != "keys" || loads[1].Requests.Remaining != 99 || loads[0].Pool != "" {
			t.Errorf("loads %+v", loads)
		}
	})
}

// A pool's settings are checked: it needs a name and members with names
// of their own, and has no url, admission or fallbacks of its own.
func TestGatewayPoolConfig(t *testing.T) {
	member := func(name string) gateway.Member {
		return gateway.Member{Name: name, URL: mustURL("http://" + name + ".test")}
	}
	for _, c := range []struct {
		name string
		ups  []gateway.Upstream
		want string
	}{
		{"no name", []gateway.Upstream{{Members: []gateway.Member{member("a")}}}, "a pool needs a name"},
		{"url", []gateway.Upstream{{Name: "p", URL: mustURL("http://x.test"), Members: []gateway.Member{member("a")}}}, "instead of a url"},
		{"admission", []gateway.Upstream{{Name: "p", Admission: &outlast.Admission{}, Members: []gateway.Member{member("a")}}}, "give each member its own"},
		{"fallbacks", []gateway.Upstream{{Name: "p", Fallbacks: []string{"q"}, Members: []gateway.Member{member("a")}}, {Name: "q", Prefix: "/q", URL: mustURL("http://q.test")}}, "no fallbacks"},
		{"as a fallback", []gateway.Upstream{{Name: "p", Members: []gateway.Member{member("a")}}, {Name: "q", Prefix: "/q", URL: mustURL("http://q.test"), Fallbacks: []string{"p"}}}, "is a pool"},
		{"member twice", []gateway.Upstream{{Name: "p", Members: []gateway.Member{member("a"), member("a")}}}, `member name "a" is used twice`},
		{"member is an upstream", []gateway.Upstream{{Name: "p", Members: []gateway.Member{member("a")}}, {Name: "a", Prefix: "/a", URL: mustURL("http://a.test")}}, "is a member's name"},
		{"member's url", []gateway.Upstream{{Name: "p", Members: []gateway.Member{{Name: "a"}}}}, "members[0] of pool p"},
		{"weight", []gateway.Upstream{{Name: "p", Members: []gateway.Member{{Name: "a", URL: mustURL("http://a.test"), Weight: -1}}}}, "weight -1"},
	} {
		_, err := gateway.New(gateway.Config{Upstreams: c.ups, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one that says %q", c.name, err, c.want)
		}
	}
}

// A pool's status paths (/v1/models, llama.cpp's /health) go to its
// first member, with that member's credential in place of the caller's,
// as a model request does: the pool has no URL of its own.
func TestGatewayPoolStatusPaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeyed(100)
		g := poolGateway(t, k, record.Observer{})
		for _, path := range []string{"/v1/models", "/health"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer caller")
			w := httptest.NewRecorder()
			g.ServeHTTP(w, req)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "a.test") {
				t.Errorf("GET %s: got %d %q, want the first member's answer", path, w.Code, w.Body)
			}
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if got := k.auth["a.test"]; len(got) != 2 || got[0] != "Bearer key-a" || got[1] != "Bearer key-a" {
			t.Errorf("the first member got Authorization %q, want its own key twice", got)
		}
	})
}

// The pool judges how long an answer takes by the request's max_tokens,
// through the gateway as in the library: after slow answers to requests
// of a large bound, a request of a small one still waits for room that
// comes within its deadline, rather than being refused as if its answer
// were as long as theirs.
func TestGatewayPoolReadsMaxTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var delay time.Duration
		spent := false
		var mu sync.Mutex
		up := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			d, s := delay, spent
			mu.Unlock()
			time.Sleep(d)
			h := http.Header{"Content-Type": {"application/json"}}
			if s {
				h.Set("X-Ratelimit-Limit-Requests", "2")
				h.Set("X-Ratelimit-Remaining-Requests", "0")
				h.Set("X-Ratelimit-Reset-Requests", "2s")
			} else {
				h.Set("X-Ratelimit-Limit-Requests", "60")
				h.Set("X-Ratelimit-Remaining-Requests", "59")
				h.Set("X-Ratelimit-Reset-Requests", "1s")
			}
			return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
		})
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{Name: "keys", Members: []gateway.Member{{Name: "a", URL: mustURL("http://a.test/v1"), Admission: &outlast.Admission{}}},
				FirstByteTimeout: time.Minute, Policy: &outlast.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}}},
			Transport: up,
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		body := func(maxTokens int) string {
			return `{"model":"gpt","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[]}`
		}
		for range 10 {
			serve(g, body(10), nil)
		}
		mu.Lock()
		delay = 3 * time.Second
		mu.Unlock()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { serve(g, body(4000), nil) })
		}
		wg.Wait()
		mu.Lock()
		delay, spent = 0, true
		mu.Unlock()
		serve(g, body(10), nil) // the member has no request left, for 2 s
		start := time.Now()
		if w := serve(g, body(10), map[string]string{"Outlast-Timeout": "4"}); w.Code != http.StatusOK {
			t.Errorf("a request of max_tokens 10 with 4 s: got %d %s after %v, want 200 once the member has room", w.Code, w.Body, time.Since(start))
		}
	})
}
