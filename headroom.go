package outlast

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/internal/jsonscan"
)

// A Quota is one of a provider's rate limits as a response's headers state
// it, for the key that sent the request: the window's allowance, what is
// left of it, and when it is whole again. A field the headers did not
// state, or stated as unknown (Azure sends -1), is -1, or the zero time
// for Reset.
type Quota struct {
	// Limit is the window's allowance of requests or tokens.
	Limit int64
	// Remaining is what is left of it.
	Remaining int64
	// Reset is when it is whole again: OpenAI's reset is the time until
	// the limit has refilled fully, Anthropic's the time it has, and
	// Together's limits are per second.
	Reset time.Time
}

// Known reports whether the headers stated what is left.
func (q Quota) Known() bool { return q.Remaining >= 0 }

// Headroom is what a response's headers say is left of its provider's
// rate limits: requests, and tokens as one limit or, as Anthropic also
// states them, input and output apart. A limit the headers do not state
// is not Known. [ReadHeadroom] reads it.
type Headroom struct {
	Requests     Quota
	Tokens       Quota
	InputTokens  Quota
	OutputTokens Quota
}

// resetBy returns h with every reset after latest moved to latest.
func (h Headroom) resetBy(latest time.Time) Headroom {
	for _, q := range []*Quota{&h.Requests, &h.Tokens, &h.InputTokens, &h.OutputTokens} {
		if q.Reset.After(latest) {
			q.Reset = latest
		}
	}
	return h
}

// unknownQuota is a Quota the headers said nothing of.
var unknownQuota = Quota{Limit: -1, Remaining: -1}

// ReadHeadroom reads the rate-limit headers of a response received at
// now, in the forms the providers document:
//
//   - OpenAI and Azure OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens},
//     the reset a duration until the limit has refilled fully, such as
//     "6m0s", "1s" or "12ms" (Azure may send bare seconds, and -1 for a
//     limit it does not report);
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
//     the reset an RFC 3339 time;
//   - Together: x-ratelimit-limit and x-ratelimit-remaining for requests
//     and x-tokenlimit-limit and x-tokenlimit-remaining for tokens, per
//     second. (Its x-ratelimit-reset is not read: other APIs send an
//     epoch time under that name, and a second is the window anyway.)
//
// A value that is not a whole number of at least 0, or a reset that does
// not parse, is left unknown rather than guessed; a reset is at most 100
// years away. Where a response carries two forms, OpenAI's wins over
// Together's, and Anthropic's over both.
func ReadHeadroom(h http.Header, now time.Time) Headroom {
	hr := Headroom{Requests: unknownQuota, Tokens: unknownQuota, InputTokens: unknownQuota, OutputTokens: unknownQuota}
	// Together's, per second.
	readQuota(&hr.Requests, h, "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "", nil, now)
	readQuota(&hr.Tokens, h, "X-Tokenlimit-Limit", "X-Tokenlimit-Remaining", "", nil, now)
	for _, q := range []*Quota{&hr.Requests, &hr.Tokens} {
		if q.Known() {
			q.Reset = now.Add(time.Second)
		}
	}
	// OpenAI's and Azure's.
	readQuota(&hr.Requests, h, "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", resetIn, now)
	readQuota(&hr.Tokens, h, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", resetIn, now)
	// Anthropic's.
	readQuota(&hr.Requests, h, "Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset", resetAt, now)
	readQuota(&hr.Tokens, h, "Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", resetAt, now)
	readQuota(&hr.InputTokens, h, "Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", resetAt, now)
	readQuota(&hr.OutputTokens, h, "Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", resetAt, now)
	return hr
}

// readQuota sets q from one form's three headers, named canonically, if
// the form states what remains; a form without a reset has reset "" and
// read nil. The form replaces what q held, all three fields together.
func readQuota(q *Quota, h http.Header, limit, remaining, reset string, read resetReader, now time.Time) {
	left, ok := count(h, remaining)
	if !ok {
		return
	}
	*q = Quota{Remaining: left, Limit: -1}
	if n, ok := count(h, limit); ok {
		q.Limit = n
	}
	if read != nil {
		if t, ok := read(first(h, reset), now); ok {
			q.Reset = t
		}
	}
}

// A resetReader reads a form's reset value, in a response received at
// now, as the time its limit is whole again.
type resetReader func(v string, now time.Time) (time.Time, bool)

// resetIn reads OpenAI's and Azure's reset: a duration from now (see
// resetDuration).
func resetIn(v string, now time.Time) (time.Time, bool) {
	d, ok := resetDuration(v)
	return now.Add(d), ok
}

// resetAt reads Anthropic's reset, an RFC 3339 time: one already past is
// now, and one past the cap is the cap.
func resetAt(v string, now time.Time) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false
	}
	return now.Add(min(max(t.Sub(now), 0), maxDelay)), true
}

// count reads a header's whole number, at least 0; -1 and anything else
// are not a count.
func count(h http.Header, name string) (int64, bool) {
	v := first(h, name)
	if v == "" || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// first returns a header's first value, without its spaces; the header is
// named canonically, so that reading it needs no allocation.
func first(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// resetDuration reads OpenAI's reset, a Go-style duration such as "6m0s"
// or "12ms", or Azure's bare seconds, such as "1" or "0.5": at least 0,
// and cut to maxDelay.
func resetDuration(v string) (time.Duration, bool) {
	if d, ok := parseDelay(v, time.Second); ok {
		return d, true
	}
	return goDuration(v)
}

// durationUnits are the units of a Go duration, longest names first, so
// that "ms" is not read as "m".
var durationUnits = []struct {
	name string
	unit time.Duration
}{{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"μs", time.Microsecond}, {"ms", time.Millisecond}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}}

// goDuration reads a duration as time.ParseDuration does, without a
// sign, and cut to maxDelay where ParseDuration would overflow.
func goDuration(v string) (time.Duration, bool) {
	switch v {
	case "":
		return 0, false
	case "0":
		return 0, true
	}
	var total time.Duration
	for v != "" {
		n := 0
		for n < len(v) && (v[n] >= '0' && v[n] <= '9' || v[n] == '.') {
			n++
		}
		num := v[:n]
		if num == "" || num == "." {
			return 0, false
		}
		v = v[n:]
		var unit time.Duration
		for _, u := range durationUnits {
			if rest, ok := strings.CutPrefix(v, u.name); ok {
				v, unit = rest, u.unit
				break
			}
		}
		if unit == 0 {
			return 0, false
		}
		// parseDelay wants a digit on each side of a point.
		if num[0] == '.' {
			num = "0" + num
		}
		num = strings.TrimSuffix(num, ".")
		d, ok := parseDelay(num, unit)
		if !ok {
			return 0, false
		}
		total = min(total+d, maxDelay)
	}
	return total, true
}

// bytesPerToken is how many bytes of a request body EstimateTokens counts
// as one token: about four characters of English, as OpenAI's tokenizers
// average, and JSON's own bytes make it an estimate from above.
const bytesPerToken = 4

// EstimateTokens estimates what a request body will count against a
// provider's token limit before it is sent, as providers count it up
// front: the body's input, at a token for each four bytes of it, plus the
// answer's bound, max_tokens (chat completions, Anthropic's Messages),
// max_completion_tokens (chat completions) or max_output_tokens (the
// Responses API), whichever is largest, or defaultOutput when the body
// names none. A body that is not a JSON object is input alone. The
// response's headers then say what the provider counted (ReadHeadroom).
func EstimateTokens(body []byte, defaultOutput int) int {
	input, bound := estimateParts(body, defaultOutput)
	return input + min(bound, math.MaxInt-input)
}

// estimateParts returns the two parts of EstimateTokens: the input, and
// the answer's bound, 0 for a body that is not a JSON object.
func estimateParts(body []byte, defaultOutput int) (input, bound int) {
	input = (len(body) + bytesPerToken - 1) / bytesPerToken
	bound = -1
	s := jsonscan.Scanner{B: body}
	whole := s.Members(func(key, v []byte) {
		switch string(key) {
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			if n, err := strconv.Atoi(string(v)); err == nil && n >= 0 {
				bound = max(bound, n)
			}
		}
	})
	if !whole {
		return input, 0
	}
	if bound < 0 {
		bound = max(defaultOutput, 0)
	}
	return input, bound
}
