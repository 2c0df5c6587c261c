package bench_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/outlast-llm/outlast"
)

// openai-go with outlast doing the retrying: the SDK's own retries are set
// to 0, so that only one layer retries, and outlast's Transport goes in
// through option.WithHTTPClient. The fake API is overloaded once.
func Example_openAI() {
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "10")
			http.Error(w, `{"error":{"type":"server_error","message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}]}`)
	}))
	defer api.Close()

	client := openai.NewClient(
		option.WithBaseURL(api.URL),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0), // outlast is the only layer that retries
		option.WithHTTPClient(&http.Client{Transport: &outlast.Transport{
			// A host would wait longer: 15s, 45s, 120s under a deadline.
			Policy: &outlast.Policy{Waits: []time.Duration{20 * time.Millisecond}},
		}}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Choices[0].Message.Content, "after", calls.Load(), "attempts")
	// Output: hello after 2 attempts
}
