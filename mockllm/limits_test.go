package mockllm_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/mockllm"
)

// A limited mock answers each key's requests while its allowance lasts,
// with the API's rate-limit headers, which outlast.ReadHeadroom reads as
// the providers' own; past it, 429 with a Retry-After that says when the
// next request fits. Another key is not touched.
func TestLimits(t *testing.T) {
	t.Parallel()
	s := start(t, "ok", &mockllm.Server{Limits: mockllm.Limits{Requests: 2, Tokens: 10000, Window: time.Minute}})
	c := client(t, 10*time.Second)
	send := func(path, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"one two three"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	began := time.Now()
	for i, want := range []int64{1, 0} {
		resp := send("/v1/chat/completions", "sk-a")
		now := time.Now()
		hr := outlast.ReadHeadroom(resp.Header, now)
		if resp.StatusCode != 200 || hr.Requests.Remaining != want || hr.Requests.Limit != 2 {
			t.Fatalf("request %d: got %d with %+v, want 200 with %d of 2 requests left", i+1, resp.StatusCode, hr.Requests, want)
		}
		// 3 words and max_tokens 100, counted up front; the allowance
		// refills meanwhile, 10,000 a minute.
		least := 10000 - 103*int64(i+1)
		refilled := int64(10000*now.Sub(began)/time.Minute) + 1
		if hr.Tokens.Limit != 10000 || hr.Tokens.Remaining < least || hr.Tokens.Remaining > least+refilled {
			t.Errorf("request %d: tokens %+v, want %d left, or up to %d more refilled", i+1, hr.Tokens, least, refilled)
		}
		if d := hr.Requests.Reset.Sub(now); d <= 0 || d > time.Minute {
			t.Errorf("request %d: requests whole again in %v, want within the minute", i+1, d)
		}
	}
	resp := send("/v1/chat/completions", "sk-a")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || err != nil || ra < 1 || ra > 30 {
		t.Errorf("third: got %d with Retry-After %q, want 429 within the 30 s a request takes to refill", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ms, err := strconv.Atoi(resp.Header.Get("Retry-After-Ms")); err != nil || ms > ra*1000 || ms < (ra-1)*1000 {
		t.Errorf("third: Retry-After-Ms %q, want the same wait as Retry-After %d s", resp.Header.Get("Retry-After-Ms"), ra)
	}
	if resp := send("/v1/chat/completions", "sk-b"); resp.StatusCode != 200 {
		t.Errorf("another key: got %d, want 200", resp.StatusCode)
	}
	// Anthropic's API states them in Anthropic's form.
	resp = send("/v1/messages", "sk-c")
	hr := outlast.ReadHeadroom(resp.Header, time.Now())
	if resp.StatusCode != 200 || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "1" || hr.Requests.Remaining != 1 || hr.Tokens.Remaining != 10000-103 {
		t.Errorf("messages: got %d with %+v, want 200 and Anthropic's headers", resp.StatusCode, hr)
	}
	if got := s.Stats().Paths["/v1/chat/completions"]["rate-limited"]; got != 1 {
		t.Errorf("stats: %d rate-limited, want 1", got)
	}
}

// A mock without a script answers as "ok" does: without a Retry-After of
// any form, which would tell a client to wait for nothing. (The step
// after a last refuse step is TestAddedStepsAreOK's.)
func TestNoScriptNoRetryAfter(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "ok"} {
		s := &mockllm.Server{Logf: t.Logf}
		if src != "" {
			s.Script = mockllm.MustParseScript(src)
		}
		if err := s.Start(""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		resp, _ := do(t, client(t, 10*time.Second), s.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`)
		for _, h := range []string{"Retry-After", "Retry-After-Ms"} {
			if v := resp.Header.Get(h); resp.StatusCode != 200 || v != "" {
				t.Errorf("script %q: got %d with %s %q, want 200 without it", src, resp.StatusCode, h, v)
			}
		}
	}
}
