package main

import (
	"strings"
	"testing"
	"time"
)

// whole is a caller's whole answer, in 2 s.
func whole() result {
	return result{elapsed: 2 * time.Second, status: 200, text: fullText(chunks), chunks: chunks, finish: "stop", done: true, model: "gpt-4o", usage: true}
}

// with returns whole changed by f.
func with(f func(*result)) result {
	r := whole()
	f(&r)
	return r
}

// tries are attempts at the primary at these offsets from the first, and
// fallback attempts.
func tries(fallback int, offsets ...time.Duration) attempts {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := attempts{fallback: fallback, known: true}
	for _, d := range offsets {
		a.primary = append(a.primary, t0.Add(d))
	}
	return a
}

// scenarioN returns the suite's scenario n.
func scenarioN(t *testing.T, n int) scenario {
	t.Helper()
	for _, sc := range scenarios {
		if sc.n == n {
			return sc
		}
	}
	t.Fatalf("no scenario %d", n)
	return scenario{}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	once := tries(0, 0)
	for _, tc := range []struct {
		name string
		n    int // the scenario
		r    result
		a    attempts
		want outcome
		why  string // in the verdict's why
	}{
		// The whole answer, in time, from one attempt.
		{"whole", 4, whole(), once, pass, ""},
		// Retries spread out are fine; the fallback may answer.
		{"six attempts spread out", 4, whole(), tries(1, 0, time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 5*time.Second), pass, ""},
		// The bounds on attempts: seven in all, or three in the first
		// 1.5 s, fail even with the whole answer.
		{"seven attempts", 4, whole(), tries(0, 0, time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 5*time.Second, 6*time.Second), fail, "7 attempts at the primary"},
		{"three early", 2, whole(), tries(0, 0, 500*time.Millisecond, 1500*time.Millisecond), fail, "3 attempts at the primary in its first 1.5 s"},
		{"two early, then more", 2, whole(), tries(0, 0, 1400*time.Millisecond, 1600*time.Millisecond), pass, ""},
		// The budget: a whole answer too late fails, as does a request
		// the budget ended; scenario 6 has 130 s.
		{"late answer", 7, with(func(r *result) { r.elapsed = 46 * time.Second }), once, fail, "over the 45 s budget"},
		{"budget ended it", 4, result{elapsed: 45 * time.Second, overBudget: true}, once, fail, "over the 45 s budget"},
		{"scenario 6 in 130 s", 6, with(func(r *result) { r.elapsed = 125 * time.Second }), once, partial, "not the answer within 100 s"},
		// Clean errors are safe: a status, an error event, a cut, no
		// response at all.
		{"503", 4, result{elapsed: time.Second, status: 503, kind: "upstream-down"}, once, safe, "an error status"},
		{"error event", 8, with(func(r *result) {
			r.text, r.chunks, r.errorEvent, r.kind, r.done, r.finish = "x", 40, true, "upstream-broke", false, ""
		}), once, safe, "an error event upstream-broke after 40 of 60 chunks"},
		// The gateway's message says why the stream was not carried on:
		// the cell quotes it, a table's pipes made slashes.
		{"error event with why", 8, with(func(r *result) {
			r.text, r.chunks, r.errorEvent, r.kind, r.done, r.finish = "x", 36, true, "upstream-error", false, ""
			r.errorText = `{"error":{"type":"upstream-error","message":"not continued: a|b"}}`
		}), once, safe, "an error event upstream-error after 36 of 60 chunks: not continued: a/b"},
		{"cut", 8, with(func(r *result) { r.text, r.chunks, r.cut, r.done, r.finish = "x", 40, true, false, "" }), once, safe, "the connection broke after 40 of 60 chunks"},
		{"no response", 5, result{elapsed: time.Second, cut: true, err: "connection reset"}, once, safe, "no response: connection reset"},
		// A truncated answer that ends cleanly fails.
		{"truncated", 8, with(func(r *result) { r.text, r.chunks = fullText(40), 40 }), once, fail, "ended cleanly with 40 of 60 chunks"},
		{"no finish_reason", 8, with(func(r *result) { r.finish = "" }), once, fail, `finish_reason ""`},
		{"no [DONE]", 3, with(func(r *result) { r.done = false }), once, fail, "no [DONE]"},
		// Scenario 11 needs no [DONE]; scenario 10 skips the malformed
		// event.
		{"no [DONE] in 11", 11, with(func(r *result) { r.done = false }), once, pass, ""},
		{"malformed in 10", 10, with(func(r *result) { r.malformed = 1 }), once, pass, ""},
		// Scenario 16 needs the fallback's model and the usage.
		{"16 whole", 16, with(func(r *result) { r.model = fallbackName }), tries(1, 0, 15*time.Second), pass, ""},
		{"16 wrong model", 16, whole(), once, fail, `model "gpt-4o", not "gpt-4o-fallback"`},
		{"16 no usage", 16, with(func(r *result) { r.model, r.usage = fallbackName, false }), once, fail, "no usage chunk"},
		// Scenario 13: the upstream's 400 as it was, from one attempt.
		{"13 the 400", 13, result{elapsed: time.Second, status: 400, body: contentPolicyBody}, once, pass, ""},
		{"13 another body", 13, result{elapsed: time.Second, status: 400, body: `{"error":{}}`}, once, safe, "another body"},
		{"13 retried", 13, result{elapsed: time.Second, status: 400, body: contentPolicyBody}, tries(0, 0, 15*time.Second), safe, "after 2 attempts"},
		{"13 asked the fallback", 13, result{elapsed: time.Second, status: 400, body: contentPolicyBody}, tries(1, 0), safe, "1 at the fallback"},
		{"13 answered", 13, whole(), tries(1, 0), fail, "an answer where the upstream refused"},
		// The answer, with a check of the scenario's failed, is partial:
		// a short rate limit fled to the fallback, a failure once not
		// retried at the primary, a silent primary tried again, a slow
		// first token waited for, retries in a burst.
		{"1 fled", 1, whole(), tries(1, 0), partial, "not at least 2 attempts at the primary"},
		{"1 too soon", 1, whole(), tries(0, 0, time.Second), partial, "not the second attempt at the primary at least 1.8 s after the first"},
		{"1 waited", 1, whole(), tries(0, 0, 2*time.Second), pass, ""},
		{"3 not retried", 3, whole(), tries(1, 0), partial, "not at least 2 attempts at the primary, not 0 attempts at the fallback"},
		{"6 tried thrice", 6, with(func(r *result) { r.elapsed = 93 * time.Second }), tries(1, 0, 31*time.Second, 62*time.Second), partial, "not at most 1 attempt at the primary"},
		{"6 left at once", 6, with(func(r *result) { r.elapsed = 30 * time.Second }), tries(1, 0), pass, ""},
		{"7 waited", 7, with(func(r *result) { r.elapsed = 20 * time.Second }), once, partial, "not the answer within 15 s"},
		{"a burst later", 4, whole(), tries(1, 0, 5*time.Second, 5500*time.Millisecond, 6*time.Second), partial, "not at most 2 attempts at the primary in any 1.5 s"},
		// Attempts nothing could tell fail.
		{"unknown attempts", 15, whole(), attempts{}, fail, "no record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := judge(scenarioN(t, tc.n), 0, tc.r, tc.a)
			if v.outcome != tc.want || !strings.Contains(v.why, tc.why) || (tc.want == pass) != (v.why == "") {
				t.Errorf("got %s %q, want %s with %q", v.outcome, v.why, tc.want, tc.why)
			}
		})
	}
}

// A cell of several requests is as good as its worst.
func TestWorst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vs   []verdict
		want outcome
	}{
		// Every request passed.
		{"all pass", []verdict{{pass, ""}, {pass, ""}}, pass},
		// One safe makes the cell safe.
		{"one safe", []verdict{{pass, ""}, {safe, "x"}, {pass, ""}}, safe},
		// A partial is below a pass, above a safe.
		{"one partial", []verdict{{pass, ""}, {partial, "x"}}, partial},
		{"partial and safe", []verdict{{partial, "x"}, {safe, "y"}}, safe},
		// One fail makes it fail, whatever else.
		{"one fail", []verdict{{safe, "x"}, {fail, "y"}, {pass, ""}}, fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := worst(tc.vs); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// Scenario 14's error must be the break, not the fallback's refusal of
// the prefill, which would hide it.
func TestJudgeNotTheRefusal(t *testing.T) {
	t.Parallel()
	sc := scenario{n: 14, rule: ruleNotTheRefusal}
	a := attempts{primary: []time.Time{time.Unix(0, 0)}, known: true}
	for _, c := range []struct {
		name string
		r    result
		want outcome
	}{
		{"the break", result{status: 200, errorEvent: true, errorText: `{"error":{"message":"upstream primary broke off the stream"}}`}, safe},
		{"the refusal", result{status: 200, errorEvent: true, errorText: `{"error":{"message":"This model does not support assistant message prefill."}}`}, fail},
		{"the refusal as the answer", result{status: 400, body: `{"error":{"message":"This model does not support assistant message prefill."}}`}, fail},
	} {
		if got := judge(sc, 0, c.r, a).outcome; got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
