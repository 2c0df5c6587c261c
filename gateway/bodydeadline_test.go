package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/gateway"
)

// TestBodyDeadlineEndsWithTheBody checks the request body's deadline
// under Serve, where net/http sets two of them for the gateway: the
// first read's, from its ReadTimeout, and none once the body has ended.
// A stream that outlasts --body-timeout after a small body reaches the
// caller whole, twice on one connection: a deadline left on it would
// end net/http's watch for the caller's leaving, which cancels the
// request. A body that never begins still gets 408.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 6 {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(bodyTimeout / 2) // the stream outlasts the body's timeout threefold
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	h := newHostile(t, func(c *gateway.Config, _ *gateway.ServerConfig) {
		c.Upstreams[0].URL = u
		c.BodyTimeout = bodyTimeout
	})

	c := h.dial(t)
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	body := `{"model":"m","stream":true,"messages":[]}`
	for i := range 2 {
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || strings.Count(string(b), "data: {") != 6 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("request %d on one connection: %d, %v, body %q; want the whole stream of 6 events and [DONE]", i+1, resp.StatusCode, err, b)
		}
	}

	// A body announced and never begun.
	c2 := h.dial(t)
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c2, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Outlast-Error") != "too-slow" {
		t.Errorf("a body that never began: %d %s, want 408 too-slow", resp.StatusCode, resp.Header.Get("Outlast-Error"))
	}
}
