package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client sends the captured headers, each with its value, and no
// others but the transport's; openai sends no X-Stainless-Timeout, where
// @anthropic-ai/sdk sends 600.
func TestSendHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	c := newClient()
	defer c.CloseIdleConnections()
	send(t.Context(), c, srv.URL, requestBody(0), 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for k := range got {
		names = append(names, k)
	}
	want := []string{"Content-Length"}
	for _, h := range openAIHeaders {
		want = append(want, http.CanonicalHeaderKey(h[0]))
		if v := got.Get(h[0]); v != h[1] {
			t.Errorf("%s: got %q, want %q", h[0], v, h[1])
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("got headers %q, want %q", names, want)
	}
	if v := header(openAIHeaders, "X-Stainless-Timeout"); v != "" {
		t.Errorf("openai: got X-Stainless-Timeout %q, want none", v)
	}
	if v := header(anthropicHeaders, "X-Stainless-Timeout"); v != "600" {
		t.Errorf("@anthropic-ai/sdk: got X-Stainless-Timeout %q, want 600", v)
	}
}

// chunkEvent is a chat.completion.chunk carrying text.
func chunkEvent(text string) string {
	return fmt.Sprintf("data: {\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", text)
}

// streamOf is the whole stream of words: role chunk, content, finish,
// usage and [DONE].
func streamOf(words ...string) string {
	var b strings.Builder
	b.WriteString("data: {\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for _, w := range words {
		b.WriteString(chunkEvent(w))
	}
	b.WriteString("data: {\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	b.WriteString("data: {\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n")
	return b.String() + "data: [DONE]\n\n"
}

// The client reads what the caller gets as the openai package would:
// the text, the end, error events and the gateway's kind, events it
// cannot parse, and a connection that breaks.
func TestSendReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		cut     bool // the handler breaks the connection after the body
		want    result
	}{
		// A whole stream, with the gateway's progress comments.
		{"whole", 200, nil, ": waiting\n\n" + streamOf("a", " b"), false,
			result{status: 200, text: "a b", chunks: 2, finish: "stop", done: true, model: "gpt-4o", usage: true}},
		// A malformed event is skipped and counted; what follows counts.
		{"malformed", 200, nil, chunkEvent("a") + "data: {\"choices\":[{\"delta\":{\"content\":\"\n\n" + chunkEvent(" b") + "data: [DONE]\n\n", false,
			result{status: 200, text: "a b", chunks: 2, done: true, model: "gpt-4o", malformed: 1}},
		// The gateway's error event ends the answer, naming its kind.
		{"error event", 200, nil, chunkEvent("a") + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"outlast_upstream_broke\",\"message\":\"x\"}}\n\n", false,
			result{status: 200, text: "a", chunks: 1, model: "gpt-4o", errorEvent: true, kind: "upstream-broke",
				errorText: `{"type":"error","error":{"type":"outlast_upstream_broke","message":"x"}}`}},
		// A body that breaks off is a cut, which the caller sees.
		{"cut", 200, nil, chunkEvent("a"), true,
			result{status: 200, text: "a", chunks: 1, model: "gpt-4o", cut: true}},
		// An error status keeps its body and the gateway's kind.
		{"503", 503, map[string]string{"Outlast-Error": "upstream-down", "Outlast-Request-Id": "r1"}, `{"error":{}}`, false,
			result{status: 503, kind: "upstream-down", requestID: "r1", body: `{"error":{}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
				if tc.cut {
					http.NewResponseController(w).Flush()
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close()
					}
				}
			}))
			defer srv.Close()
			c := newClient()
			defer c.CloseIdleConnections()
			got := send(t.Context(), c, srv.URL, requestBody(0), 5*time.Second)
			got.elapsed, got.err = 0, ""
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The budget ends a request that has not ended, and says so.
func TestSendOverBudget(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.Write([]byte(chunkEvent("a")))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := newClient()
	defer c.CloseIdleConnections()
	r := send(context.Background(), c, srv.URL, requestBody(0), 100*time.Millisecond)
	if !r.overBudget || r.cut || r.chunks != 1 || r.elapsed < 100*time.Millisecond {
		t.Errorf("got %+v, want over budget after 100ms, one chunk, no cut", r)
	}
}
