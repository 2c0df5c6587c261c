package sse

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/outlast-llm/outlast/internal/jsonscan"
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

// facts are what the kinds read of an event's JSON data, for every API at
// once, in one walk that decodes nothing and allocates nothing: the
// commit point asks them of a stream's first events, and a relay whether
// each event it forwards is a failure. Keys are matched as the APIs write
// them; strings are compared raw, as type names hold no escapes.
type facts struct {
	typ, object []byte // the data's "type" and "object"
	errorObject bool   // an "error" member that is an object
	usage       bool   // a "usage" member that is not null
	choices     bool   // a "choices" array: an OpenAI chunk, or a legacy completion's
	carries     bool   // one of its choices carries the answer
	blockType   []byte // Anthropic's content_block's type
	blockFull   bool   // and its text or thinking is not empty
	itemType    []byte // the Responses API's output item's type
	itemFull    bool   // and its content or summary is not empty
	partFull    bool   // its content part's text is not empty
}

// skim reads the facts of data, a JSON object, and reports whether it is
// one: anything else is an event outlast does not know.
func skim(data []byte) (f facts, ok bool) {
	s := jsonscan.Scanner{B: data}
	ok = s.Members(func(key, v []byte) {
		switch string(key) {
		case "type":
			f.typ = rawString(v)
		case "object":
			f.object = rawString(v)
		case "error":
			f.errorObject = v[0] == '{'
		case "usage":
			f.usage = !isNull(v)
		case "choices":
			f.choices = v[0] == '['
			f.carries = f.choices && choicesCarry(v)
		case "content_block":
			f.blockType, f.blockFull = nil, false
			members(v, func(k, w []byte) {
				switch string(k) {
				case "type":
					f.blockType = rawString(w)
				case "text", "thinking":
					f.blockFull = f.blockFull || nonEmpty(w)
				}
			})
		case "item":
			f.itemType, f.itemFull = nil, false
			members(v, func(k, w []byte) {
				switch string(k) {
				case "type":
					f.itemType = rawString(w)
				case "content", "summary":
					f.itemFull = f.itemFull || len(w) > 2 && w[0] == '[' && !isEmptyArray(w)
				}
			})
		case "part":
			f.partFull = false
			members(v, func(k, w []byte) {
				if string(k) == "text" {
					f.partFull = nonEmpty(w)
				}
			})
		}
	})
	s.Space()
	return f, ok && s.I == len(data)
}

// choicesCarry reports whether one of an OpenAI chunk's choices carries
// the answer: a finish reason, a legacy completion's text, or a delta
// with content, a refusal, reasoning or a tool call.
func choicesCarry(v []byte) bool {
	carries := false
	s := jsonscan.Scanner{B: v}
	s.Elements(func(choice []byte) {
		members(choice, func(k, w []byte) {
			switch string(k) {
			case "finish_reason":
				carries = carries || !isNull(w)
			case "text":
				carries = carries || nonEmpty(w)
			case "delta":
				members(w, func(dk, dv []byte) {
					switch string(dk) {
					case "content", "refusal", "reasoning_content", "reasoning":
						carries = carries || nonEmpty(dv)
					case "tool_calls", "function_call":
						carries = carries || !isNull(dv)
					}
				})
			}
		})
	})
	return carries
}

// members walks v's members if v is an object.
func members(v []byte, member func(key, value []byte)) {
	if len(v) > 0 && v[0] == '{' {
		s := jsonscan.Scanner{B: v}
		s.Members(member)
	}
}

// rawString returns a JSON string's contents as they stand, or nil for a
// value that is not a string.
func rawString(v []byte) []byte {
	if len(v) >= 2 && v[0] == '"' {
		return v[1 : len(v)-1]
	}
	return nil
}

func isNull(v []byte) bool { return string(v) == "null" }

// nonEmpty reports whether v is a string that is not empty.
func nonEmpty(v []byte) bool { return len(v) > 2 && v[0] == '"' }

// isEmptyArray reports whether v, an array, holds nothing but space.
func isEmptyArray(v []byte) bool {
	for _, c := range v[1 : len(v)-1] {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// KindOf returns the kind of ev, an event with data. Data that is not a
// JSON object is Content, as outlast does not know it; so is data with
// text (see hasText), and a failure only if it may name an error (see
// mayNameError), as IsFailure reads it.
func KindOf(ev *Event) Kind {
	if failureType(ev.Name) {
		return Failure
	}
	if string(ev.Data) == "[DONE]" {
		return End
	}
	if len(ev.Name) == 0 && !mayNameError(ev.Data) && hasText(ev.Data) {
		return Content
	}
	f, typ, ok := decode(ev)
	if !ok {
		return Content
	}
	switch {
	case f.failed(typ) && mayNameError(ev.Data):
		return Failure
	case string(f.object) == "chat.completion.chunk" || f.choices:
		return f.chatKind()
	case endType(typ):
		return End
	}
	switch string(typ) {
	case "message_start", "ping",
		"response.created", "response.queued", "response.in_progress":
		return Preamble
	case "content_block_start":
		if t := string(f.blockType); (t == "text" || t == "thinking") && !f.blockFull {
			return Preamble
		}
	case "response.output_item.added":
		if t := string(f.itemType); (t == "message" || t == "reasoning") && !f.itemFull {
			return Preamble
		}
	case "response.content_part.added", "response.reasoning_summary_part.added":
		if !f.partFull {
			return Preamble
		}
	}
	return Content
}

// failureType reports whether typ, an event's name or its data's type,
// is a failure's: an error, or the Responses API's response.failed.
// IsFailureName reports whether name, an event's, names a failure
// whatever its data holds: "error" or "response.failed".
func IsFailureName(name []byte) bool { return failureType(name) }

func failureType(typ []byte) bool {
	switch string(typ) {
	case "error", "response.failed":
		return true
	}
	return false
}

// endType reports whether typ, an event's name or its data's type, is an
// end's: Anthropic's message_stop, the Responses API's response.completed
// or response.incomplete.
func endType(typ []byte) bool {
	switch string(typ) {
	case "message_stop", "response.completed", "response.incomplete":
		return true
	}
	return false
}

// failed reports whether an event of type typ with these facts is an
// error: Anthropic's and the Responses API's error type, the Responses
// API's response.failed, or an error object at the top, as an OpenAI
// chunk or llama.cpp sends one.
func (f *facts) failed(typ []byte) bool {
	return failureType(typ) || f.errorObject
}

// chatKind is the kind of an OpenAI chat chunk (or a legacy completion's):
// Preamble while no choice carries anything but its role, and a chunk
// without choices carries no usage (Azure's first chunk holds only its
// prompt filter results).
func (f *facts) chatKind() Kind {
	if f.carries || f.usage {
		return Content
	}
	return Preamble
}

// IsFailure reports whether ev, an event with data, is a Failure, as
// KindOf would say, reading the data only when it may name an error: a
// relay asks it of every event it forwards.
func IsFailure(ev *Event) bool {
	if failureType(ev.Name) {
		return true
	}
	if !mayNameError(ev.Data) {
		return false
	}
	f, typ, ok := decode(ev)
	return ok && f.failed(typ)
}

// IsEnd reports whether ev, an event with data, is an End, as KindOf
// would say, reading the data only when it may be an end: a relay asks it
// of every event it forwards.
func IsEnd(ev *Event) bool {
	switch {
	case endType(ev.Name):
	case len(ev.Name) == 0:
		if string(ev.Data) != "[DONE]" && !mayNameEnd(ev.Data) {
			return false
		}
	default:
		if string(ev.Data) != "[DONE]" {
			return false // the event's name is its type, and not an end's
		}
	}
	return KindOf(ev) == End
}

// EndsWithEvent reports whether ev, a stream's first event with data,
// starts a stream of an API that ends with an End of its own, so that a
// clean end of the stream before it is a break: an OpenAI chat chunk or
// a legacy completion's (data with a "choices" array, Azure's prompt
// filter results among them), which data: [DONE] ends; Anthropic's
// message_start (message_stop); the Responses API's response.created
// or any of its response events (response.completed or .incomplete, or
// response.failed). A stream of events outlast does not know has no
// such end.
func EndsWithEvent(ev *Event) bool {
	f, typ, ok := decode(ev)
	if !ok {
		return false
	}
	return f.choices || string(f.object) == "chat.completion.chunk" ||
		string(typ) == "message_start" || bytes.HasPrefix(typ, []byte("response."))
}

// Finishes reports whether ev, an event with data, carries its answer's
// finish: a "finish_reason" (an OpenAI chunk's) or "stop_reason"
// (Anthropic's message_delta) that is a string, not null. Some servers
// end an OpenAI stream there, without data: [DONE]. A quote inside a JSON
// string is escaped, so a key found is a key.
func Finishes(ev *Event) bool {
	return namesString(ev.Data, `"finish_reason"`) || namesString(ev.Data, `"stop_reason"`)
}

// namesString reports whether data has a member key whose value is a
// string.
func namesString(data []byte, key string) bool {
	for {
		i := bytes.Index(data, []byte(key))
		if i < 0 {
			return false
		}
		data = bytes.TrimLeft(data[i+len(key):], " \t\r\n")
		if len(data) > 0 && data[0] == ':' {
			if v := bytes.TrimLeft(data[1:], " \t\r\n"); len(v) > 0 && v[0] == '"' {
				return true
			}
		}
	}
}

// mayNameEnd reports whether data may name an end's type: message_stop,
// response.completed or response.incomplete. Types are compared raw, as
// KindOf compares them. The ends are sought by their tails, in two
// searches rather than one for each whole name (BenchmarkKindOf's IsEnd
// measures them).
func mayNameEnd(data []byte) bool {
	return bytes.Contains(data, []byte(`_stop"`)) || bytes.Contains(data, []byte(`plete"`))
}

// decode reads ev's data, and returns its facts with the event's type:
// its name, as Anthropic's and the Responses API's events are named as
// their type, or the data's type. The type shares ev's bytes. ok is
// false for data that is not a JSON object.
func decode(ev *Event) (f facts, typ []byte, ok bool) {
	if f, ok = skim(ev.Data); !ok {
		return f, nil, false
	}
	if len(ev.Name) > 0 {
		return f, ev.Name, true
	}
	return f, f.typ, true
}

// mayNameError reports whether data may be a failure: only data that
// holds "error" can be one (an "error" key or type; the Responses API's
// response.failed holds the response's error object), unless its event's
// name says so.
func mayNameError(data []byte) bool {
	// "rror" rather than "error": JSON is full of e's, each a false start
	// of the search, and the r's are fewer (BenchmarkKindOf's IsFailure
	// of an OpenAI chunk measures it).
	return bytes.Contains(data, []byte("rror"))
}

// hasText reports whether data, unnamed event's, holds a member named
// content with a string value that is not empty, at any depth: an OpenAI
// chunk's delta with text, the usual event. Such data holds no failure
// unless it may name an error, and is Content whatever else it holds, so
// KindOf need not read it all. A quote inside a JSON string is escaped,
// so the quotes found are the text's own.
func hasText(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`"content":`))
		if i < 0 {
			return false
		}
		data = bytes.TrimLeft(data[i+len(`"content":`):], " ")
		if len(data) >= 2 && data[0] == '"' && data[1] != '"' {
			return true
		}
	}
}

// ErrorOf returns, for ev, a Failure, the error's type or code as the
// API names it ("overloaded_error", "server_error", "insufficient_quota"),
// "unknown" if it names none, and the status the same error has when an
// API sends it as a response, which a policy judges it by: a code that
// is itself a status (llama.cpp's) is that status, a known type or code
// its status, and anything else 500.
func ErrorOf(ev *Event) (typ string, status int) {
	var f struct {
		Error    json.RawMessage `json:"error"`
		Code     json.RawMessage `json:"code"`
		Response struct {
			Error json.RawMessage `json:"error"`
		} `json:"response"`
	}
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
		if e.Type == "" {
			return strconv.Itoa(number), number
		}
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

// isObject reports whether a JSON value is an object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}
