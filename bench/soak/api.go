package main

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The wire format the callers and the fake upstream share: OpenAI's chat
// completions, with the request's tag in "user" and the attempt that
// answered in the completion's id, so that a caller can tell its own
// answer, and the attempt it came from, from any other.

const (
	chatPath = "/v1/chat/completions"
	model    = "soak-model"
	text     = "The quick brown fox jumps over the lazy dog."
)

// chatRequest is the part of a request body the upstream reads.
type chatRequest struct {
	User   string `json:"user"`
	Stream bool   `json:"stream"`
}

// requestBody returns the body of the request tagged tag.
func requestBody(tag string, stream bool) []byte {
	return []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"Say something short."}],` +
		`"stream":` + strconv.FormatBool(stream) + `,"user":"` + tag + `"}`)
}

// completionID is the id of the completion that attempt n of the request
// tagged tag gets.
func completionID(tag string, n int) string {
	return "chatcmpl-" + tag + "-" + strconv.Itoa(n)
}

// pieces cuts text into chunks parts at word boundaries, the stream's
// deltas; past the words, a delta is empty.
func pieces(chunks int) []string {
	words := strings.SplitAfter(text, " ")
	out := make([]string, chunks)
	per := max(1, len(words)/chunks)
	for i := range out {
		lo := i * per
		hi := min(lo+per, len(words))
		if i == chunks-1 {
			hi = len(words)
		}
		if lo < len(words) {
			out[i] = strings.Join(words[lo:hi], "")
		}
	}
	return out
}

func completionBody(id string) []byte {
	return []byte(`{"id":"` + id + `","object":"chat.completion","created":1700000000,"model":"` + model + `",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":` + quote(text) + `},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`)
}

// chunkEvent is the event of one delta; finish, if not empty, ends the
// choice.
func chunkEvent(id, delta, finish string) []byte {
	fr := "null"
	if finish != "" {
		fr = quote(finish)
	}
	return []byte(`data: {"id":"` + id + `","object":"chat.completion.chunk","created":1700000000,"model":"` + model + `",` +
		`"choices":[{"index":0,"delta":{"content":` + quote(delta) + `},"finish_reason":` + fr + `}]}` + "\n\n")
}

// doneEvent ends an OpenAI stream.
const doneEvent = "data: [DONE]\n\n"

// errorBody is OpenAI's error JSON for status, with Anthropic's shape for
// its overload.
func errorBody(status int) []byte {
	if status == 529 {
		return []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}
	return []byte(`{"error":{"message":"soak: injected ` + strconv.Itoa(status) + `","type":"server_error","code":null}}`)
}

// overloadedEvent is the error event a stream opens with for
// faultErrorEvent.
const overloadedEvent = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

func quote(s string) string {
	b, _ := json.Marshal(s) // a string: it cannot fail
	return string(b)
}
