package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
)

// A caller makes one logical request for one client process and reports
// whether it got a whole answer.
type caller func(ctx context.Context) error

// A policy is one way a client process retries, built from its library's
// own code. client is called once per client process, so each process has
// its own budget, gate and state, as separate processes would.
type policy struct {
	Name   string // the table's row
	Group  string // baseline, defaults, matched, peers' limits, outlast, fallback or limit
	Config string // the configuration, in one line
	client func(b build, rt http.RoundTripper) caller
}

// build is what a policy needs to know of the scenario.
type build struct {
	sc       *scenario
	layers   int           // 2 in the layers shape: every policy nested in a second retrying layer
	attempts int           // the attempt budget that outlast's policy has under the deadline
	timeout  time.Duration // per-attempt timeout of the tuned configurations, or 0
	outlast  *outlast.Policy
	jittered *outlast.Policy
	// shared is what every client of the shared topology holds in
	// common, as requests through one gateway do: one admission
	// controller and one gate of K slots.
	shared struct {
		admission *outlast.Admission
		gate      *gate.Gate
		// With --fallback, the same for the fallback provider: one
		// admission controller and one gate of its K/2 slots.
		fallbackAdmission *outlast.Admission
		fallbackGate      *gate.Gate
	}
}

func newBuild(sc *scenario) build {
	b := build{sc: sc, layers: 1, timeout: sc.attemptTimeout()}
	if sc.Shape == "layers" {
		b.layers = 2
	}
	b.outlast = outlastPolicy(sc)
	j := *b.outlast
	j.Jitter = outlast.Jitter{Spread: 0.25}
	j.RetryAfter = outlast.RetryAfterAtLeast
	b.jittered = &j
	b.attempts = attemptBudget(sc, b.outlast)
	b.shared.admission = &outlast.Admission{MaxLimit: sc.Slots}
	b.shared.gate = gate.New(sc.Slots, 1<<20)
	if k := sc.FallbackSlots(); k > 0 {
		b.shared.fallbackAdmission = &outlast.Admission{MaxLimit: k}
		b.shared.fallbackGate = gate.New(k, 1<<20)
	}
	return b
}

// outlastPolicy is the README's policy scaled to the scenario's deadline:
// its waits (15 s … 240 s) and 60 s reserve are made for deadlines of ten
// minutes and more, and under a 60 s deadline a 60 s reserve allows no
// retry at all. The rule, fixed before any run and not fitted to the seeds:
//   - waits double from 2 s up to max(16 s, deadline/4), and the last one
//     repeats while it fits;
//   - the reserve is the time an attempt needs to finish, five median
//     service times (10 s here, beyond the service's p99.99), at most half
//     the deadline.
func outlastPolicy(sc *scenario) *outlast.Policy {
	ceiling := max(16*time.Second, sc.Deadline/4)
	waits := outlast.Exponential(2*time.Second, ceiling, 8)
	for len(waits) > 1 && waits[len(waits)-2] == ceiling {
		waits = waits[:len(waits)-1] // the last wait repeats anyway
	}
	reserve := min(5*sc.Median, sc.Deadline/2)
	if sc.Reserve > 0 {
		reserve = sc.Reserve
	}
	return &outlast.Policy{Waits: waits, Reserve: reserve}
}

// attemptBudget is the most attempts p allows a request under the
// scenario's deadline, when every attempt fails as fast as the provider
// can fail it. The tuned peers get the same budget.
func attemptBudget(sc *scenario, p *outlast.Policy) int {
	t, n := time.Duration(0), 1
	for {
		t += sc.RejectAfter
		w := p.Waits[min(n, len(p.Waits))-1]
		if sc.Deadline-(t+w) < p.Reserve {
			return n
		}
		t += w
		n++
	}
}

// longestWait is outlast's longest wait, the tuned peers' longest too.
func (b build) longestWait() time.Duration { return b.outlast.Waits[len(b.outlast.Waits)-1] }

// perClient is one client's share of slots, rounded up: what a client
// process that cannot know the others' load bounds its own by.
func (b build) perClient(slots int) int { return (slots + b.sc.Clients - 1) / b.sc.Clients }

// policies returns every policy of the comparison, in the table's order.
func policies() []policy {
	return []policy{
		{"no retry", "baseline", "openai-go, WithMaxRetries(0)", noRetry},
		{"openai-go", "defaults", "v3.98.0: 2 retries, 0.5 s doubling to 8 s, −25 % jitter, Retry-After ≤ 2 min", openaiDefaults},
		{"anthropic-sdk-go", "defaults", "v2.15.0: 2 retries, 0.5 s doubling to 8 s, −25 % jitter, any Retry-After", anthropicDefaults},
		{"go-retryablehttp", "defaults", "v0.7.8 under openai-go: 4 retries, 1 s doubling to 30 s, Retry-After on 429/503", retryableDefaults},
		{"failsafe-go", "defaults", "v0.9.8 failsafehttp under openai-go: 2 retries, no delay but Retry-After", failsafeDefaults},
		{"backoff/v5", "defaults", "v5.0.3 Retry around openai-go: 0.5 s ×1.5 ±50 % to 60 s, 15 min, Retry-After", backoffDefaults},
		{"openai-go, matched", "matched", "outlast's attempt budget as MaxRetries", openaiMatched},
		{"anthropic-sdk-go, matched", "matched", "outlast's attempt budget as MaxRetries", anthropicMatched},
		{"go-retryablehttp, matched", "matched", "outlast's budget; 2 s doubling to outlast's longest wait", retryableMatched},
		{"failsafe-go, matched", "matched", "outlast's budget; WithBackoff(2 s, outlast's longest wait)", failsafeMatched},
		{"backoff/v5, matched", "matched", "outlast's budget as WithMaxTries; 2 s ×2 ±50 % to outlast's longest wait", backoffMatched},
		{"failsafe-go, breaker + retry", "peers' limits", "failsafe-go, matched, around a circuitbreaker per client: an error, 429 or 5xx fails; WithFailureThresholdRatio(3, 5), WithDelay(30 s), Retry-After as the delay", failsafeBreaker},
		{"failsafe-go, adaptive limiter + retry", "peers' limits", "failsafe-go, matched, around an adaptivelimiter per client: WithLimits(1, 100, 20), WithRecentWindow(1 s, 30 s, 50), WithBaselineWindow(10), WithQueueing(2, 3)", failsafeLimiter},
		{"openai-go, WithMaxRetryDelay", "peers' limits", "openai-go, matched, with WithMaxRetryDelay(outlast's longest wait): a longer Retry-After ends the retries", openaiMaxDelay},
		{"outlast", "outlast", "seed 000 scaled to the deadline: waits from 2 s doubling, reserve 5 × median service", outlastPlain},
		{"outlast, jitter", "outlast", "the same, Jitter{Spread: 0.25}, Retry-After only lengthened", outlastJitter},
		{"outlast, jitter + gate", "outlast", "the same, and a per-client gate of ⌈K/clients⌉ slots", outlastGated},
		{"outlast, admission", "outlast", "outlast, jitter, and an Admission per client (its limit ending at ⌈K/clients⌉, " + fleetAdmissionConfig + ")", outlastAdmission},
		{"outlast, shared", "outlast", "outlast, jitter, with one Admission and one gate of K slots for all clients, as behind one gateway", outlastShared},
		{"outlast, admission + budget", "outlast", "outlast, admission, and Admission.RetryBudget 0.1 per client", outlastBudget},
	}
}

// fallbackPolicies are the rows that use the fallback provider, run with
// --fallback only, after policies' rows. The other rows use the primary
// alone, with the fallback or without it.
func fallbackPolicies() []policy {
	return []policy{
		{"outlast, fallback", "fallback", "outlast, shared for the primary, and one Admission and one gate of K/2 for the fallback, under one outlast.Fallback per client over the two, PreferPrimary: a request waits for the primary while its next chance fits", outlastFallbackShared},
		{"outlast, fallback, prefer available", "fallback", "outlast, fallback, with PreferAvailable, the default: a request never waits at the primary while its Admission holds it down (it probes when a probe is due, else leaves at once), and leaves after 3 failed attempts of its own", outlastFallbackAvailable},
		{"outlast, fallback, per process", "fallback", "outlast, admission for the primary, and an Admission per client for the fallback (its limit ending at ⌈(K/2)/clients⌉, " + fleetAdmissionConfig + "), under one outlast.Fallback per client, PreferPrimary", outlastFallbackPerProcess},
		{"LiteLLM's rule", "fallback", "this benchmark's code, after LiteLLM's docs (LiteLLM is Python): go-retryablehttp, matched, at the primary; once its retries are spent, go-retryablehttp, matched, at the fallback; no cooldown", litellmRule},
	}
}

// available returns the rows a scenario can run: policies', and with
// --fallback fallbackPolicies' after them.
func available(sc *scenario) []policy {
	all := policies()
	if sc.Fallback {
		all = append(all, fallbackPolicies()...)
	}
	return all
}

// oracleName is the row of the physical limit, which runs no client code.
const oracleName = "oracle (limit)"

// The SDKs' requests.

const (
	baseURL     = "http://" + primaryHost + "/v1/"
	fallbackURL = "http://" + fallbackHost + "/v1/"
)

func newOpenAI(hc *http.Client, retries int, perAttempt time.Duration, extra ...option.RequestOption) openai.Client {
	opts := []option.RequestOption{
		option.WithBaseURL(baseURL),
		option.WithAPIKey("sk-sim"),
		option.WithHTTPClient(hc),
	}
	if retries >= 0 {
		opts = append(opts, option.WithMaxRetries(retries))
	}
	if perAttempt > 0 {
		opts = append(opts, option.WithRequestTimeout(perAttempt))
	}
	return openai.NewClient(append(opts, extra...)...)
}

func chat(c openai.Client) caller {
	return func(ctx context.Context) error {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		return err
	}
}

func newAnthropic(hc *http.Client, retries int, perAttempt time.Duration) anthropic.Client {
	opts := []aoption.RequestOption{
		aoption.WithBaseURL("http://" + primaryHost + "/"),
		aoption.WithAPIKey("sk-ant-sim"),
		aoption.WithHTTPClient(hc),
	}
	if retries >= 0 {
		opts = append(opts, aoption.WithMaxRetries(retries))
	}
	if perAttempt > 0 {
		opts = append(opts, aoption.WithRequestTimeout(perAttempt))
	}
	return anthropic.NewClient(opts...)
}

func message(c anthropic.Client) caller {
	return func(ctx context.Context) error {
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "m",
			MaxTokens: 256,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
		})
		return err
	}
}

// defaultRetries asks an SDK for its own default number of retries.
const defaultRetries = -1

func noRetry(b build, rt http.RoundTripper) caller {
	return chat(newOpenAI(&http.Client{Transport: rt}, 0, 0))
}

// The SDKs. In the layers shape each sits on go-retryablehttp at its
// defaults, the usual way a second retrying layer creeps in.

func sdkTransport(b build, rt http.RoundTripper, matched bool) *http.Client {
	if b.layers < 2 {
		return &http.Client{Transport: rt}
	}
	return retryable(b, rt, matched).StandardClient()
}

func openaiDefaults(b build, rt http.RoundTripper) caller {
	return chat(newOpenAI(sdkTransport(b, rt, false), defaultRetries, 0))
}

func openaiMatched(b build, rt http.RoundTripper) caller {
	return chat(newOpenAI(sdkTransport(b, rt, true), b.attempts-1, b.timeout))
}

// openaiMaxDelay is openai-go's own limit on waiting: WithMaxRetryDelay
// caps its backoff and, unlike the default's two minutes, refuses a
// Retry-After longer than the cap, returning the error at once rather than
// retrying before the server allows (option.WithMaxRetryDelay, v3.98.0).
// The cap is outlast's longest wait, the most the matched rows ever wait.
func openaiMaxDelay(b build, rt http.RoundTripper) caller {
	maxDelay := option.WithMaxRetryDelay(b.longestWait())
	return chat(newOpenAI(sdkTransport(b, rt, true), b.attempts-1, b.timeout, maxDelay))
}

func anthropicDefaults(b build, rt http.RoundTripper) caller {
	return message(newAnthropic(sdkTransport(b, rt, false), defaultRetries, 0))
}

func anthropicMatched(b build, rt http.RoundTripper) caller {
	return message(newAnthropic(sdkTransport(b, rt, true), b.attempts-1, b.timeout))
}

// go-retryablehttp, as the SDK's HTTP client with the SDK's retries off.

func retryable(b build, rt http.RoundTripper, matched bool) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.Logger = nil // its default logs every retry to stderr
	c.HTTPClient = &http.Client{Transport: rt}
	if matched {
		c.RetryMax = b.attempts - 1
		c.RetryWaitMin, c.RetryWaitMax = 2*time.Second, b.longestWait()
		c.HTTPClient.Timeout = b.timeout
	}
	return c
}

// retryableStack is go-retryablehttp under openai-go, in b.layers layers,
// at the primary.
func retryableStack(b build, rt http.RoundTripper, matched bool) caller {
	return retryableAt(b, rt, matched, baseURL)
}

// retryableAt is retryableStack with openai-go pointed at url.
func retryableAt(b build, rt http.RoundTripper, matched bool, url string) caller {
	for range b.layers {
		rt = retryable(b, rt, matched).StandardClient().Transport
	}
	return chat(newOpenAI(&http.Client{Transport: rt}, 0, 0, option.WithBaseURL(url)))
}

func retryableDefaults(b build, rt http.RoundTripper) caller { return retryableStack(b, rt, false) }
func retryableMatched(b build, rt http.RoundTripper) caller  { return retryableStack(b, rt, true) }

// failsafe-go's failsafehttp, as the SDK's transport with the SDK's retries
// off.

// failsafeStack builds each layer's policies: the retry policy outermost,
// then what inner builds, if not nil, then the per-attempt timeout, in
// the order failsafe-go's docs recommend (policies.md, "Composition
// Recommendations": retry, then circuit breaker or limiter, then timeout).
// inner is called once per layer, so that each client process, and each
// layer of it, has its own breaker or limiter.
func failsafeStack(b build, rt http.RoundTripper, matched bool, inner func() failsafe.Policy[*http.Response]) caller {
	for range b.layers {
		rp := failsafehttp.NewRetryPolicyBuilder()
		ps := []failsafe.Policy[*http.Response]{}
		if matched {
			rp = rp.WithMaxRetries(b.attempts-1).WithBackoff(2*time.Second, b.longestWait())
		}
		ps = append(ps, rp.Build())
		if inner != nil {
			ps = append(ps, inner())
		}
		if matched && b.timeout > 0 {
			// Inside the retry policy, so that it bounds each attempt.
			ps = append(ps, timeout.New[*http.Response](b.timeout))
		}
		rt = failsafehttp.NewRoundTripper(rt, ps...)
	}
	return chat(newOpenAI(&http.Client{Transport: rt}, 0, 0))
}

var _ retrypolicy.Builder[*http.Response] = failsafehttp.NewRetryPolicyBuilder()

func failsafeDefaults(b build, rt http.RoundTripper) caller { return failsafeStack(b, rt, false, nil) }
func failsafeMatched(b build, rt http.RoundTripper) caller  { return failsafeStack(b, rt, true, nil) }

func failsafeBreaker(b build, rt http.RoundTripper) caller {
	return failsafeStack(b, rt, true, newBreaker)
}

func failsafeLimiter(b build, rt http.RoundTripper) caller {
	return failsafeStack(b, rt, true, newLimiter)
}

// newBreaker is failsafe-go's circuit breaker as its docs configure one
// for HTTP. A breaker's HandleIf replaces its default of failing on any
// error, so the condition keeps that and adds the overload answers, 429
// (http.md, "Handling Retry-After") and the 5xx that failsafehttp's retry
// policy also retries. The thresholds are circuit-breaker.md's examples:
// open when 3 of the last 5 attempts failed, half-open after 30 s, or
// after the Retry-After of the answer that opened it (failsafehttp's
// DelayFunc; without one the fixed delay holds). While it is open, each
// attempt fails with circuitbreaker.ErrOpen without reaching the
// provider, and the retry policy outside it retries that as any error.
func newBreaker() failsafe.Policy[*http.Response] {
	return circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(overloaded).
		WithFailureThresholdRatio(3, 5).
		WithDelay(30 * time.Second).
		WithDelayFunc(failsafehttp.DelayFunc).
		Build()
}

// overloaded reports whether an attempt failed: an error, a 429, or a 5xx
// other than 501, the answers failsafehttp's retry policy retries.
func overloaded(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	code := resp.StatusCode
	return code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented)
}

// newLimiter is failsafe-go's adaptive concurrency limiter as
// adaptive-limiter.md's "Basic Usage" configures it: limits 1 to 100
// starting at 20, a recent window of 1 s to 30 s and at least 50 samples,
// a baseline window of 10, and queueing from 2 × the limit, rejecting all
// past 3 ×. A queued attempt waits for a permit until its request's
// context ends; a rejected one fails with adaptivelimiter.ErrExceeded,
// which the retry policy outside it retries.
func newLimiter() failsafe.Policy[*http.Response] {
	return adaptivelimiter.NewBuilder[*http.Response]().
		WithLimits(1, 100, 20).
		WithRecentWindow(time.Second, 30*time.Second, 50).
		WithBaselineWindow(10).
		WithQueueing(2, 3).
		Build()
}

// cenkalti/backoff v5, around the SDK call with the SDK's retries off,
// classifying errors as its README's example does.

func backoffStack(b build, rt http.RoundTripper, matched bool) caller {
	call := chat(newOpenAI(&http.Client{Transport: rt}, 0, 0))
	for range b.layers {
		call = backoffLayer(b, call, matched)
	}
	return call
}

func backoffDefaults(b build, rt http.RoundTripper) caller { return backoffStack(b, rt, false) }
func backoffMatched(b build, rt http.RoundTripper) caller  { return backoffStack(b, rt, true) }

func backoffLayer(b build, call caller, matched bool) caller {
	return func(ctx context.Context) error {
		var opts []backoff.RetryOption
		if matched {
			eb := backoff.NewExponentialBackOff()
			eb.InitialInterval, eb.Multiplier = 2*time.Second, 2
			eb.MaxInterval = b.longestWait()
			opts = append(opts, backoff.WithBackOff(eb), backoff.WithMaxTries(uint(b.attempts)))
		}
		op := func() (struct{}, error) {
			actx := ctx
			if matched && b.timeout > 0 {
				var cancel context.CancelFunc
				actx, cancel = context.WithTimeout(ctx, b.timeout)
				defer cancel()
			}
			return struct{}{}, backoffClassify(call(actx))
		}
		_, err := backoff.Retry(ctx, op, opts...)
		return err
	}
}

// backoffClassify turns an SDK error into what backoff.Retry acts on: a
// server's delay, a permanent error, or an error to retry.
func backoffClassify(err error) error {
	var ae *openai.Error
	if !errors.As(err, &ae) {
		return err
	}
	code := ae.StatusCode
	if code != http.StatusTooManyRequests && code != http.StatusRequestTimeout && code < 500 {
		return backoff.Permanent(err)
	}
	if ae.Response != nil {
		if s, perr := strconv.Atoi(ae.Response.Header.Get("Retry-After")); perr == nil {
			return backoff.RetryAfter(s)
		}
	}
	return err
}

// outlast: its Transport under openai-go with the SDK's retries off, as the
// README shows.

var discard = slog.New(slog.DiscardHandler)

func outlastStack(b build, rt http.RoundTripper, p *outlast.Policy, g outlast.Gate) caller {
	return outlastAdmitted(b, rt, p, g, nil)
}

func outlastAdmitted(b build, rt http.RoundTripper, p *outlast.Policy, g outlast.Gate, a *outlast.Admission) caller {
	t := &outlast.Transport{Base: rt, Policy: p, Gate: g, Admission: a, Logger: discard, FirstByteTimeout: b.timeout}
	return outlastSDK(b, t, p)
}

// outlastSDK is openai-go over t, outlast's Transport or Fallback, with the
// SDK's retries off, and in the layers shape Do with p around it.
func outlastSDK(b build, t http.RoundTripper, p *outlast.Policy) caller {
	call := chat(newOpenAI(&http.Client{Transport: t}, 0, 0))
	if b.layers < 2 {
		return call
	}
	// The outer layer: Do around the SDK call, naming a failed status to
	// Do as its documentation asks. Only the outermost of the two retries.
	return func(ctx context.Context) error {
		return outlast.Do(ctx, p, func(ctx context.Context) error { return statusOf(call(ctx)) })
	}
}

// statusOf turns the SDK's error for a failed status into outlast's.
func statusOf(err error) error {
	var ae *openai.Error
	if !errors.As(err, &ae) {
		return err
	}
	se := &outlast.StatusError{StatusCode: ae.StatusCode, Err: err}
	if ae.Response != nil {
		se.Header = ae.Response.Header
	}
	return se
}

func outlastPlain(b build, rt http.RoundTripper) caller {
	return outlastStack(b, rt, b.outlast, nil)
}

func outlastJitter(b build, rt http.RoundTripper) caller {
	return outlastStack(b, rt, b.jittered, nil)
}

func outlastGated(b build, rt http.RoundTripper) caller {
	// The client's fair share of the provider: a process that cannot know
	// the others' load bounds its own. The queue is long enough never to
	// refuse; a request's deadline bounds its wait.
	return outlastStack(b, rt, b.jittered, gate.New(b.perClient(b.sc.Slots), 1<<20))
}

// fleetAdmissionConfig describes fleetAdmission's settings, for the rows
// that use it.
const fleetAdmissionConfig = "probe waits 2 s, 4 s, 8 s, a server's delay spread by up to 8 s"

// fleetAdmission is a per-process row's Admission, its limit ending at
// limit, with the README's advice for a fleet of processes that each have
// one: probe waits twice the defaults, since the probes add up across the
// fleet, and a server's delay spread by up to 8 s, since every process is
// told the same not-before time.
func fleetAdmission(sc *scenario, limit int) *outlast.Admission {
	return &outlast.Admission{
		MaxLimit:    limit,
		ProbeWaits:  []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second},
		DelaySpread: 8 * time.Second,
	}
}

func outlastAdmission(b build, rt http.RoundTripper) caller {
	return outlastAdmitted(b, rt, b.jittered, nil, fleetAdmission(b.sc, b.perClient(b.sc.Slots)))
}

func outlastBudget(b build, rt http.RoundTripper) caller {
	a := fleetAdmission(b.sc, b.perClient(b.sc.Slots))
	a.RetryBudget = 0.1
	return outlastAdmitted(b, rt, b.jittered, nil, a)
}

func outlastShared(b build, rt http.RoundTripper) caller {
	return outlastAdmitted(b, rt, b.jittered, b.shared.gate, b.shared.admission)
}

// The fallback rows, with --fallback: a second provider of K/2 slots at
// fallbackHost, never down.

// outlastFallback is outlast.Fallback over two Transports, each with the
// jittered policy and its own gate and Admission (pg and pa for the
// primary, fg and fa for the fallback), under openai-go with the SDK's
// retries off. Rewrite points the fallback's request at fallbackHost.
func outlastFallback(b build, rt http.RoundTripper, prefer outlast.Preference, pg, fg outlast.Gate, pa, fa *outlast.Admission) caller {
	upstream := func(name string, g outlast.Gate, a *outlast.Admission) *outlast.Transport {
		return &outlast.Transport{Base: rt, Name: name, Policy: b.jittered, Gate: g, Admission: a, Logger: discard, FirstByteTimeout: b.timeout}
	}
	f := &outlast.Fallback{
		Upstreams: []*outlast.Transport{upstream(primaryHost, pg, pa), upstream(fallbackHost, fg, fa)},
		Rewrite:   toFallback,
		Prefer:    prefer,
	}
	return outlastSDK(b, f, b.jittered)
}

// toFallback points a request at the fallback provider.
func toFallback(r *http.Request, _ int) (*http.Request, error) {
	r.URL.Host, r.Host = fallbackHost, fallbackHost
	return r, nil
}

// outlastFallbackShared is the shared topology with a fallback: every
// client's Fallback holds the primary's one Admission and gate of K, and
// the fallback's one Admission and gate of K/2, as behind one gateway.
func outlastFallbackShared(b build, rt http.RoundTripper) caller {
	s := &b.shared
	return outlastFallback(b, rt, outlast.PreferPrimary, s.gate, s.fallbackGate, s.admission, s.fallbackAdmission)
}

func outlastFallbackAvailable(b build, rt http.RoundTripper) caller {
	s := &b.shared
	return outlastFallback(b, rt, outlast.PreferAvailable, s.gate, s.fallbackGate, s.admission, s.fallbackAdmission)
}

// outlastFallbackPerProcess is outlast, admission with a fallback: each
// client process has its own Fallback over its own two Admissions, their
// limits ending at its share of each provider's slots, and no gate.
func outlastFallbackPerProcess(b build, rt http.RoundTripper) caller {
	pa, fa := fleetAdmission(b.sc, b.perClient(b.sc.Slots)), fleetAdmission(b.sc, b.perClient(b.sc.FallbackSlots()))
	return outlastFallback(b, rt, outlast.PreferPrimary, nil, nil, pa, fa)
}

// litellmRule is LiteLLM's fallback rule as its docs describe it,
// implemented by this benchmark, since LiteLLM is Python: a request is
// retried at the primary per its retry policy (num_retries), and only
// once those retries are spent does it go to the fallback, retried there
// with the same policy. The retry policy is go-retryablehttp, matched
// (outlast's attempt budget, 2 s doubling to outlast's longest wait,
// Retry-After honoured), its library's own code; the rule is the few
// lines below. It moves on from any failure but the caller's deadline:
// here the only failures are 429s, 503s and the deadline. LiteLLM's
// cooldown of a failing deployment (allowed_fails, cooldown_time) is not
// modelled: each model group here has one deployment.
func litellmRule(b build, rt http.RoundTripper) caller {
	first := retryableAt(b, rt, true, baseURL)
	second := retryableAt(b, rt, true, fallbackURL)
	return func(ctx context.Context) error {
		err := first(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		return second(ctx)
	}
}

// selectFrom returns the policies of all whose names match the filter.
func selectFrom(all []policy, filter string) []policy {
	if filter == "" {
		return all
	}
	var out []policy
	for _, p := range all {
		for _, f := range splitPolicies(filter) {
			if f != "" && strings.HasPrefix(p.Name, f) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// splitPolicies splits a --policies filter at its commas, but not at a
// comma followed by a space, which policy names hold ("outlast, jitter"):
// "outlast, jitter,oracle" is two names.
func splitPolicies(filter string) []string {
	var out []string
	for _, part := range strings.Split(filter, ",") {
		if n := len(out); n > 0 && strings.HasPrefix(part, " ") {
			out[n-1] += "," + part
			continue
		}
		out = append(out, part)
	}
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}
