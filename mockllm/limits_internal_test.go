package mockllm

import (
	"net/http"
	"testing"
	"time"
)

// Each key's allowances refill continuously over the window; a request
// that does not fit is told how long until it would, and takes nothing.
func TestLimiter(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	lm := &limiter{l: Limits{Requests: 3, Tokens: 100, Window: time.Minute}}
	ok, wait, reqs, toks := lm.take("a", 40, t0)
	if !ok || wait != 0 || reqs.left != 2 || toks.left != 60 {
		t.Fatalf("first: got ok %v wait %v, %d requests and %d tokens left; want ok, 2 and 60", ok, wait, reqs.left, toks.left)
	}
	// A third of a minute refills a request, and 40 tokens take 24 s.
	if reqs.full != t0.Add(20*time.Second) || toks.full != t0.Add(24*time.Second) {
		t.Errorf("full again: requests at %v, tokens at %v; want +20s and +24s", reqs.full.Sub(t0), toks.full.Sub(t0))
	}
	// 70 tokens need 10 more than the 60 left: 6 s.
	ok, wait, _, toks = lm.take("a", 70, t0)
	if ok || wait != 6*time.Second || toks.left != 60 {
		t.Fatalf("70 tokens: got ok %v wait %v, %d left; want a wait of 6s and nothing taken", ok, wait, toks.left)
	}
	if ok, _, _, toks = lm.take("a", 70, t0.Add(6*time.Second)); !ok || toks.left != 0 {
		t.Errorf("after the wait: got ok %v, %d tokens left; want ok, 0", ok, toks.left)
	}
	// Another key has its own allowances.
	if ok, _, reqs, _ = lm.take("b", 1, t0); !ok || reqs.left != 2 {
		t.Errorf("another key: got ok %v, %d requests left; want ok, 2", ok, reqs.left)
	}
	// Requests run out before tokens do.
	lm = &limiter{l: Limits{Requests: 2, Window: 10 * time.Second}}
	lm.take("a", 1, t0)
	lm.take("a", 1, t0)
	if ok, wait, reqs, _ := lm.take("a", 1, t0); ok || wait != 5*time.Second || reqs.left != 0 {
		t.Errorf("a third request in a 10 s window of 2: got ok %v wait %v; want a wait of 5s", ok, wait)
	}
	// A request larger than the whole allowance never fits, as OpenAI
	// refuses one "too large", full bucket or not, and takes nothing.
	lm = &limiter{l: Limits{Tokens: 100}}
	if ok, wait, _, toks := lm.take("a", 500, t0); ok || wait >= 0 || toks.left != 100 {
		t.Errorf("more than the allowance, from a full one: got ok %v wait %v, %d left; want refused for good, 100 left", ok, wait, toks.left)
	}
	lm.take("a", 50, t0)
	if ok, wait, _, toks := lm.take("a", 500, t0); ok || wait >= 0 || toks.left != 50 {
		t.Errorf("more than the allowance: got ok %v wait %v, %d left; want refused for good, 50 left", ok, wait, toks.left)
	}
	// A request taken and then not served (over capacity) is given back.
	lm = &limiter{l: Limits{Requests: 4, Tokens: 100}}
	lm.take("a", 30, t0)
	lm.refund("a", 30)
	if _, _, reqs, toks := lm.take("a", 0, t0); reqs.left != 3 || toks.left != 100 {
		t.Errorf("after a refund: %d requests and %d tokens left after one more; want 3 and 100", reqs.left, toks.left)
	}
}

// The steps a schedule adds, for an empty script and after a last refuse
// step, are ok as a script writes it, with no Retry-After of any form.
func TestAddedStepsAreOK(t *testing.T) {
	for _, src := range []string{"", "refuse:1s"} {
		sc := Script{}
		if src != "" {
			sc = MustParseScript(src)
		}
		steps := newSchedule(sc, func(bool) error { return nil }, t.Logf).steps
		if got, want := steps[len(steps)-1], MustParseScript("ok").steps[0]; got.fault != want.fault ||
			got.retryAfter != want.retryAfter || got.retryAfterDate != want.retryAfterDate || got.retryAfterMs != want.retryAfterMs {
			t.Errorf("script %q: the added step is %+v, want ok's %+v", src, got, want)
		}
	}
}

// The headers never state a reset before the allowance is whole: a
// client that waits until then finds the room. Anthropic's form is whole
// seconds, rounded up; OpenAI's a duration, rounded up to the
// millisecond.
func TestLimitHeadersResetNotEarly(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	q := quota{limit: 10, left: 0, full: now.Add(1200*time.Millisecond + 300*time.Microsecond)}
	h := http.Header{}
	setLimitHeaders(h, anthropic{}, q, quota{}, now)
	if reset, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-Requests-Reset")); err != nil || reset.Before(q.full) || reset.Sub(q.full) >= time.Second {
		t.Errorf("Anthropic's reset %q, for an allowance whole at %v: want the second after", h.Get("Anthropic-Ratelimit-Requests-Reset"), q.full)
	}
	h = http.Header{}
	setLimitHeaders(h, openAI{}, q, quota{}, now)
	if d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-Requests")); err != nil || now.Add(d).Before(q.full) || d > 1201*time.Millisecond {
		t.Errorf("OpenAI's reset %q, for an allowance whole in 1.2003 s: want 1.201s", h.Get("X-Ratelimit-Reset-Requests"))
	}
}
