package bench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
)

// fakeOpenAI answers like the OpenAI API, after failing the first n
// attempts with 503.
func fakeOpenAI(fail int32, seen *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if seen.Add(1) <= fail {
			http.Error(w, `{"error":{"type":"server_error","message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range []string{"hel", "lo"} {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", part)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// The real openai-go client, with its own retries off, through the
// gateway: the gateway retries a 503 and the SDK sees only the answer,
// streaming and not.
func TestGatewayWithOpenAISDK(t *testing.T) {
	var seen atomic.Int32
	api := httptest.NewServer(fakeOpenAI(1, &seen))
	defer api.Close()
	u, _ := url.Parse(api.URL)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}, FirstByteTimeout: 5 * time.Second}},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		g.ServeHTTP(w, r)
	}))
	defer gw.Close()
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Choices[0].Message.Content; got != "hello" {
		t.Errorf("non-streaming: got %q, want hello", got)
	}
	if seen.Load() != 2 || calls.Load() != 1 {
		t.Errorf("non-streaming: the API saw %d attempts and the gateway %d calls, want 2 and 1", seen.Load(), calls.Load())
	}

	seen.Store(0)
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "hello" {
		t.Errorf("streaming: got %q, want hello", text.String())
	}
	if seen.Load() != 2 || calls.Load() != 2 {
		t.Errorf("streaming: the API saw %d attempts and the gateway %d calls, want 2 and 2", seen.Load(), calls.Load())
	}
}

// A gateway with a token: openai-go sends it with option.WithHeader, as
// the README says, and its Authorization passes through untouched; without
// the token the SDK gets the gateway's 401, and nothing is forwarded.
func TestGatewayTokenWithOpenAISDK(t *testing.T) {
	var seen atomic.Int32
	var auth atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("Outlast-Token"))
		fakeOpenAI(0, &seen)(w, r)
	}))
	defer api.Close()
	u, _ := url.Parse(api.URL)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u}},
		Token:     "gw-token",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	defer gw.Close()
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	without := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	_, err = without.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || seen.Load() != 0 {
		t.Fatalf("without the token: got %v with %d forwarded, want a 401 and nothing forwarded", err, seen.Load())
	}
	with := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHeader("Outlast-Token", "gw-token"))
	out, err := with.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if out.Choices[0].Message.Content != "hello" || auth.Load() != "Bearer sk-test|" {
		t.Errorf("with the token: got %q, the API saw Authorization|Outlast-Token %q; want hello, the key and no token", out.Choices[0].Message.Content, auth.Load())
	}
}
