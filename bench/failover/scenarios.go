package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// chunks is the mocks' content chunks per answer, so that "40 of 60
// tokens" means what it says.
const chunks = 60

// The bounds of a pass: the budget from a request's start to the end of
// its answer, and the attempts at the primary, in all and in the first
// earlyWindow after the first one.
const (
	budget       = 45 * time.Second
	maxAttempts  = 6
	earlyWindow  = 1500 * time.Millisecond
	maxEarly     = 2
	fallbackName = "gpt-4o-fallback"
)

// The upstream's 400 bodies, in OpenAI's error shape.
const (
	contextLengthBody = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	contentPolicyBody = `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`
)

// rule is what a scenario's pass asks for.
type rule uint8

const (
	// ruleAnswer: the whole answer (the text, finish_reason stop and,
	// unless the scenario says otherwise, data: [DONE]).
	ruleAnswer rule = iota
	// ruleUpstream400: the upstream's 400 with its body unchanged, after
	// exactly one attempt at the primary and none at the fallback.
	ruleUpstream400
	// ruleNotTheRefusal: as ruleAnswer, but an error that quotes the
	// fallback's refusal of a prefill, which hides the error that broke
	// the stream, is a fail.
	ruleNotTheRefusal
)

// prefillRefusal is what mockllm's refuse-prefill says, as Anthropic's
// models without prefill do.
const prefillRefusal = "does not support assistant message prefill"

// A scenario is one fault at the primary, and what the caller must get
// through the gateway for a pass.
type scenario struct {
	n        int    // its number in the table, from 1
	name     string // what the table calls it, in markdown
	primary  string // the primary's mockllm script
	fallback string // the fallback's mockllm script
	show     string // the primary's script as the table shows it, if shorter

	requests int           // requests sent; 0 means 1
	every    time.Duration // between their starts
	budget   time.Duration // 0 means the 45 s budget

	rule   rule
	checks []check // of behaviour, besides every scenario's (see check)
	body   string  // ruleUpstream400: the body the caller must get
	noDone bool    // a pass needs no data: [DONE]
	model  string  // the model every chunk must name, or "" for any
	usage  bool    // a pass needs the usage chunk
}

// count returns how many requests the scenario sends.
func (sc scenario) count() int { return max(sc.requests, 1) }

// limit returns the scenario's budget.
func (sc scenario) limit() time.Duration {
	if sc.budget > 0 {
		return sc.budget
	}
	return budget
}

// primaryShown returns the primary's script as the table shows it.
func (sc scenario) primaryShown() string {
	if sc.show != "" {
		return sc.show
	}
	return sc.primary
}

// scenarios are the suite. A fault without "once" lasts for every
// attempt; the cuts and pauses mid-stream happen once, as a network's
// do, so that a continuation at the primary could succeed.
//
// Each lists its checks of behaviour: a short rate limit is waited for at
// the primary, not fled; a failure once is retried there; a silent
// primary is left after one attempt; a slow first token is not waited
// for; a primary that is back is used again.
var scenarios = []scenario{
	{n: 1, name: "429 with `Retry-After: 2`, once", primary: "429:retry-after=2,ok", fallback: "ok",
		checks: []check{primaryAtLeast(2), spaced(1800 * time.Millisecond), fallbackTimes(0)}},
	{n: 2, name: "429 with no delay, every attempt", primary: "429", fallback: "ok"},
	{n: 3, name: "500 once", primary: "500,ok", fallback: "ok", checks: []check{primaryAtLeast(2), fallbackTimes(0)}},
	{n: 4, name: "503 every attempt", primary: "503", fallback: "ok"},
	{n: 5, name: "reset before the headers, once", primary: "reset,ok", fallback: "ok", checks: []check{primaryAtLeast(2), fallbackTimes(0)}},
	{n: 6, name: "no answer for 120 s: every attempt's headers wait 120 s", primary: "slow-headers=120s", fallback: "ok", budget: 130 * time.Second,
		checks: []check{primaryAtMost(1), within(100 * time.Second)}},
	{n: 7, name: "headers at once, first token after 20 s", primary: "ok:first-token-delay=20s", fallback: "ok",
		checks: []check{within(15 * time.Second)}},
	{n: 8, name: "stream cut (reset) after 40 of 60 tokens, once", primary: "reset-after=40,ok", fallback: "ok"},
	{n: 9, name: "stream silent after 20 tokens for 30 s, then the rest, once", primary: "stall-after=20:resume=30s,ok", fallback: "ok"},
	{n: 10, name: "a malformed event after 30 of 60 tokens, then the rest, once", primary: "malformed-after=30,ok", fallback: "ok"},
	{n: 11, name: "no `[DONE]` (finish_reason and usage sent)", primary: "no-done", fallback: "ok", noDone: true},
	{n: 12, name: "400 `context_length_exceeded`", primary: "400:body=" + contextLengthBody, fallback: "ok",
		show: `400:body={"error":{…,"code":"context_length_exceeded"}}`, checks: []check{primaryAtMost(1), fallbackTimes(1)}},
	{n: 13, name: "400 `content_policy_violation`", primary: "400:body=" + contentPolicyBody, fallback: "ok",
		show: `400:body={"error":{…,"code":"content_policy_violation"}}`, rule: ruleUpstream400, body: contentPolicyBody},
	{n: 14, name: "as 8, but the primary 503s after the cut, and the fallback refuses an assistant prefill", primary: "reset-after=40,503", fallback: "ok:refuse-prefill",
		rule: ruleNotTheRefusal},
	{n: 15, name: "primary down 60 s (connections refused), 20 requests 4 s apart", primary: "refuse:60s,ok", fallback: "ok",
		requests: 20, every: 4 * time.Second, checks: []check{primaryAtMost(3), backAfter(60 * time.Second)}},
	{n: 16, name: "503 every attempt; the caller must see the fallback's model and usage", primary: "503", fallback: "ok",
		model: fallbackName, usage: true},
}

// backAfter checks that a request sent two of the scenario's intervals
// after the primary came back, at outage, was answered by the primary.
func backAfter(outage time.Duration) check {
	return check{"the primary's answer, back from its outage", func(sc scenario, i int, _ result, a attempts) bool {
		return time.Duration(i)*sc.every < outage+2*sc.every || a.fallback == 0
	}}
}

// A configuration is a column of the table: the scenarios under serve's
// defaults plus some flags, such as --continuation prefill.
type configuration struct {
	name  string   // the column's heading
	flags []string // added to outlast serve's command line
	only  []int    // the scenarios it runs, by number; nil for all
}

// configurations are the table's columns, in order. The first is serve
// as a new user runs it.
var configurations = []configuration{
	{name: "defaults"},
	{name: "defaults + `--continuation prefill`", flags: []string{"--continuation", "prefill"}},
	// As serve's defaults are at OpenAI's own API and Azure OpenAI,
	// whose models answer a prefill: a stream is not carried on.
	{name: "defaults + `--continuation off`", flags: []string{"--continuation", "off"}},
}

// runs reports whether the configuration runs scenario n.
func (c configuration) runs(n int) bool {
	return c.only == nil || slices.Contains(c.only, n)
}

// fullText is the whole answer the mocks give in n chunks: the fox
// sentence's words, repeated, as mockllm's documentation says.
func fullText(n int) string {
	words := strings.Fields("The quick brown fox jumps over the lazy dog.")
	out := make([]string, n)
	for i := range out {
		out[i] = words[i%len(words)]
	}
	return strings.Join(out, " ")
}

// requestBody is request i's body, as the openai package sends
// chat.completions.create's arguments: the model, a stream with usage,
// and one user message, which names the request.
func requestBody(i int) string {
	return fmt.Sprintf(`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say the sentence about the fox. (request %d)"}]}`, i+1)
}
