package outlast

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxRetryAfter is the longest server's delay a [Transport] takes
// as asked, when Transport.MaxRetryAfter is zero: a longer one, such as a
// broken or hostile server's Retry-After of years, is taken as this.
const DefaultMaxRetryAfter = 5 * time.Minute

// maxDelay bounds a parsed delay so that adding it to a time cannot
// overflow; no server means a delay of a century.
const maxDelay = 100 * 365 * 24 * time.Hour

// RetryAfter returns the delay a response's header asks for, and whether
// it asks for one. It reads retry-after-ms (milliseconds, as the OpenAI and
// Anthropic APIs send it) and Retry-After (RFC 9110 §10.2.3: delay-seconds
// or an HTTP-date, measured from now). When both are valid, retry-after-ms
// wins, because it is the more precise. A date in the past is a delay of 0.
// A value that is neither is ignored, never an error: a malformed header
// must not turn a retryable failure into a permanent one.
//
// Decimal values ("1.5") are accepted in both headers, as the SDKs accept
// them. Delays are capped at 100 years.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if d, ok := parseDelay(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d, true
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelay(v, time.Second); ok {
		return d, true
	}
	t, err := http.ParseTime(strings.TrimSpace(v))
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return min(d, maxDelay), true
}

// parseDelay parses a non-negative decimal number of units, of any
// length (RFC 9110's delay-seconds is 1*DIGIT, unbounded), capped at
// maxDelay. It refuses signs, exponents, hex, "Inf" and "NaN", which
// strconv.ParseFloat would otherwise take.
func parseDelay(s string, unit time.Duration) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	dot := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(s)-1:
			dot = true
		default:
			return 0, false
		}
	}
	// s is digits with at most one dot, so ParseFloat's only error is
	// ErrRange, for a number past float64's range (310 digits or more),
	// and then f is +Inf: a valid delay, capped below like any other
	// past maxDelay, not ignored.
	f, err := strconv.ParseFloat(s, 64)
	if (err != nil && !errors.Is(err, strconv.ErrRange)) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	d := f * float64(unit)
	if d >= float64(maxDelay) {
		return maxDelay, true
	}
	return time.Duration(d), true
}

// RateLimitReset returns how long until a response's rate limit lets a
// request through again, when its header says none is left: OpenAI's
// x-ratelimit-remaining-requests: 0 with x-ratelimit-reset-requests (a
// duration such as "6m0s", "1s" or "120ms"), or Anthropic's
// anthropic-ratelimit-requests-remaining: 0 with
// anthropic-ratelimit-requests-reset (an RFC 3339 time). It reports false
// when requests remain, when the header says nothing, or when the reset is
// malformed; a reset in the past is a delay of 0. Delays are capped at 100
// years. An [Admission] paces a key on it before the 429 arrives.
func RateLimitReset(h http.Header, now time.Time) (time.Duration, bool) {
	// Direct map reads with canonical keys: this runs on every success
	// under an Admission, and must not allocate.
	if v := h["X-Ratelimit-Remaining-Requests"]; len(v) > 0 && strings.TrimSpace(v[0]) == "0" {
		if r := h["X-Ratelimit-Reset-Requests"]; len(r) > 0 {
			d, err := time.ParseDuration(strings.TrimSpace(r[0]))
			if err == nil && d >= 0 {
				return min(d, maxDelay), true
			}
		}
	}
	if v := h["Anthropic-Ratelimit-Requests-Remaining"]; len(v) > 0 && strings.TrimSpace(v[0]) == "0" {
		if r := h["Anthropic-Ratelimit-Requests-Reset"]; len(r) > 0 {
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(r[0]))
			if err == nil {
				return min(max(t.Sub(now), 0), maxDelay), true
			}
		}
	}
	return 0, false
}
