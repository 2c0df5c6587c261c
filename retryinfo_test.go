package outlast

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// geminiBody is a Gemini 429 with its RetryInfo among other details, as
// the API sends it.
func geminiBody(delay string) string {
	return `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"` + delay + `"}]}}`
}

func TestRetryInfo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		why, body string
		want      time.Duration
		ok        bool
	}{
		{"Gemini's, fractional", geminiBody("45.8s"), 45800 * time.Millisecond, true},
		{"whole seconds", geminiBody("3s"), 3 * time.Second, true},
		{"nanoseconds", geminiBody("0.000000001s"), time.Nanosecond, true},
		// Some Google APIs answer a list of errors: the first counts.
		{"a list", "[" + geminiBody("2s") + "]", 2 * time.Second, true},
		// A Duration without its unit, negative, or not a number is no
		// delay: a malformed body must not hold a retry back.
		{"no unit", geminiBody("3"), 0, false},
		{"negative", geminiBody("-3s"), 0, false},
		{"not a number", geminiBody("soons"), 0, false},
		{"no RetryInfo", `{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"}]}}`, 0, false},
		{"OpenAI's error", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, 0, false},
		{"not JSON", `Too Many Requests`, 0, false},
	} {
		if got, ok := retryInfo([]byte(c.body)); got != c.want || ok != c.ok {
			t.Errorf("%s: retryInfo = %v, %v; want %v, %v", c.why, got, ok, c.want, c.ok)
		}
	}
}

// bodyRetryInfo reads the delay and leaves the body whole for the caller,
// a body that failed failing where it did.
func TestBodyRetryInfoKeepsTheBody(t *testing.T) {
	t.Parallel()
	body := geminiBody("3s") + strings.Repeat(" ", maxRetryInfo)
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}}, Body: io.NopCloser(strings.NewReader(body))}
	if d, ok := bodyRetryInfo(resp); !ok || d != 3*time.Second {
		t.Errorf("got %v, %v; want 3s", d, ok)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != body {
		t.Errorf("the caller read %d bytes, %v; want the body whole, %d bytes", len(b), err, len(body))
	}
	broken := errors.New("broken")
	resp.Body = io.NopCloser(io.MultiReader(strings.NewReader("{"), iotest.ErrReader(broken)))
	if _, ok := bodyRetryInfo(resp); ok {
		t.Error("a broken body gave a delay")
	}
	if b, err := io.ReadAll(resp.Body); string(b) != "{" || !errors.Is(err, broken) {
		t.Errorf("read %q, %v; want the bytes read and the body's error", b, err)
	}
}

// FuzzRetryInfo checks retryInfo by writing a body with a delay and
// reading it back: the delay is the one written, to the nanosecond, and
// any other body gives a delay within the cap or none.
func FuzzRetryInfo(f *testing.F) {
	f.Add(int64(45800000000), []byte(geminiBody("1s")))
	f.Add(int64(1), []byte(`[{"error":{"details":[{"@type":"google.rpc.RetryInfo","retryDelay":"1.5s"}]}}]`))
	f.Fuzz(func(t *testing.T, ns int64, other []byte) {
		if ns >= 0 && ns < int64(time.Hour) {
			secs := strconv.FormatInt(ns/1e9, 10) + "." + strconv.FormatInt(1e9+ns%1e9, 10)[1:] + "s"
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"details": []any{map[string]string{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": secs}}}})
			if d, ok := retryInfo(b); !ok || d != time.Duration(ns) {
				t.Fatalf("%s: got %v, %v; want %v", b, d, ok, time.Duration(ns))
			}
		}
		d, ok := retryInfo(other)
		if d < 0 || d > maxDelay || !ok && d != 0 {
			t.Fatalf("%q: got %v, %v; want a delay within [0, %v], or none", other, d, ok, maxDelay)
		}
		if !bytes.Contains(other, []byte("RetryInfo")) && !bytes.Contains(other, []byte(`\u`)) && ok {
			t.Fatalf("%q: got %v from a body that names no RetryInfo", other, d)
		}
	})
}

// A Gemini 429 in gzip, the coding an SDK asks for, is read as the
// same 429 without it, and its body goes to the caller as it came.
func TestBodyRetryInfoGzip(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	io.WriteString(w, geminiBody("3s"))
	w.Close()
	coded := b.String()
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, Body: io.NopCloser(strings.NewReader(coded))}
	if d, ok := bodyRetryInfo(resp); !ok || d != 3*time.Second {
		t.Errorf("got %v, %v; want 3s", d, ok)
	}
	if got, _ := io.ReadAll(resp.Body); string(got) != coded {
		t.Errorf("the caller read %d bytes; want the gzip body as it came, %d", len(got), len(coded))
	}
}

// FuzzDecoded reads arbitrary bytes as a body's coded start: it never
// panics, never gives more than its limit, and gives a coded body back
// as it was before the coding.
func FuzzDecoded(f *testing.F) {
	f.Add([]byte(`{"error":{}}`), []byte{0x1f, 0x8b, 0x08})
	f.Fuzz(func(t *testing.T, plain, other []byte) {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(plain)
		w.Close()
		if got := decoded(b.Bytes(), http.Header{"Content-Encoding": {"gzip"}}, 1<<20); len(plain) <= 1<<20 && !bytes.Equal(got, plain) {
			t.Fatalf("gzip of %q decoded as %q", plain, got)
		}
		for _, coding := range []string{"gzip", "deflate", "br", ""} {
			if got := decoded(other, http.Header{"Content-Encoding": {coding}}, 64); len(got) > max(64, len(other)) {
				t.Fatalf("%s: %d bytes from %d, over the limit", coding, len(got), len(other))
			}
		}
	})
}
