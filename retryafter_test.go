package outlast_test

import (
	"net/http"
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
	})
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
