package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A memberSpec is one member of the pool, an API key, and the limits its
// provider enforces on it.
type memberSpec struct {
	Name string
	RPM  int // requests per minute
	TPM  int // tokens per minute, counted up front: input plus max_tokens
}

// memberSpecs are the pool's members. Each has from 667 to 1,000 tokens
// a minute for each request a minute, so a small request (a few hundred
// tokens) runs into a member's request limit first and a large one (a
// few thousand) into its token limit; over the mix, the token limits
// bind first. The sizes, and the ratios, differ, so that where a request
// goes matters.
var memberSpecs = []memberSpec{
	{Name: "a", RPM: 60, TPM: 40_000},
	{Name: "b", RPM: 40, TPM: 30_000},
	{Name: "c", RPM: 20, TPM: 20_000},
}

// Timing of an answer: a member that admits a request answers after
// baseLatency plus perToken for each token it generates.
const (
	baseLatency = 300 * time.Millisecond
	perToken    = 10 * time.Millisecond
)

// idHeader carries a request's index in the workload, so that a member
// can credit its 429s to the request and knows the answer's length.
const idHeader = "X-Sim-Request"

// A bucket is one of a member's limits as its provider enforces it: a
// token bucket that holds up to limit and refills continuously at limit a
// minute. It starts full.
type bucket struct {
	limit float64
	level float64
	at    time.Time // when level was counted
}

// rate returns the bucket's refill per second.
func (b *bucket) rate() float64 { return b.limit / 60 }

// refill brings the level up to now.
func (b *bucket) refill(now time.Time) {
	b.level = min(b.limit, b.level+b.rate()*now.Sub(b.at).Seconds())
	b.at = now
}

// wait returns how long from the last refill until n is in the bucket: 0
// if it is already.
func (b *bucket) wait(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - b.level) / b.rate() * float64(time.Second)))
}

// full returns how long from the last refill until the bucket is full.
func (b *bucket) full() time.Duration {
	return time.Duration((b.limit - b.level) / b.rate() * float64(time.Second))
}

// An admission is a request a member admitted: when, and its cost in
// tokens. Tests replay them against the limits.
type admission struct {
	At   time.Time
	Cost int
}

// A member is a fake upstream for one API key: an http.RoundTripper that
// enforces its spec's limits as a provider does, counting a request's
// cost up front, and answers as OpenAI's chat completions API does, with
// its rate-limit headers on every answer. It blocks only on timers and
// its context, so that a synctest bubble sees time move.
type member struct {
	spec     memberSpec
	recs     []record // the run's requests, by index, to credit 429s to
	answered bool     // a 200's headers tell of the limits at the answer, not at admission

	mu         sync.Mutex
	req, tok   bucket
	admissions []admission
	rejected   int // 429s answered
	canceled   int // admitted requests whose caller left before the answer
	minLevel   [2]float64
}

// newMember returns a member with full buckets at now. A 200's headers
// tell of its limits as they stood when the request was admitted, or, if
// answered, as they stand when the answer is sent.
func newMember(spec memberSpec, recs []record, now time.Time, answered bool) *member {
	m := &member{spec: spec, recs: recs, answered: answered}
	m.req = bucket{limit: float64(spec.RPM), level: float64(spec.RPM), at: now}
	m.tok = bucket{limit: float64(spec.TPM), level: float64(spec.TPM), at: now}
	m.minLevel = [2]float64{m.req.level, m.tok.level}
	return m
}

// simBody is what a member reads of a request's body.
type simBody struct {
	MaxTokens int `json:"max_tokens"`
}

// requestCost returns what a request of body counts against the token
// limit, as a provider counts it up front: its input, a token for every
// four bytes, and its max_tokens.
func requestCost(body []byte) int {
	var b simBody
	_ = json.Unmarshal(body, &b)
	return (len(body)+3)/4 + b.MaxTokens
}

// RoundTrip answers r: a 429 at once if either bucket lacks room for it,
// else, having taken its cost, a 200 after its generation time, or the
// context's error if the caller leaves first (the cost stays taken).
func (m *member) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	id, err := strconv.Atoi(r.Header.Get(idHeader))
	if err != nil || id < 0 || id >= len(m.recs) {
		return nil, fmt.Errorf("pool bench: request without a valid %s header", idHeader)
	}
	rec := &m.recs[id]
	rec.attempts.Add(1)
	cost := requestCost(body)
	now := time.Now()
	h := make(http.Header)
	h.Set("Content-Type", "application/json")

	m.mu.Lock()
	m.req.refill(now)
	m.tok.refill(now)
	if wait := max(m.req.wait(1), m.tok.wait(float64(cost))); wait > 0 {
		m.rejected++
		m.headers(h)
		which := "requests"
		if m.req.level >= 1 {
			which = "tokens"
		}
		m.mu.Unlock()
		rec.rejects.Add(1)
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
		msg := fmt.Sprintf(`{"error":{"message":"Rate limit reached for %s on key %s","type":%q,"param":null,"code":"rate_limit_exceeded"}}`, which, m.spec.Name, which)
		return answer(r, http.StatusTooManyRequests, h, msg), nil
	}
	m.req.level--
	m.tok.level -= float64(cost)
	m.minLevel[0] = min(m.minLevel[0], m.req.level)
	m.minLevel[1] = min(m.minLevel[1], m.tok.level)
	m.admissions = append(m.admissions, admission{At: now, Cost: cost})
	// The headers tell of the limits as the request was admitted, as a
	// provider's rate limiter sets them before the model runs, unless the
	// member tells of them as they stand at the answer.
	m.headers(h)
	m.mu.Unlock()
	rec.admitted.CompareAndSwap(0, now.UnixNano())

	out := rec.output
	t := time.NewTimer(baseLatency + time.Duration(out)*perToken)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		m.mu.Lock()
		m.canceled++
		m.mu.Unlock()
		rec.cut.Store(true)
		return nil, r.Context().Err()
	case <-t.C:
	}
	if m.answered {
		m.mu.Lock()
		now := time.Now()
		m.req.refill(now)
		m.tok.refill(now)
		m.headers(h)
		m.mu.Unlock()
	}
	in := (len(body) + 3) / 4
	msg := fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","model":"sim","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		id, strings.Repeat("x", min(out, 64)), in, out, in+out)
	return answer(r, http.StatusOK, h, msg), nil
}

// headers sets OpenAI's rate-limit headers from the buckets as they are
// now. m.mu is held.
func (m *member) headers(h http.Header) {
	for _, l := range []struct {
		name string
		b    *bucket
	}{{"Requests", &m.req}, {"Tokens", &m.tok}} {
		h.Set("X-Ratelimit-Limit-"+l.name, strconv.FormatInt(int64(l.b.limit), 10))
		h.Set("X-Ratelimit-Remaining-"+l.name, strconv.FormatInt(int64(math.Floor(max(l.b.level, 0))), 10))
		h.Set("X-Ratelimit-Reset-"+l.name, l.b.full().Round(time.Millisecond).String())
	}
}

// answer returns a response to r with status, header h and body.
func answer(r *http.Request, status int, h http.Header, body string) *http.Response {
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// memberStats are a member's counters at the end of a run.
type memberStats struct {
	Name       string
	Admitted   int
	Tokens     int // the cost of the requests admitted
	Rejected   int
	Canceled   int
	MinLevel   [2]float64 // the lowest level each bucket (requests, tokens) reached
	Admissions []admission
}

// levelsAt returns what m's buckets held at at, requests and tokens, by
// replaying its admissions from full buckets at start.
func (m memberStats) levelsAt(spec memberSpec, start, at time.Time) (reqs, toks float64) {
	req := bucket{limit: float64(spec.RPM), level: float64(spec.RPM), at: start}
	tok := bucket{limit: float64(spec.TPM), level: float64(spec.TPM), at: start}
	for _, a := range m.Admissions {
		if a.At.After(at) {
			break
		}
		req.refill(a.At)
		tok.refill(a.At)
		req.level--
		tok.level -= float64(a.Cost)
	}
	req.refill(at)
	tok.refill(at)
	return req.level, tok.level
}

// stats returns the member's counters.
func (m *member) stats() memberStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := memberStats{Name: m.spec.Name, Admitted: len(m.admissions), Rejected: m.rejected, Canceled: m.canceled, MinLevel: m.minLevel}
	for _, a := range m.admissions {
		s.Tokens += a.Cost
	}
	s.Admissions = append([]admission(nil), m.admissions...)
	return s
}
