package mockllm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

// The text of a four-chunk response.
const fourWords = "The quick brown fox"

// decode unmarshals s into v, failing the test if it cannot.
func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
}

// stream posts a streaming request to path and returns its events.
func stream(t *testing.T, s *mockllm.Server, path, body string) (*http.Response, []sse) {
	t.Helper()
	resp, err := post(client(t, 5*time.Second), s.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type: got %q, want text/event-stream", ct)
	}
	return resp, evs
}

// The fields OpenAI clients read, streaming and not.
func TestOpenAIShape(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{Chunks: 4})
	_, body := do(t, client(t, 0), s.URL+chatPath, bodies[chatPath])
	var c struct {
		ID, Object, Model string
		Choices           []struct {
			Index   int
			Message struct{ Role, Content string }
			Finish  string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		}
	}
	decode(t, body, &c)
	if c.ID == "" || c.Object != "chat.completion" || c.Model != "m" || len(c.Choices) != 1 {
		t.Fatalf("got %s, want a chat.completion of model m with one choice", body)
	}
	if ch := c.Choices[0]; ch.Message.Role != "assistant" || ch.Message.Content != fourWords || ch.Finish != "stop" {
		t.Errorf("choice: got %+v, want the assistant saying %q, stop", ch, fourWords)
	}
	if c.Usage.Prompt != 2 || c.Usage.Completion != 4 || c.Usage.Total != 6 {
		t.Errorf("usage: got %+v, want 2 + 4 = 6", c.Usage)
	}

	body = strings.Replace(streamBody(chatPath), "{", `{"stream_options":{"include_usage":true},`, 1)
	_, evs := stream(t, s, chatPath, body)
	if len(evs) != 8 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("got %d events, want a role chunk, 4 content chunks, a stop chunk, a usage chunk and [DONE]: %v", len(evs), evs)
	}
	var text strings.Builder
	for i, e := range evs[:len(evs)-1] {
		var ch struct {
			Object  string
			Choices []struct {
				Delta struct {
					Role    string
					Content string
				}
				Finish *string `json:"finish_reason"`
			}
			Usage *struct {
				Total int `json:"total_tokens"`
			}
		}
		decode(t, e.data, &ch)
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("event %d: object %q, want chat.completion.chunk", i, ch.Object)
		}
		switch {
		case i == 0 && (len(ch.Choices) != 1 || ch.Choices[0].Delta.Role != "assistant"):
			t.Errorf("first chunk: got %s, want the assistant role", e.data)
		case i == 5 && (len(ch.Choices) != 1 || ch.Choices[0].Finish == nil || *ch.Choices[0].Finish != "stop"):
			t.Errorf("stop chunk: got %s, want finish_reason stop", e.data)
		case i == 6 && (len(ch.Choices) != 0 || ch.Usage == nil || ch.Usage.Total != 6):
			t.Errorf("usage chunk: got %s, want no choices and 6 tokens", e.data)
		case len(ch.Choices) > 0:
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if text.String() != fourWords {
		t.Errorf("text: got %q, want %q", text.String(), fourWords)
	}
}

// The fields and events Anthropic clients read.
func TestAnthropicShape(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{Chunks: 4})
	_, body := do(t, client(t, 0), s.URL+messagesPath, bodies[messagesPath])
	var m struct {
		ID, Type, Role, Model string
		Content               []struct{ Type, Text string }
		StopReason            string `json:"stop_reason"`
		Usage                 struct {
			In  int `json:"input_tokens"`
			Out int `json:"output_tokens"`
		}
	}
	decode(t, body, &m)
	if m.ID == "" || m.Type != "message" || m.Role != "assistant" || m.Model != "m" || m.StopReason != "end_turn" {
		t.Errorf("got %s, want an assistant message of model m, end_turn", body)
	}
	if len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != fourWords {
		t.Errorf("content: got %+v, want one text block %q", m.Content, fourWords)
	}
	if m.Usage.In != 2 || m.Usage.Out != 4 {
		t.Errorf("usage: got %+v, want 2 in, 4 out", m.Usage)
	}

	_, evs := stream(t, s, messagesPath, streamBody(messagesPath))
	var names []string
	var text strings.Builder
	for _, e := range evs {
		names = append(names, e.name)
		var d struct {
			Type  string
			Delta struct{ Type, Text string }
		}
		decode(t, e.data, &d)
		if d.Type != e.name {
			t.Errorf("event %s: data type %q, want the event's name", e.name, d.Type)
		}
		if e.name == "content_block_delta" {
			if d.Delta.Type != "text_delta" {
				t.Errorf("delta type: got %q, want text_delta", d.Delta.Type)
			}
			text.WriteString(d.Delta.Text)
		}
	}
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events: got %v, want %v", names, want)
	}
	if text.String() != fourWords {
		t.Errorf("text: got %q, want %q", text.String(), fourWords)
	}
	var delta struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		}
		Usage struct {
			Out int `json:"output_tokens"`
		}
	}
	decode(t, evs[7].data, &delta)
	if delta.Delta.StopReason != "end_turn" || delta.Usage.Out != 4 {
		t.Errorf("message_delta: got %s, want end_turn and 4 output tokens", evs[7].data)
	}
}

type llamaResult struct {
	Content         string
	Stop            bool
	IDSlot          int `json:"id_slot"`
	TokensPredicted int `json:"tokens_predicted"`
	TokensEvaluated int `json:"tokens_evaluated"`
}

// llama.cpp's native completion, streaming and not.
func TestLlamaCPPShape(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{Chunks: 4})
	_, body := do(t, client(t, 0), s.URL+completionPath, bodies[completionPath])
	var r llamaResult
	decode(t, body, &r)
	if want := (llamaResult{fourWords, true, 0, 4, 2}); r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}

	_, evs := stream(t, s, completionPath, streamBody(completionPath))
	if len(evs) != 5 {
		t.Fatalf("got %d events, want 4 content and a last one: %v", len(evs), evs)
	}
	var text strings.Builder
	for i, e := range evs {
		if e.name != "" {
			t.Errorf("event %d: named %q, want data only", i, e.name)
		}
		var r llamaResult
		decode(t, e.data, &r)
		if r.Stop != (i == 4) {
			t.Errorf("event %d: stop %v, want %v", i, r.Stop, i == 4)
		}
		text.WriteString(r.Content)
	}
	if text.String() != fourWords {
		t.Errorf("text: got %q, want %q", text.String(), fourWords)
	}
}

// slotsOf fetches GET /slots as (id, is_processing) pairs.
func slotsOf(t *testing.T, s *mockllm.Server) []bool {
	t.Helper()
	resp, err := client(t, 0).Get(s.URL + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var slots []struct {
		ID           int
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		t.Fatal(err)
	}
	busy := make([]bool, len(slots))
	for i, sl := range slots {
		if sl.ID != i {
			t.Errorf("slot %d has id %d", i, sl.ID)
		}
		busy[i] = sl.IsProcessing
	}
	return busy
}

// A request holds its slot while it is served; another that asks for the
// slot waits for it, as llama.cpp queues it, while one that takes any
// slot gets a free one.
func TestSlots(t *testing.T) {
	t.Parallel()
	s := start(t, "stall,ok", &mockllm.Server{Slots: 2})
	if got := slotsOf(t, s); !reflect.DeepEqual(got, []bool{false, false}) {
		t.Errorf("at rest: got %v, want two idle slots", got)
	}

	// The stalled request holds slot 1 until it gives up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+completionPath, strings.NewReader(`{"prompt":"x","id_slot":1}`))
	resp, err := client(t, 0).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := slotsOf(t, s); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("stalled: got %v, want slot 1 busy", got)
	}

	// Any slot: slot 0, at once.
	_, body := do(t, client(t, 0), s.URL+completionPath, `{"prompt":"x","id_slot":-1}`)
	var r llamaResult
	decode(t, body, &r)
	if r.IDSlot != 0 {
		t.Errorf("any slot: got slot %d, want 0", r.IDSlot)
	}

	// Slot 1: it waits until the stalled request ends.
	got := make(chan llamaResult, 1)
	go func() {
		resp, err := post(client(t, 0), s.URL+completionPath, `{"prompt":"x","id_slot":1}`)
		if err != nil {
			got <- llamaResult{IDSlot: -1}
			return
		}
		defer resp.Body.Close()
		var r llamaResult
		json.NewDecoder(resp.Body).Decode(&r)
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("slot 1 while busy: got %+v, want it to wait", r)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if r := <-got; r.IDSlot != 1 || !r.Stop {
		t.Errorf("slot 1 once free: got %+v, want a completion in slot 1", r)
	}

	// A slot the server does not have.
	if resp, body := do(t, client(t, 0), s.URL+completionPath, `{"prompt":"x","id_slot":2}`); resp.StatusCode != 400 {
		t.Errorf("slot 2: got %d %s, want 400", resp.StatusCode, body)
	}
}

// Without Slots, GET /slots answers as llama.cpp does without slots.
func TestNoSlots(t *testing.T) {
	t.Parallel()
	s := start(t, "", nil)
	resp, err := client(t, 0).Get(s.URL + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("got %d, want 501", resp.StatusCode)
	}
}

// A body that is not JSON gets a 400 in the API's shape, when the step
// would have generated.
func TestBadBody(t *testing.T) {
	t.Parallel()
	s := start(t, "", nil)
	resp, body := do(t, client(t, 0), s.URL+messagesPath, "{")
	if want := `{"error":{"message":"Bad Request","type":"invalid_request_error"},"type":"error"}`; resp.StatusCode != 400 || body != want {
		t.Errorf("got %d %s, want 400 %s", resp.StatusCode, body, want)
	}
	if ra, ms := resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"); ra != "" || ms != "" {
		t.Errorf("got Retry-After %q and Retry-After-Ms %q, want neither: a bad request is not asked to wait", ra, ms)
	}
}

// With Capacity, completions past it get 429 at once, counted as
// over-capacity, and Stats reports the peak generating at once.
func TestCapacity(t *testing.T) {
	// Logf is told of each model request once it has its place.
	logged := make(chan string, 16)
	s := &mockllm.Server{Capacity: 2, Chunks: 1, ChunkDelay: time.Hour, Logf: func(f string, a ...any) { logged <- fmt.Sprintf(f, a...) }}
	if err := s.Start(""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for range 2 { // two completions that hold the capacity until cancel
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	<-logged // the two take their places; each waits an hour for its chunk
	<-logged
	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" {
		t.Errorf("a third completion: %d with Retry-After %q, want 429 without one", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	st := s.Stats()
	if st.Peak != 2 || st.Paths["/v1/chat/completions"]["over-capacity"] != 1 {
		t.Errorf("stats %+v, want a peak of 2 and 1 over-capacity", st)
	}
	cancel()
	wg.Wait()
}
