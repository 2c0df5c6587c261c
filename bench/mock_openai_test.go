package bench_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/outlast-llm/outlast/mockllm"
)

// mockClient is the real openai-go client, with its own retries off,
// pointed at srv.
func mockClient(srv *mockllm.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

var mockParams = openai.ChatCompletionNewParams{
	Model:    "m",
	Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
}

// The SDK reads mockllm's completions, streaming and not: what the
// server sends is what a real client expects.
func TestMockWithOpenAISDK(t *testing.T) {
	t.Parallel()
	srv := &mockllm.Server{Chunks: 4}
	if err := srv.Start(""); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := mockClient(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const want = "The quick brown fox"
	out, err := client.Chat.Completions.New(ctx, mockParams)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Choices[0].Message.Content; got != want || out.Choices[0].FinishReason != "stop" {
		t.Errorf("non-streaming: got %q, %q; want %q, stop", got, out.Choices[0].FinishReason, want)
	}
	if out.Usage.CompletionTokens != 4 {
		t.Errorf("non-streaming: got %d completion tokens, want 4", out.Usage.CompletionTokens)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, mockParams)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want {
		t.Errorf("streaming: got %+v, want one choice saying %q", acc.Choices, want)
	}
}

// A 503 from the script reaches the SDK as an *openai.Error with the
// status.
func TestMockStatusWithOpenAISDK(t *testing.T) {
	t.Parallel()
	srv := mockllm.NewServer("503")
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mockClient(srv)
	_, err := client.Chat.Completions.New(ctx, mockParams)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %v, want an *openai.Error with status 503", err)
	}
	if !strings.Contains(apiErr.Error(), "Service Unavailable") {
		t.Errorf("got %q, want the error's message", apiErr.Error())
	}
}
