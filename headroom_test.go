package outlast_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

var unknown = outlast.Quota{Limit: -1, Remaining: -1}

// Each provider's form is read as its documentation states it, and what a
// response does not state, or states as unknown, stays unknown.
func TestReadHeadroom(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	for _, tt := range []struct {
		name    string
		headers map[string]string
		want    outlast.Headroom
	}{
		{"openai", map[string]string{
			"x-ratelimit-limit-requests": "5000", "x-ratelimit-remaining-requests": "4999", "x-ratelimit-reset-requests": "12ms",
			"x-ratelimit-limit-tokens": "160000", "x-ratelimit-remaining-tokens": "159976", "x-ratelimit-reset-tokens": "6m0s",
		}, outlast.Headroom{
			Requests:    outlast.Quota{Limit: 5000, Remaining: 4999, Reset: at(12 * time.Millisecond)},
			Tokens:      outlast.Quota{Limit: 160000, Remaining: 159976, Reset: at(6 * time.Minute)},
			InputTokens: unknown, OutputTokens: unknown,
		}},
		// Azure: bare seconds, fractions, and -1 for what it does not
		// report (its Responses API).
		{"azure", map[string]string{
			"x-ratelimit-remaining-requests": "99", "x-ratelimit-reset-requests": "1",
			"x-ratelimit-limit-tokens": "-1", "x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "0",
		}, outlast.Headroom{
			Requests: outlast.Quota{Limit: -1, Remaining: 99, Reset: at(time.Second)},
			Tokens:   unknown, InputTokens: unknown, OutputTokens: unknown,
		}},
		{"azure fraction", map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "0.5"},
			outlast.Headroom{Requests: unknown, Tokens: outlast.Quota{Limit: -1, Remaining: 0, Reset: at(500 * time.Millisecond)}, InputTokens: unknown, OutputTokens: unknown}},
		{"anthropic", map[string]string{
			"anthropic-ratelimit-requests-limit": "4000", "anthropic-ratelimit-requests-remaining": "3201", "anthropic-ratelimit-requests-reset": "2026-12-06T12:00:30Z",
			"anthropic-ratelimit-tokens-limit": "400000", "anthropic-ratelimit-tokens-remaining": "312000", "anthropic-ratelimit-tokens-reset": "2026-12-06T12:00:15Z",
			"anthropic-ratelimit-input-tokens-limit": "300000", "anthropic-ratelimit-input-tokens-remaining": "250000", "anthropic-ratelimit-input-tokens-reset": "2026-12-06T12:00:10Z",
			"anthropic-ratelimit-output-tokens-limit": "100000", "anthropic-ratelimit-output-tokens-remaining": "62000", "anthropic-ratelimit-output-tokens-reset": "2026-12-06T11:59:00Z",
		}, outlast.Headroom{
			Requests:     outlast.Quota{Limit: 4000, Remaining: 3201, Reset: at(30 * time.Second)},
			Tokens:       outlast.Quota{Limit: 400000, Remaining: 312000, Reset: at(15 * time.Second)},
			InputTokens:  outlast.Quota{Limit: 300000, Remaining: 250000, Reset: at(10 * time.Second)},
			OutputTokens: outlast.Quota{Limit: 100000, Remaining: 62000, Reset: now}, // already past: now
		}},
		{"together", map[string]string{"x-ratelimit-limit": "10", "x-ratelimit-remaining": "7", "x-tokenlimit-limit": "2000", "x-tokenlimit-remaining": "1500"},
			outlast.Headroom{
				Requests:    outlast.Quota{Limit: 10, Remaining: 7, Reset: at(time.Second)},
				Tokens:      outlast.Quota{Limit: 2000, Remaining: 1500, Reset: at(time.Second)},
				InputTokens: unknown, OutputTokens: unknown,
			}},
		// OpenAI's form wins over Together's generic names.
		{"openai over together", map[string]string{"x-ratelimit-remaining": "7", "x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "2s"},
			outlast.Headroom{Requests: outlast.Quota{Limit: -1, Remaining: 3, Reset: at(2 * time.Second)}, Tokens: unknown, InputTokens: unknown, OutputTokens: unknown}},
		// Nothing guessed: a malformed count is unknown, a malformed reset
		// is no reset.
		{"malformed", map[string]string{
			"x-ratelimit-remaining-requests": "1e3", "x-ratelimit-remaining-tokens": "12", "x-ratelimit-reset-tokens": "soon", "x-ratelimit-limit-tokens": "+5",
			"anthropic-ratelimit-input-tokens-remaining": " 7 ", "anthropic-ratelimit-input-tokens-reset": "tomorrow",
		}, outlast.Headroom{Requests: unknown, Tokens: outlast.Quota{Limit: -1, Remaining: 12}, InputTokens: outlast.Quota{Limit: -1, Remaining: 7}, OutputTokens: unknown}},
		// No reset is no reset, not now.
		{"no reset", map[string]string{"x-ratelimit-remaining-requests": "5"},
			outlast.Headroom{Requests: outlast.Quota{Limit: -1, Remaining: 5}, Tokens: unknown, InputTokens: unknown, OutputTokens: unknown}},
		{"far", map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "99999999999999999999s"},
			outlast.Headroom{Requests: outlast.Quota{Limit: -1, Remaining: 0, Reset: at(100 * 365 * 24 * time.Hour)}, Tokens: unknown, InputTokens: unknown, OutputTokens: unknown}},
		{"none", nil, outlast.Headroom{Requests: unknown, Tokens: unknown, InputTokens: unknown, OutputTokens: unknown}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			if got := outlast.ReadHeadroom(h, now); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// ReadHeadroom never panics, never reports a count it was not sent, and
// never a reset before now or past the cap, whatever the values; a whole
// number it is sent it reads exactly, and a Go duration as Go reads it.
func FuzzReadHeadroom(f *testing.F) {
	for _, s := range [][3]string{
		{"5000", "4999", "12ms"}, {"-1", "-1", "0"}, {"10", "0", "6m0s"}, {"1", "1", "1.5"},
		{"", "3", "2026-12-06T12:00:30Z"}, {"x", "07", "1h2m3.5s"}, {"99999999999999999999", "1", "-1s"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, limit, remaining, reset string) {
		for _, form := range [][3]string{
			{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
			{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
			{"X-Tokenlimit-Limit", "X-Tokenlimit-Remaining", ""},
		} {
			h := http.Header{form[0]: {limit}, form[1]: {remaining}}
			if form[2] != "" {
				h[form[2]] = []string{reset}
			}
			hr := outlast.ReadHeadroom(h, now)
			q := map[string]outlast.Quota{"X": hr.Requests, "A": hr.OutputTokens}[form[0][:1]]
			if form[0] == "X-Tokenlimit-Limit" {
				q = hr.Tokens
			}
			for name, tt := range map[string]struct {
				got  int64
				sent string
			}{"Limit": {q.Limit, limit}, "Remaining": {q.Remaining, remaining}} {
				want := int64(-1)
				// A count is digits alone: no sign, even on 0.
				if n, err := strconv.ParseInt(strings.TrimSpace(tt.sent), 10, 64); err == nil && strings.Trim(strings.TrimSpace(tt.sent), "0123456789") == "" {
					want = n
				}
				if name == "Limit" && q.Remaining < 0 {
					want = -1 // a form counts only when it says what is left
				}
				if tt.got != want {
					t.Fatalf("%s %s: got %d from %q, want %d", form[0], name, tt.got, tt.sent, want)
				}
			}
			if !q.Reset.IsZero() && (q.Reset.Before(now) || q.Reset.After(now.Add(100*365*24*time.Hour))) {
				t.Fatalf("%s reset %q: got %v, before now or past the cap", form[2], reset, q.Reset)
			}
			if q.Known() && strings.HasPrefix(form[2], "X-") {
				// Signs are not read: a reset is never negative.
				r := strings.TrimSpace(reset)
				if d, err := time.ParseDuration(r); err == nil && !strings.HasPrefix(r, "+") && !strings.HasPrefix(r, "-") && d >= 0 && d < time.Hour*24*365 && !q.Reset.Equal(now.Add(d)) {
					t.Fatalf("reset %q: got %v, want %v", reset, q.Reset.Sub(now), d)
				}
			}
		}
	})
}

// A request's tokens are its body's input at four bytes a token and its
// answer's bound, the largest it names, or the default.
func TestEstimateTokens(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"chat", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`, 19 + 100},
		{"largest bound", `{"max_tokens":100,"max_completion_tokens":300}`, 12 + 300},
		{"responses", `{"input":"hi","max_output_tokens":50}`, 10 + 50},
		{"default", `{"model":"m","messages":[]}`, 7 + 4096},
		// A bound inside the input is the input's text, not the request's.
		{"nested", `{"messages":[{"max_tokens":9}]}`, 8 + 4096},
		{"not a number", `{"max_tokens":"lots"}`, 6 + 4096},
		{"not JSON", `max_tokens=100`, 4},
		{"huge", `{"max_tokens":9223372036854775807}`, math.MaxInt},
	} {
		if got := outlast.EstimateTokens([]byte(tt.body), 4096); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

// EstimateTokens never panics, never counts less than the input, and reads
// the bounds as encoding/json reads the body's top-level members.
func FuzzEstimateTokens(f *testing.F) {
	for _, s := range []string{`{"max_tokens":100}`, `{"a":{"max_tokens":1},"max_output_tokens":2,"max_tokens":3}`, `[1]`, `{"max_tokens":-1}`, `{"max_tokens":1e3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := outlast.EstimateTokens(body, 7)
		input := (len(body) + 3) / 4
		if got < input {
			t.Fatalf("%q: got %d, less than the input's %d", body, got, input)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return
		}
		// Every top-level member, repeated keys too, in order.
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		d.Token() // {
		bound := -1
		for d.More() {
			k, _ := d.Token()
			var v json.RawMessage
			if d.Decode(&v) != nil {
				return
			}
			switch k {
			case "max_tokens", "max_completion_tokens", "max_output_tokens":
				if n, err := strconv.Atoi(string(v)); err == nil && n >= 0 {
					bound = max(bound, n)
				}
			}
		}
		if bound < 0 {
			bound = 7
		}
		if want := input + min(bound, math.MaxInt-input); got != want {
			t.Fatalf("%q: got %d, want %d", body, got, want)
		}
	})
}
