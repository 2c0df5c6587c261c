package sse

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// A Kind is what an event means to the commit point: whether it carries
// the answer, ends it, or fails it.
type Kind uint8

const (
	// Preamble is an event that carries nothing of the answer yet, which
	// the Transport holds before the commit: Anthropic's message_start,
	// ping and an empty text or thinking block's start; an OpenAI chat
	// chunk with only the role, or none but Azure's prompt filter
	// results; the Responses API's response.created, response.queued and
	// response.in_progress, and an output item or content part added
	// empty.
	Preamble Kind = iota
	// Content is an event that carries the answer (text, a tool call,
	// reasoning, a finish reason or usage), or one outlast does not know.
	Content
	// End is the stream's last event: OpenAI's data: [DONE], Anthropic's
	// message_stop, the Responses API's response.completed and
	// response.incomplete (the API's own end of an answer cut by
	// max_output_tokens or a content filter, not a failure).
	End
	// Failure is an error in place of the answer: an event named error,
	// Anthropic's {"type":"error",…}, an OpenAI chunk with an error
	// object, the Responses API's error and response.failed.
	Failure
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Preamble:
		return "preamble"
	case Content:
		return "content"
	case End:
		return "end"
	case Failure:
		return "failure"
	}
	return "Kind(?)"
}

// fields is what the kinds read of an event's JSON data, for every API
// at once: one decoding a judged event.
type fields struct {
	Type    string          `json:"type"`
	Object  string          `json:"object"`
	Error   json.RawMessage `json:"error"`
	Code    json.RawMessage `json:"code"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Delta struct {
			Content          *string         `json:"content"`
			Refusal          *string         `json:"refusal"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			FunctionCall     json.RawMessage `json:"function_call"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
		} `json:"delta"`
		Text         *string `json:"text"` // a legacy completion's
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	ContentBlock struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"content_block"`
	Item struct {
		Type    string            `json:"type"`
		Content []json.RawMessage `json:"content"`
		Summary []json.RawMessage `json:"summary"`
	} `json:"item"`
	Part struct {
		Text string `json:"text"`
	} `json:"part"`
	Response struct {
		Error json.RawMessage `json:"error"`
	} `json:"response"`
}

// KindOf returns the kind of ev, an event with data. It decodes the
// event's JSON; data that is not JSON is Content, as outlast does not
// know it.
func KindOf(ev *Event) Kind {
	switch string(ev.Name) {
	case "error", "response.failed":
		return Failure
	}
	if string(ev.Data) == "[DONE]" {
		return End
	}
	f, typ, ok := decode(ev)
	if !ok {
		return Content
	}
	switch {
	case f.failed(typ):
		return Failure
	case f.Object == "chat.completion.chunk" || f.Choices != nil:
		return f.chatKind()
	}
	switch typ {
	case "message_start", "ping",
		"response.created", "response.queued", "response.in_progress":
		return Preamble
	case "content_block_start":
		if b := f.ContentBlock; (b.Type == "text" || b.Type == "thinking") && b.Text == "" && b.Thinking == "" {
			return Preamble
		}
	case "response.output_item.added":
		if (f.Item.Type == "message" || f.Item.Type == "reasoning") && len(f.Item.Content) == 0 && len(f.Item.Summary) == 0 {
			return Preamble
		}
	case "response.content_part.added", "response.reasoning_summary_part.added":
		if f.Part.Text == "" {
			return Preamble
		}
	case "message_stop", "response.completed", "response.incomplete":
		return End
	}
	return Content
}

// failed reports whether an event of type typ with these fields is an
// error: Anthropic's and the Responses API's error type, the Responses
// API's response.failed, or an error object at the top, as an OpenAI
// chunk or llama.cpp sends one.
func (f *fields) failed(typ string) bool {
	return typ == "error" || typ == "response.failed" || isObject(f.Error)
}

// chatKind is the kind of an OpenAI chat chunk (or a legacy completion's):
// Preamble while no choice carries anything but its role, and a chunk
// without choices carries no usage (Azure's first chunk holds only its
// prompt filter results).
func (f *fields) chatKind() Kind {
	if len(f.Choices) == 0 {
		if present(f.Usage) {
			return Content
		}
		return Preamble
	}
	for _, c := range f.Choices {
		d := c.Delta
		if c.FinishReason != nil || nonEmpty(c.Text) || nonEmpty(d.Content) || nonEmpty(d.Refusal) || nonEmpty(d.ReasoningContent) ||
			nonEmpty(d.Reasoning) || present(d.ToolCalls) || present(d.FunctionCall) {
			return Content
		}
	}
	return Preamble
}

// IsFailure reports whether ev, an event with data, is a Failure, as
// KindOf would say, decoding the data only when it may name an error:
// a relay asks it of every event it forwards.
func IsFailure(ev *Event) bool {
	switch string(ev.Name) {
	case "error", "response.failed":
		return true
	}
	if !mayNameError(ev.Data) {
		return false
	}
	f, typ, ok := decode(ev)
	return ok && f.failed(typ)
}

// decode reads ev's data, and returns it with the event's type: its
// name, as Anthropic's and the Responses API's events are named as their
// type, or the data's type. ok is false for data that is not JSON.
func decode(ev *Event) (f fields, typ string, ok bool) {
	if json.Unmarshal(ev.Data, &f) != nil {
		return f, "", false
	}
	typ = f.Type
	if len(ev.Name) > 0 {
		typ = string(ev.Name)
	}
	return f, typ, true
}

// mayNameError reports whether data could be a JSON error: one names
// "error" or "failed", as a key or a type, in any case (as encoding/json
// matches keys), unless an escape spells it.
func mayNameError(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	for i := 0; i+5 <= len(data); i++ {
		switch data[i] | 0x20 {
		case 'e':
			if bytes.EqualFold(data[i:i+5], []byte("error")) {
				return true
			}
		case 'f':
			if i+6 <= len(data) && bytes.EqualFold(data[i:i+6], []byte("failed")) {
				return true
			}
		}
	}
	return false
}

// ErrorOf returns, for ev, a Failure, the error's type or code as the
// API names it ("overloaded_error", "server_error", "insufficient_quota"),
// "unknown" if it names none, and the status the same error has when an
// API sends it as a response, which a policy judges it by: a code that
// is itself a status (llama.cpp's) is that status, a known type or code
// its status, and anything else 500.
func ErrorOf(ev *Event) (typ string, status int) {
	var f fields
	json.Unmarshal(ev.Data, &f)
	var e struct {
		Type string          `json:"type"`
		Code json.RawMessage `json:"code"`
	}
	switch {
	case isObject(f.Error):
		json.Unmarshal(f.Error, &e)
	case isObject(f.Response.Error): // response.failed
		json.Unmarshal(f.Response.Error, &e)
	default: // the Responses API's error event: its code at the top
		e.Code = f.Code
	}
	var code string
	var number int
	if json.Unmarshal(e.Code, &code) != nil && json.Unmarshal(e.Code, &number) == nil && number >= 400 && number <= 599 {
		return e.Type, number
	}
	for _, t := range []string{code, e.Type} {
		if s, ok := errorStatus[t]; ok {
			return t, s
		}
	}
	switch {
	case code != "":
		return code, http.StatusInternalServerError
	case e.Type != "":
		return e.Type, http.StatusInternalServerError
	}
	return "unknown", http.StatusInternalServerError
}

// errorStatus maps an API's error types and codes to the status the same
// error has as a response (Anthropic's error types; OpenAI's types and
// codes, the Responses API's among them).
var errorStatus = map[string]int{
	"overloaded_error":        529,
	"rate_limit_error":        http.StatusTooManyRequests,
	"rate_limit_exceeded":     http.StatusTooManyRequests,
	"insufficient_quota":      http.StatusTooManyRequests,
	"timeout_error":           http.StatusGatewayTimeout,
	"invalid_request_error":   http.StatusBadRequest,
	"invalid_prompt":          http.StatusBadRequest,
	"context_length_exceeded": http.StatusBadRequest,
	"authentication_error":    http.StatusUnauthorized,
	"invalid_api_key":         http.StatusUnauthorized,
	"permission_error":        http.StatusForbidden,
	"not_found_error":         http.StatusNotFound,
	"request_too_large":       http.StatusRequestEntityTooLarge,
	"server_error":            http.StatusInternalServerError,
	"api_error":               http.StatusInternalServerError,
}

// present reports whether a JSON value is there and not null.
func present(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// isObject reports whether a JSON value is an object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }
