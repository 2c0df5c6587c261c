package outlast_test

import (
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// century is RetryAfter's documented cap.
const century = 100 * 365 * 24 * time.Hour

// raNow is the fixed "now" of the Retry-After tests: Saturday 1 March 2025,
// 12:00:00 UTC.
var raNow = time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)

// raCase is one Retry-After test: the two headers, "" meaning absent.
type raCase struct {
	name       string
	retryAfter string // Retry-After
	ms         string // retry-after-ms
	want       time.Duration
	wantOK     bool
}

// raCases is shared by the table test and the fuzzer's seed corpus.
var raCases = []raCase{
	// RFC 9110 §10.2.3 delay-seconds.
	{"seconds", "5", "", 5 * time.Second, true},
	// Zero is a valid delay: "retry now", not "no delay given".
	{"zero seconds", "0", "", 0, true},
	// Decimals are accepted, as the SDKs accept them.
	{"decimal seconds", "1.5", "", 1500 * time.Millisecond, true},
	{"small decimal", "0.001", "", time.Millisecond, true},
	// Leading zeros are still digits.
	{"leading zeros", "007", "", 7 * time.Second, true},
	// retry-after-ms alone, as the OpenAI and Anthropic APIs send it.
	{"ms", "", "1500", 1500 * time.Millisecond, true},
	{"ms decimal", "", "1.5", 1500 * time.Microsecond, true},
	{"ms zero", "", "0", 0, true},
	// Both valid: the more precise retry-after-ms wins.
	{"ms wins", "5", "1500", 1500 * time.Millisecond, true},
	// A zero ms value is valid, so it wins too.
	{"ms zero wins", "5", "0", 0, true},
	// An invalid ms value must not hide a valid Retry-After.
	{"ms letters", "5", "abc", 5 * time.Second, true},
	{"ms negative", "5", "-5", 5 * time.Second, true},
	{"ms empty", "5", "", 5 * time.Second, true},
	// An invalid ms value with no Retry-After is no delay at all.
	{"ms invalid alone", "", "abc", 0, false},

	// HTTP-date, IMF-fixdate form: measured from now.
	{"date future", raNow.Add(30 * time.Second).Format(http.TimeFormat), "", 30 * time.Second, true},
	// A date in the past means "now", not "no delay given".
	{"date past", raNow.Add(-time.Hour).Format(http.TimeFormat), "", 0, true},
	// The date equal to now is a zero delay.
	{"date now", raNow.Format(http.TimeFormat), "", 0, true},
	// The obsolete forms that RFC 9110 §5.6.7 says a recipient must accept.
	{"date RFC 850", "Saturday, 01-Mar-25 12:00:30 GMT", "", 30 * time.Second, true},
	{"date ANSI C", "Sat Mar  1 12:00:30 2025", "", 30 * time.Second, true},
	// Surrounding space is trimmed for dates as for numbers.
	{"date padded", " Sat, 01 Mar 2025 12:01:00 GMT ", "", time.Minute, true},
	// A date centuries ahead is capped like a number.
	{"date far future", "Fri, 31 Dec 9999 23:59:59 GMT", "", century, true},
	// Half a date is neither form.
	{"date truncated", "Sat, 01 Mar 2025", "", 0, false},
	// retry-after-ms still wins over a date.
	{"ms wins over date", raNow.Add(30 * time.Second).Format(http.TimeFormat), "250", 250 * time.Millisecond, true},

	// strconv.ParseFloat would take all of these; delay-seconds is digits.
	{"negative", "-1", "", 0, false},
	{"plus sign", "+5", "", 0, false},
	{"exponent", "1e3", "", 0, false},
	{"hex", "0x10", "", 0, false},
	{"Inf", "Inf", "", 0, false},
	{"NaN", "NaN", "", 0, false},
	{"underscore", "1_000", "", 0, false},
	// A dot must sit between digits.
	{"leading dot", ".5", "", 0, false},
	{"trailing dot", "5.", "", 0, false},
	{"two dots", "1.2.3", "", 0, false},
	// Surrounding space is accepted; space inside is not.
	{"padded", " 5 ", "", 5 * time.Second, true},
	{"unit suffix", "5 s", "", 0, false},
	{"go duration", "5s", "", 0, false},
	// No header at all.
	{"empty", "", "", 0, false},
	{"only space", "   ", "", 0, false},
	// More seconds than a Duration holds: capped, positive, and still a delay.
	{"huge", "99999999999999999999", "", century, true},
	{"huge ms", "", "99999999999999999999", century, true},
	// Delay-seconds is 1*DIGIT with no limit (RFC 9110 §10.2.3), and the
	// doc caps delays at 100 years rather than dropping them; a longer
	// string of digits is as valid as a shorter one.
	{"huge 40 digits", strings.Repeat("9", 40), "", century, true},
	{"5 with 40 leading zeros", strings.Repeat("0", 40) + "5", "", 5 * time.Second, true},
	// Past float64's range (about 1.8e308), where strconv.ParseFloat
	// fails with ErrRange: still digits, so still capped, in both headers.
	{"huge 310 digits", "1" + strings.Repeat("0", 309), "", century, true},
	{"huge 310 digits ms", "5", "1" + strings.Repeat("0", 309), century, true},
	{"huge 400 digits with a decimal", strings.Repeat("9", 400) + ".5", "", century, true},
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range raCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := outlast.RetryAfter(raHeader(tt.retryAfter, tt.ms), raNow)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("RetryAfter(Retry-After %q, retry-after-ms %q): got (%v, %v), want (%v, %v)",
					tt.retryAfter, tt.ms, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// Azure OpenAI's 429 says its delay in x-ms-retry-after-ms too, which
// wins over Retry-After as retry-after-ms does.
func TestRetryAfterAzure(t *testing.T) {
	t.Parallel()
	h := http.Header{"Retry-After": {"2"}, "X-Ms-Retry-After-Ms": {"1500"}}
	if got, ok := outlast.RetryAfter(h, raNow); got != 1500*time.Millisecond || !ok {
		t.Fatalf("got (%v, %v), want (1.5s, true)", got, ok)
	}
}

// TestRetryAfterNilHeader: a response may carry no header map at all.
func TestRetryAfterNilHeader(t *testing.T) {
	t.Parallel()
	if got, ok := outlast.RetryAfter(nil, raNow); got != 0 || ok {
		t.Fatalf("got (%v, %v), want (0, false)", got, ok)
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, c := range raCases {
		f.Add(c.retryAfter, c.ms)
	}
	// Decimals that float64 cannot hold exactly, and ones just under the
	// cap, for the reference's exact arithmetic.
	f.Add("0.3", "0.000001")
	f.Add("1.000000001", "")
	f.Add("3153599999.999999999", "3153599999999.99")
	f.Add("", "0."+strings.Repeat("0", 30)+"1")
	f.Fuzz(func(t *testing.T, retryAfter, msValue string) {
		h := raHeader(retryAfter, msValue)
		d, ok := outlast.RetryAfter(h, raNow)
		if ok && (d < 0 || d > century) {
			t.Fatalf("RetryAfter(%q, %q): got (%v, true), want a delay in [0, %v]", retryAfter, msValue, d, century)
		}
		if !ok && d != 0 {
			t.Fatalf("RetryAfter(%q, %q): got (%v, false), want 0 when there is no delay", retryAfter, msValue, d)
		}
		d2, ok2 := outlast.RetryAfter(h, raNow)
		if d2 != d || ok2 != ok {
			t.Fatalf("RetryAfter(%q, %q): got (%v, %v) then (%v, %v), want the same twice", retryAfter, msValue, d, ok, d2, ok2)
		}
		// Azure's name for the milliseconds reads the same.
		az := raHeader(retryAfter, "")
		if msValue != "" {
			az.Set("X-Ms-Retry-After-Ms", msValue)
		}
		if d3, ok3 := outlast.RetryAfter(az, raNow); d3 != d || ok3 != ok {
			t.Fatalf("RetryAfter(%q, x-ms-retry-after-ms %q): got (%v, %v), want (%v, %v) as with retry-after-ms", retryAfter, msValue, d3, ok3, d, ok)
		}
		// A plain count of milliseconds, whatever Retry-After says, is
		// exactly that many milliseconds: it wins and needs no rounding.
		if n, plain := smallInt(msValue); plain {
			if want := time.Duration(n) * time.Millisecond; d != want || !ok {
				t.Fatalf("RetryAfter(%q, %q): got (%v, %v), want (%v, true)", retryAfter, msValue, d, ok, want)
			}
		}
		// Without retry-after-ms, a plain count of seconds is exactly that.
		if n, plain := smallInt(retryAfter); plain && msValue == "" {
			if want := time.Duration(n) * time.Second; d != want || !ok {
				t.Fatalf("RetryAfter(%q, %q): got (%v, %v), want (%v, true)", retryAfter, msValue, d, ok, want)
			}
		}
		// Whatever the values, RetryAfter agrees with the doc comment read
		// literally, in exact arithmetic: float64 may cost it a nanosecond
		// or a part in 2^50, never a digit.
		want, wantOK := raReference(h, raNow)
		if ok != wantOK || !raClose(d, want) {
			t.Fatalf("RetryAfter(%q, %q): got (%v, %v), want (%v, %v) as the reference reads it", retryAfter, msValue, d, ok, want, wantOK)
		}
	})
}

// FuzzRetryAfterUnbounded checks the delays too long for a float64: RFC
// 9110's delay-seconds is 1*DIGIT, unbounded, and the doc caps delays at
// 100 years, so digits of any number are a delay of at most a century,
// never ignored.
func FuzzRetryAfterUnbounded(f *testing.F) {
	f.Add("9", uint16(39), false)
	f.Add("1", uint16(309), false)
	f.Add("25", uint16(400), true)
	f.Fuzz(func(t *testing.T, digits string, zeros uint16, ms bool) {
		// The value is digits, with anything else dropped, then zeros
		// zeros, so that the fuzzer reaches long values at once.
		digits = strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' || r == '.' {
				return r
			}
			return -1
		}, digits)
		v := digits + strings.Repeat("0", int(zeros%2000))
		if !raDecimal.MatchString(v) {
			return
		}
		h, unit := raHeader(v, ""), time.Second
		if ms {
			h, unit = raHeader("", v), time.Millisecond
		}
		want, _ := raExact(v, unit)
		if d, ok := outlast.RetryAfter(h, raNow); !ok || !raClose(d, want) {
			t.Fatalf("RetryAfter(%v) with %d digits: got (%v, %v), want (%v, true)", h, len(v), d, ok, want)
		}
	})
}

// raDecimal is the grammar that both headers take: digits, with at most
// one dot, between digits.
var raDecimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// raReference is RetryAfter as its doc comment says, written
// independently: a valid retry-after-ms wins; else Retry-After is a
// decimal of seconds or an HTTP-date, measured from now and at least 0;
// every delay is capped at a century, computed exactly with big.Rat.
func raReference(h http.Header, now time.Time) (time.Duration, bool) {
	if d, ok := raExact(strings.TrimSpace(h.Get("Retry-After-Ms")), time.Millisecond); ok {
		return d, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d, ok := raExact(v, time.Second); ok {
		return d, true
	}
	if v == "" {
		return 0, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), century), true
}

// raExact reads s as a decimal number of units, exactly.
func raExact(s string, unit time.Duration) (time.Duration, bool) {
	if !raDecimal.MatchString(s) {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, false
	}
	r.Mul(r, new(big.Rat).SetInt64(int64(unit)))
	if r.Cmp(new(big.Rat).SetInt64(int64(century))) >= 0 {
		return century, true
	}
	n := new(big.Int).Quo(r.Num(), r.Denom()) // r >= 0: truncation is floor
	return time.Duration(n.Int64()), true
}

// raClose reports whether got is want up to float64's rounding: a
// nanosecond, or a part in 2^50 of a long delay.
func raClose(got, want time.Duration) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= max(time.Nanosecond, want>>50)
}

// raHeader returns a header with the two values, leaving out empty ones.
func raHeader(retryAfter, ms string) http.Header {
	h := http.Header{}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	if ms != "" {
		h.Set("Retry-After-Ms", ms)
	}
	return h
}

// smallInt reports whether s is 1 to 9 ASCII digits and nothing else, and
// its value.
func smallInt(s string) (int64, bool) {
	if len(s) < 1 || len(s) > 9 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

var rlCases = []struct {
	name   string
	header map[string]string
	want   time.Duration
	ok     bool
}{
	{"openai none left", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "6m0s"}, 6 * time.Minute, true},
	{"openai milliseconds", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "120ms"}, 120 * time.Millisecond, true},
	{"openai fractional", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "1.5s"}, 1500 * time.Millisecond, true},
	{"azure bare seconds", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "2"}, 2 * time.Second, true},
	{"openai some left", map[string]string{"X-Ratelimit-Remaining-Requests": "3", "X-Ratelimit-Reset-Requests": "6m0s"}, 0, false},
	{"openai no reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0"}, 0, false},
	{"openai malformed reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "soon"}, 0, false},
	{"openai negative reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "-1s"}, 0, false},
	{"openai huge reset", map[string]string{"X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "2562047h"}, century, true},
	{"anthropic none left", map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": raNow.Add(30 * time.Second).Format(time.RFC3339)}, 30 * time.Second, true},
	{"anthropic past reset", map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": raNow.Add(-time.Minute).Format(time.RFC3339)}, 0, true},
	{"anthropic some left", map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "10", "Anthropic-Ratelimit-Requests-Reset": raNow.Add(30 * time.Second).Format(time.RFC3339)}, 0, false},
	{"anthropic malformed", map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": "tomorrow"}, 0, false},
	{"the tokens limit is not the requests'", map[string]string{"X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "1s"}, 0, false},
	{"nothing", map[string]string{}, 0, false},
}

func TestRateLimitReset(t *testing.T) {
	for _, c := range rlCases {
		h := http.Header{}
		for k, v := range c.header {
			h.Set(k, v)
		}
		if d, ok := outlast.RateLimitReset(h, raNow); d != c.want || ok != c.ok {
			t.Errorf("%s: RateLimitReset = (%v, %v), want (%v, %v)", c.name, d, ok, c.want, c.ok)
		}
	}
	h := http.Header{"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"6m0s"}}
	if n := testing.AllocsPerRun(100, func() { outlast.RateLimitReset(h, raNow) }); n != 0 {
		t.Errorf("RateLimitReset allocates %v times, want 0: it runs on every success under an Admission", n)
	}
}

// FuzzRateLimitReset checks that any header values give a delay in
// [0, 100 years], or none, and that requests remaining give none.
func FuzzRateLimitReset(f *testing.F) {
	for _, c := range rlCases {
		f.Add(c.header["X-Ratelimit-Remaining-Requests"], c.header["X-Ratelimit-Reset-Requests"],
			c.header["Anthropic-Ratelimit-Requests-Remaining"], c.header["Anthropic-Ratelimit-Requests-Reset"])
	}
	f.Fuzz(func(t *testing.T, oRemaining, oReset, aRemaining, aReset string) {
		h := http.Header{
			"X-Ratelimit-Remaining-Requests":         {oRemaining},
			"X-Ratelimit-Reset-Requests":             {oReset},
			"Anthropic-Ratelimit-Requests-Remaining": {aRemaining},
			"Anthropic-Ratelimit-Requests-Reset":     {aReset},
		}
		d, ok := outlast.RateLimitReset(h, raNow)
		if ok && (d < 0 || d > century) {
			t.Fatalf("RateLimitReset(%q): got (%v, true), want a delay in [0, %v]", h, d, century)
		}
		if !ok && d != 0 {
			t.Fatalf("RateLimitReset(%q): got (%v, false), want 0", h, d)
		}
		if ok && strings.TrimSpace(oRemaining) != "0" && strings.TrimSpace(aRemaining) != "0" {
			t.Fatalf("RateLimitReset(%q): got (%v, true) with requests remaining, want none", h, d)
		}
	})
}
