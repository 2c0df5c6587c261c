package mockllm

import (
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
	// A request larger than the whole allowance waits for all of it.
	lm = &limiter{l: Limits{Tokens: 100}}
	lm.take("a", 50, t0)
	if ok, wait, _, _ := lm.take("a", 500, t0); ok || wait != 30*time.Second {
		t.Errorf("more than the allowance: got ok %v wait %v; want the wait until it is whole, 30s", ok, wait)
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
