package mockllm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// api is one of the wire formats the server speaks: how its responses,
// stream events and errors look.
type api interface {
	// whole is the body of a non-streaming response.
	whole(r *reply) any
	// head, chunk and tail are a streaming response's events: those
	// before the content, the content chunk i, and those after it.
	head(r *reply) []event
	chunk(r *reply, i int) event
	tail(r *reply) []event
	// malformed is content chunk i's event cut short inside its text,
	// so that its data is not JSON.
	malformed(r *reply, i int) event
	// errorBody is the body of an error response with this status and
	// message.
	errorBody(status int, message string) []byte
	// failure is the error event a stream sends in place of content
	// chunk i, as the API does when it fails mid-answer, and the status
	// the same error has as a response.
	failure(r *reply, i int) (event, int)
}

// event is one server-sent event; name is empty for data-only events.
type event struct {
	name string
	data []byte
}

// words are the deterministic text of every response; chunk i of the
// canonical text is word i mod 9, so that the text depends only on the
// chunk count.
var words = strings.Fields("The quick brown fox jumps over the lazy dog.")

// canonical returns the canonical text in n content chunks: the words,
// each after a space but the first.
func canonical(n int) []string {
	pieces := make([]string, n)
	for i := range pieces {
		pieces[i] = words[i%len(words)]
		if i > 0 {
			pieces[i] = " " + pieces[i]
		}
	}
	return pieces
}

// continuation returns the content chunks that follow prefix in pieces,
// the first cut to the rest of its word if prefix ends inside it, and
// whether prefix is a prefix of their text at all.
func continuation(pieces []string, prefix string) ([]string, bool) {
	if !strings.HasPrefix(strings.Join(pieces, ""), prefix) {
		return nil, false
	}
	off := 0
	for i, p := range pieces {
		if off+len(p) > len(prefix) {
			return append([]string{p[len(prefix)-off:]}, pieces[i+1:]...), true
		}
		off += len(p)
	}
	return []string{}, true
}

// reply is what the server needs to answer one model request.
type reply struct {
	id      string
	model   string
	created int64
	stream  bool
	usage   bool     // OpenAI's stream_options.include_usage
	want    int      // llama.cpp's id_slot: the slot asked for, or -1
	slot    int      // the slot serving it
	task    int      // the request's number, from 1
	prompt  int      // prompt tokens: words in the request's text
	pieces  []string // the content chunks, one a token

	// The Responses API's: background and store as asked, and the
	// stream's events, made once (see responses.events).
	background bool
	store      bool
	events     []event
}

// word returns content chunk i, or "" past the end.
func (r *reply) word(i int) string {
	if i < 0 || i >= len(r.pieces) {
		return ""
	}
	return r.pieces[i]
}

func (r *reply) text() string { return strings.Join(r.pieces, "") }

// cutAfter returns e with its data cut just after the first key, which
// opens the chunk's text: `data: {…"content":"` and no more, as a proxy
// that cut an event short would send.
func cutAfter(e event, key string) event {
	if i := bytes.Index(e.data, []byte(key)); i >= 0 {
		e.data = e.data[:i+len(key)]
	}
	return e
}

// js marshals v, which is always one of this package's shapes.
func js(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("mockllm: " + err.Error())
	}
	return b
}

// errorMessage is the message of an error response with this status.
func errorMessage(status int) string {
	if status == 529 {
		return "Overloaded"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "Error"
}

// openAI speaks POST /v1/chat/completions.
type openAI struct{}

type openAIChoice struct {
	Index        int            `json:"index"`
	Message      *openAIMessage `json:"message,omitempty"`
	Delta        *openAIMessage `json:"delta,omitempty"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type openAIMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type openAICompletion struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	Choices           []openAIChoice `json:"choices"`
	Usage             *openAIUsage   `json:"usage,omitempty"`
	SystemFingerprint string         `json:"system_fingerprint"`
}

func ptr[T any](v T) *T { return &v }

func (openAI) usage(r *reply) *openAIUsage {
	return &openAIUsage{PromptTokens: r.prompt, CompletionTokens: len(r.pieces), TotalTokens: r.prompt + len(r.pieces)}
}

func (openAI) completion(r *reply, object string, choices ...openAIChoice) openAICompletion {
	return openAICompletion{ID: r.id, Object: object, Created: r.created, Model: r.model, Choices: choices, SystemFingerprint: "fp_mockllm"}
}

func (a openAI) whole(r *reply) any {
	c := a.completion(r, "chat.completion", openAIChoice{
		Message:      &openAIMessage{Role: "assistant", Content: ptr(r.text())},
		FinishReason: ptr("stop"),
	})
	c.Usage = a.usage(r)
	return c
}

func (a openAI) chunkEvent(r *reply, choices ...openAIChoice) event {
	if choices == nil {
		choices = []openAIChoice{}
	}
	return event{data: js(a.completion(r, "chat.completion.chunk", choices...))}
}

func (a openAI) head(r *reply) []event {
	return []event{a.chunkEvent(r, openAIChoice{Delta: &openAIMessage{Role: "assistant", Content: ptr("")}})}
}

func (a openAI) chunk(r *reply, i int) event {
	return a.chunkEvent(r, openAIChoice{Delta: &openAIMessage{Content: ptr(r.word(i))}})
}

func (a openAI) tail(r *reply) []event {
	evs := []event{a.chunkEvent(r, openAIChoice{Delta: &openAIMessage{}, FinishReason: ptr("stop")})}
	if r.usage {
		// With stream_options.include_usage, a last chunk with no
		// choices carries the usage.
		c := a.completion(r, "chat.completion.chunk")
		c.Choices, c.Usage = []openAIChoice{}, a.usage(r)
		evs = append(evs, event{data: js(c)})
	}
	return append(evs, event{data: []byte("[DONE]")})
}

func (a openAI) malformed(r *reply, i int) event {
	return cutAfter(a.chunk(r, i), `"content":"`)
}

// failure is OpenAI's error chunk: the error object alone, as data.
func (a openAI) failure(*reply, int) (event, int) {
	return event{data: a.errorBody(http.StatusInternalServerError, serverErrorMessage)}, http.StatusInternalServerError
}

// serverErrorMessage is the message of OpenAI's server_error.
const serverErrorMessage = "The server had an error while processing your request. Sorry about that!"

func (openAI) errorBody(status int, message string) []byte {
	typ, code := "server_error", any(nil)
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	return js(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": code,
	}})
}

// anthropic speaks POST /v1/messages.
type anthropic struct{}

type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

func (anthropic) message(r *reply) anthropicMessage {
	return anthropicMessage{ID: r.id, Type: "message", Role: "assistant", Model: r.model, Content: []anthropicBlock{}}
}

func (a anthropic) whole(r *reply) any {
	m := a.message(r)
	m.Content = []anthropicBlock{{Type: "text", Text: r.text()}}
	m.StopReason = ptr("end_turn")
	m.Usage = anthropicUsage{InputTokens: r.prompt, OutputTokens: len(r.pieces)}
	return m
}

func (anthropic) event(typ string, fields map[string]any) event {
	fields["type"] = typ
	return event{name: typ, data: js(fields)}
}

func (a anthropic) head(r *reply) []event {
	m := a.message(r)
	m.Usage = anthropicUsage{InputTokens: r.prompt, OutputTokens: 1}
	return []event{
		a.event("message_start", map[string]any{"message": m}),
		a.event("content_block_start", map[string]any{"index": 0, "content_block": anthropicBlock{Type: "text"}}),
	}
}

func (a anthropic) chunk(r *reply, i int) event {
	return a.event("content_block_delta", map[string]any{"index": 0, "delta": map[string]string{"type": "text_delta", "text": r.word(i)}})
}

func (a anthropic) tail(r *reply) []event {
	return []event{
		a.event("content_block_stop", map[string]any{"index": 0}),
		a.event("message_delta", map[string]any{
			"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]int{"output_tokens": len(r.pieces)},
		}),
		a.event("message_stop", map[string]any{}),
	}
}

func (a anthropic) malformed(r *reply, i int) event {
	return cutAfter(a.chunk(r, i), `"text":"`)
}

// failure is Anthropic's overload mid-stream: an error event, as it sends
// one under load.
func (anthropic) failure(*reply, int) (event, int) {
	return event{name: "error", data: js(anthropicError(529, errorMessage(529)))}, 529
}

func (anthropic) errorBody(status int, message string) []byte {
	return js(anthropicError(status, message))
}

// anthropicError is the Anthropic API's error object for a status.
func anthropicError(status int, message string) map[string]any {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
		504: "timeout_error", 529: "overloaded_error",
	}[status]
	if typ == "" {
		typ = "api_error"
		if status < 500 {
			typ = "invalid_request_error"
		}
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}}
}

// llamaCPP speaks llama.cpp's native POST /completion.
type llamaCPP struct{}

type llamaResult struct {
	Index           int          `json:"index"`
	Content         string       `json:"content"`
	Tokens          []int        `json:"tokens"`
	IDSlot          int          `json:"id_slot"`
	Stop            bool         `json:"stop"`
	Model           string       `json:"model,omitempty"`
	TokensPredicted int          `json:"tokens_predicted"`
	TokensEvaluated int          `json:"tokens_evaluated"`
	StopType        string       `json:"stop_type,omitempty"`
	StoppingWord    *string      `json:"stopping_word,omitempty"`
	TokensCached    int          `json:"tokens_cached,omitempty"`
	Truncated       *bool        `json:"truncated,omitempty"`
	HasNewLine      *bool        `json:"has_new_line,omitempty"`
	Timings         *llamaTiming `json:"timings,omitempty"`
}

type llamaTiming struct {
	PromptN    int `json:"prompt_n"`
	PredictedN int `json:"predicted_n"`
}

// final is the last result: the whole content when not streaming, and
// none of it when streaming, with the totals.
func (llamaCPP) final(r *reply, content string) llamaResult {
	return llamaResult{
		Content: content, Tokens: []int{}, IDSlot: r.slot, Stop: true, Model: r.model,
		TokensPredicted: len(r.pieces), TokensEvaluated: r.prompt,
		StopType: "eos", StoppingWord: ptr(""), TokensCached: r.prompt + len(r.pieces),
		Truncated: ptr(false), HasNewLine: ptr(false),
		Timings: &llamaTiming{PromptN: r.prompt, PredictedN: len(r.pieces)},
	}
}

func (l llamaCPP) whole(r *reply) any { return l.final(r, r.text()) }

func (llamaCPP) head(*reply) []event { return nil }

func (llamaCPP) chunk(r *reply, i int) event {
	return event{data: js(llamaResult{
		Content: r.word(i), Tokens: []int{}, IDSlot: r.slot,
		TokensPredicted: i + 1, TokensEvaluated: r.prompt,
	})}
}

// tail is the final result; llama.cpp's native stream has no [DONE].
func (l llamaCPP) tail(r *reply) []event { return []event{{data: js(l.final(r, ""))}} }

func (l llamaCPP) malformed(r *reply, i int) event {
	return cutAfter(l.chunk(r, i), `"content":"`)
}

// failure is llama.cpp's error object, as data.
func (llamaCPP) failure(*reply, int) (event, int) {
	return event{data: llamaError(http.StatusInternalServerError, "Internal server error")}, http.StatusInternalServerError
}

func (llamaCPP) errorBody(status int, message string) []byte {
	return llamaError(status, message)
}

// llamaError is llama.cpp's error body.
func llamaError(status int, message string) []byte {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 501: "not_supported_error", 503: "unavailable_error",
	}[status]
	if typ == "" {
		typ = "server_error"
		if status < 500 {
			typ = "invalid_request_error"
		}
	}
	return js(map[string]any{"error": map[string]any{"code": status, "message": message, "type": typ}})
}

// request is what the server reads from a model request's body: the
// fields of all three formats.
type request struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	IDSlot        *int            `json:"id_slot"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// The Responses API's.
	Input        json.RawMessage `json:"input"`
	Instructions string          `json:"instructions"`
	Background   bool            `json:"background"`
	Store        *bool           `json:"store"`
	// The answer's bound: max_tokens (chat, Messages),
	// max_completion_tokens (chat) or max_output_tokens (Responses).
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
	MaxOutputTokens     int `json:"max_output_tokens"`
}

// countWords counts the words in a request's text: the content of its
// messages (or the Responses API's input items), as a string or as parts
// with text, its prompt, its input as a string and its instructions.
func countWords(req *request) int {
	n := 0
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	json.Unmarshal(req.Messages, &msgs)
	json.Unmarshal(req.Input, &msgs)
	for _, m := range msgs {
		n += wordsIn(m.Content)
	}
	return n + wordsIn(req.Prompt) + wordsIn(req.Input) + len(strings.Fields(req.Instructions))
}

// prefill returns the text of a chat request's last message if that is
// an assistant message, a prefill, and whether it is. The text is the
// content as a string, or its parts' text joined.
func prefill(req *request) (string, bool) {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(req.Messages, &msgs) != nil || len(msgs) == 0 || msgs[len(msgs)-1].Role != "assistant" {
		return "", false
	}
	content := msgs[len(msgs)-1].Content
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), true
}

// prefillRefusal is the message of the 400 that refuse-prefill sends, as
// Anthropic's models without prefill word it.
const prefillRefusal = "This model does not support assistant message prefill. The conversation must end with a user message."

func wordsIn(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(strings.Fields(s))
	}
	var parts []json.RawMessage
	json.Unmarshal(raw, &parts)
	n := 0
	for _, p := range parts {
		var part struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &part) == nil && part.Text != "" {
			n += len(strings.Fields(part.Text))
		} else {
			n += wordsIn(p)
		}
	}
	return n
}
