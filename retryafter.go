package outlast

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
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
// Anthropic APIs send it; x-ms-retry-after-ms, Azure's, in its place) and
// Retry-After (RFC 9110 §10.2.3: delay-seconds or an HTTP-date, measured
// from now). When both are valid, the milliseconds win, because they are
// the more precise. A date in the past is a delay of 0.
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
	if d, ok := parseDelay(h.Get("X-Ms-Retry-After-Ms"), time.Millisecond); ok {
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
// maxDelay. It refuses signs, exponents, hex, "Inf" and "NaN". The
// arithmetic is exact, in whole nanoseconds: digits past a nanosecond are
// dropped.
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
	whole, frac, _ := strings.Cut(s, ".")
	whole = strings.TrimLeft(whole, "0")
	limit := uint64(maxDelay / unit)
	if len(whole) > 19 {
		return maxDelay, true // past uint64, and far past the cap
	}
	n := uint64(0)
	if whole != "" {
		n, _ = strconv.ParseUint(whole, 10, 64) // digits only, at most 19: it cannot fail
	}
	if n >= limit {
		return maxDelay, true
	}
	d := time.Duration(n) * unit
	for i, place := 0, unit/10; i < len(frac) && place > 0; i, place = i+1, place/10 {
		d += time.Duration(frac[i]-'0') * place
	}
	return min(d, maxDelay), true
}

// RateLimitReset returns how long until a response's rate limit lets a
// request through again, when its header says none is left: OpenAI's
// x-ratelimit-remaining-requests: 0 with x-ratelimit-reset-requests (a
// duration such as "6m0s", "1s" or "120ms", or Azure's bare seconds), or
// Anthropic's anthropic-ratelimit-requests-remaining: 0 with
// anthropic-ratelimit-requests-reset (an RFC 3339 time), read as
// [ReadHeadroom] reads them. It reports false when requests remain, when
// the header says nothing, or when the reset is malformed; a reset in the
// past is a delay of 0. Delays are capped at 100 years. An [Admission]
// paces a key on it before the 429 arrives.
func RateLimitReset(h http.Header, now time.Time) (time.Duration, bool) {
	// Canonical keys, read directly: this runs on every success under
	// an Admission, and must not allocate.
	if first(h, "X-Ratelimit-Remaining-Requests") == "0" {
		if t, ok := resetIn(first(h, "X-Ratelimit-Reset-Requests"), now); ok {
			return t.Sub(now), true
		}
	}
	if first(h, "Anthropic-Ratelimit-Requests-Remaining") == "0" {
		if t, ok := resetAt(first(h, "Anthropic-Ratelimit-Requests-Reset"), now); ok {
			return t.Sub(now), true
		}
	}
	return 0, false
}

// maxRetryInfo bounds how much of a failed response's body is read for
// its delay: an error object with its details is far smaller.
const maxRetryInfo = 16 << 10

// retryInfo returns the delay a failed response's JSON body asks for, as
// Google's APIs (Gemini's among them) send it instead of a Retry-After:
// google.rpc.RetryInfo's retryDelay among the error's details, a
// protobuf Duration such as "45.8s". The body is an error object, or a
// list of them, of which the first counts. It reports false for a body
// that holds no such delay, or one that is malformed or negative.
func retryInfo(body []byte) (time.Duration, bool) {
	type status struct {
		Error struct {
			Details []struct {
				Type       string `json:"@type"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		} `json:"error"`
	}
	var s status
	if err := json.Unmarshal(body, &s); err != nil {
		var list []status
		if json.Unmarshal(body, &list) != nil || len(list) == 0 {
			return 0, false
		}
		s = list[0]
	}
	for _, d := range s.Error.Details {
		if !strings.HasSuffix(d.Type, "google.rpc.RetryInfo") {
			continue
		}
		// A Duration's JSON is seconds with up to nine decimals and an
		// "s": what parseDelay reads, less the unit.
		if v, ok := strings.CutSuffix(d.RetryDelay, "s"); ok {
			return parseDelay(v, time.Second)
		}
	}
	return 0, false
}

// bodyRetryInfo returns the delay that a failed response asks for in its
// JSON body (see retryInfo), for a 429 or 503 whose headers ask for none.
// It reads up to maxRetryInfo bytes of the body and puts them back, so
// that the caller reads the body whole.
func bodyRetryInfo(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable || resp.Body == nil || resp.Body == http.NoBody {
		return 0, false
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.Contains(ct, "json") {
		return 0, false
	}
	stop := closeAfter(resp.Body, failureRead)
	head, err := peekBody(resp, maxRetryInfo)
	stop()
	if err != nil {
		return 0, false
	}
	return retryInfo(decoded(head, resp.Header, maxRetryInfo))
}

// decoded returns head, the start of a body, as its Content-Encoding,
// gzip or deflate, had it before: a request that asked for a coding
// (SDKs ask for gzip) gets its error bodies in it. At most limit bytes
// of it, as far as head goes; head itself for any other coding.
func decoded(head []byte, h http.Header, limit int64) []byte {
	var r io.Reader
	var err error
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(bytes.NewReader(head))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(head))
	default:
		return head
	}
	if err != nil {
		return head
	}
	b, _ := io.ReadAll(io.LimitReader(r, limit)) // a head cut short reads as far as it goes
	return b
}

// peekBody reads up to limit bytes of resp's body and puts them back, so
// that the caller reads the body whole; a read that failed fails again
// where it did.
func peekBody(resp *http.Response, limit int64) ([]byte, error) {
	head, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), errReader{err}, resp.Body), resp.Body}
	return head, err
}

// errReader returns err, if any, where a body's read failed, so that a
// body read again fails where it did.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
