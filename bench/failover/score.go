package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// An outcome is how a cell scored, worst first, so that the worst of
// several is the least.
type outcome uint8

const (
	// fail: a truncated answer presented as complete, the budget
	// exceeded, or too many attempts at the primary.
	fail outcome = iota
	// safe: no pass, but a bounded, clean error within the budget: an
	// HTTP error status, a stream that ends with an error event, or a
	// connection the client sees break.
	safe
	// partial: what the scenario asks for, within the budget and the
	// bounds on attempts, but a check of how it was got failed (see
	// check), as the public benchmark grades it.
	partial
	// pass: what the scenario asks for, within the budget and the bounds
	// on attempts, and every one of its checks holds.
	pass
)

var outcomeNames = [...]string{fail: "fail", safe: "safe", partial: "partial", pass: "pass"}

func (o outcome) String() string { return outcomeNames[o] }

// parseOutcome reads an outcome's name.
func parseOutcome(s string) (outcome, bool) {
	for o, n := range outcomeNames {
		if n == s {
			return outcome(o), true
		}
	}
	return fail, false
}

// attempts are one request's attempts, as the scoring needs them.
type attempts struct {
	primary  []time.Time // when each attempt at the primary began, in order
	fallback int         // attempts at the fallback
	known    bool        // false when nothing could tell them
}

// early counts the attempts at the primary in the earlyWindow from the
// first, the first included.
func (a attempts) early() int {
	n := 0
	for _, t := range a.primary {
		if t.Sub(a.primary[0]) <= earlyWindow {
			n++
		}
	}
	return n
}

// A check is one of a scenario's checks of behaviour: what a caller, or
// the operator who set the fallback up, expects of how the answer was
// got, beyond the answer itself. A pass needs every one; an answer with a
// check that fails is partial.
type check struct {
	name string                                              // what it asks, as a cell says it when it fails
	ok   func(sc scenario, i int, r result, a attempts) bool // of request i
}

// inAnyWindow is the most attempts at the primary in any earlyWindow.
func (a attempts) inAnyWindow() int {
	most := 0
	for i, t := range a.primary {
		n := 0
		for _, u := range a.primary[i:] {
			if u.Sub(t) <= earlyWindow {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// everyScenario are the checks of every scenario: a caller's retries
// spaced as the public benchmark asks.
var everyScenario = []check{
	{fmt.Sprintf("at most %d attempts at the primary in any %.1f s", maxEarly, earlyWindow.Seconds()), func(_ scenario, _ int, _ result, a attempts) bool {
		return a.inAnyWindow() <= maxEarly
	}},
}

// primaryAtLeast checks that the primary was tried n times.
func primaryAtLeast(n int) check {
	return check{fmt.Sprintf("at least %s at the primary", attemptCount(n)), func(_ scenario, _ int, _ result, a attempts) bool { return len(a.primary) >= n }}
}

// primaryAtMost checks that the primary was tried at most n times.
func primaryAtMost(n int) check {
	return check{fmt.Sprintf("at most %s at the primary", attemptCount(n)), func(_ scenario, _ int, _ result, a attempts) bool { return len(a.primary) <= n }}
}

// fallbackTimes checks that the fallback was tried n times.
func fallbackTimes(n int) check {
	return check{fmt.Sprintf("%s at the fallback", attemptCount(n)), func(_ scenario, _ int, _ result, a attempts) bool { return a.fallback == n }}
}

// attemptCount says n attempts in words.
func attemptCount(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// within checks that the answer came within d of the request's start.
func within(d time.Duration) check {
	return check{fmt.Sprintf("the answer within %.0f s", d.Seconds()), func(_ scenario, _ int, r result, _ attempts) bool { return r.elapsed <= d }}
}

// spaced checks that the primary's second attempt came at least d after
// its first.
func spaced(d time.Duration) check {
	return check{fmt.Sprintf("the second attempt at the primary at least %.1f s after the first", d.Seconds()), func(_ scenario, _ int, _ result, a attempts) bool {
		return len(a.primary) >= 2 && a.primary[1].Sub(a.primary[0]) >= d
	}}
}

// A verdict is a request's outcome and, unless it passed, why.
type verdict struct {
	outcome outcome
	why     string
}

// judge scores request i of sc from what its caller got and the attempts
// the gateway made for it.
func judge(sc scenario, i int, r result, a attempts) verdict {
	switch {
	case !a.known:
		return verdict{fail, "no record of its attempts"}
	case r.overBudget || r.elapsed > sc.limit():
		return verdict{fail, fmt.Sprintf("over the %.0f s budget", sc.limit().Seconds())}
	case len(a.primary) > maxAttempts:
		return verdict{fail, fmt.Sprintf("%d attempts at the primary, more than %d", len(a.primary), maxAttempts)}
	case a.early() > maxEarly:
		return verdict{fail, fmt.Sprintf("%d attempts at the primary in its first %.1f s, more than %d", a.early(), earlyWindow.Seconds(), maxEarly)}
	}
	v := rules[sc.rule](sc, r, a)
	if v.outcome != pass {
		return v
	}
	var failed []string
	for _, c := range append(everyScenario[:len(everyScenario):len(everyScenario)], sc.checks...) {
		if !c.ok(sc, i, r, a) {
			failed = append(failed, c.name)
		}
	}
	if len(failed) > 0 {
		return verdict{partial, "not " + strings.Join(failed, ", not ")}
	}
	return v
}

// rules judge what the caller got, once the budget and the attempts
// are within bounds, by the scenario's rule.
var rules = [...]func(scenario, result, attempts) verdict{
	ruleAnswer:        judgeAnswer,
	ruleUpstream400:   judge400,
	ruleNotTheRefusal: judgeNotTheRefusal,
}

// judgeNotTheRefusal is judgeAnswer, but a caller told of the fallback's
// refusal of a prefill, in place of the error that broke its stream,
// fails.
func judgeNotTheRefusal(sc scenario, r result, a attempts) verdict {
	if strings.Contains(r.errorText, prefillRefusal) || strings.Contains(r.body, prefillRefusal) {
		return verdict{fail, "the error is the fallback's refusal of the prefill, not the break"}
	}
	return judgeAnswer(sc, r, a)
}

// judgeAnswer scores a scenario that the caller must get the whole
// answer of.
func judgeAnswer(sc scenario, r result, _ attempts) verdict {
	missing := r.missing(sc)
	if missing == "" {
		return verdict{pass, ""}
	}
	if why, ok := r.failure(); ok {
		return verdict{safe, why}
	}
	// The stream ended cleanly, with no error the caller could see.
	return verdict{fail, "ended cleanly with " + missing}
}

// judge400 scores a scenario whose upstream refuses the request for good:
// the caller must get that refusal, unchanged, from one attempt, and the
// fallback must not be asked to answer what the primary refused.
func judge400(sc scenario, r result, a attempts) verdict {
	switch {
	case r.status == 400 && r.body == sc.body && len(a.primary) == 1 && a.fallback == 0:
		return verdict{pass, ""}
	case r.status == 400 && r.body != sc.body:
		return verdict{safe, "the upstream's 400 with another body"}
	case r.status == 400:
		return verdict{safe, fmt.Sprintf("the upstream's 400 after %d attempts at the primary and %d at the fallback", len(a.primary), a.fallback)}
	}
	if why, ok := r.failure(); ok {
		return verdict{safe, why}
	}
	return verdict{fail, "an answer where the upstream refused the request"}
}

// missing returns what the caller lacks of a pass under sc's rule, or ""
// if nothing.
func (r result) missing(sc scenario) string {
	want := fullText(chunks)
	switch {
	case r.status != 200:
		return fmt.Sprintf("status %d", r.status)
	case r.errorEvent:
		return "an error event"
	case r.cut:
		return "a broken connection"
	case r.text != want && r.chunks < chunks:
		return fmt.Sprintf("%d of %d chunks", r.chunks, chunks)
	case r.text != want:
		return "another text"
	case r.finish != "stop":
		return fmt.Sprintf("finish_reason %q, not stop", r.finish)
	case !r.done && !sc.noDone:
		return "no [DONE]"
	case sc.model != "" && r.model != sc.model:
		return fmt.Sprintf("model %q, not %q", r.model, sc.model)
	case sc.usage && !r.usage:
		return "no usage chunk"
	}
	return ""
}

// failure returns the clean error the caller saw, if it saw one: an HTTP
// error status, an error event, or a connection that broke.
func (r result) failure() (string, bool) {
	kind := ""
	if r.kind != "" {
		kind = " " + r.kind
	}
	switch {
	case r.status != 0 && r.status != 200:
		// The status and kind are in the cell already.
		return "an error status", true
	case r.errorEvent:
		why := fmt.Sprintf("an error event%s after %d of %d chunks", kind, r.chunks, chunks)
		if m := errorMessage(r.errorText); m != "" {
			why += ": " + m // why the gateway did not carry it on, when it says
		}
		return why, true
	case r.cut && r.status == 0:
		return "no response: " + r.err, true
	case r.cut:
		return fmt.Sprintf("the connection broke after %d of %d chunks", r.chunks, chunks), true
	}
	return "", false
}

// worst returns the least of the verdicts' outcomes, which a scenario of
// several requests scores: it passes only if they all pass.
func worst(vs []verdict) outcome {
	o := pass
	for _, v := range vs {
		o = min(o, v.outcome)
	}
	return o
}

// errorMessage returns the message of an error event's data, made fit
// for a table's cell, or "".
func errorMessage(data string) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &e) != nil {
		return ""
	}
	m := strings.NewReplacer("|", "/", "\n", " ").Replace(e.Error.Message)
	if r := []rune(m); len(r) > 200 {
		m = string(r[:200]) + "…"
	}
	return m
}
