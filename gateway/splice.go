package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// streamAPI is the API a stream speaks, as its events show it.
type streamAPI uint8

const (
	apiUnknown   streamAPI = iota
	apiOpenAI              // chat.completion.chunk data events, then data: [DONE]
	apiAnthropic           // Messages events, from message_start to message_stop
)

// splice follows a stream forwarded to the caller, event by event, for its
// continuation: the answer's text as the caller has it, whether the answer
// is whole, and whether it can be continued safely. Once a continuation is
// under way it rewrites the new stream's events so that the caller reads
// one stream: the first stream's id, its choice and content-block indices,
// no second preamble, and the whitespace cut from the prefill's end
// neither lost nor repeated. Only whole events pass through it, so a break
// never leaves half an event with the caller.
type splice struct {
	api  streamAPI
	id   string          // the first stream's id: chatcmpl-… or msg_…
	text strings.Builder // the answer's text, as the caller has it
	why  string          // why the stream cannot be continued, once known
	// finished says a finish_reason or a stop_reason came: the answer is
	// whole, though its last events may not have.
	finished bool
	done     bool // the terminal event came: [DONE] or message_stop
	// broke says the upstream ended the stream with an error of its own
	// (an error event, or an OpenAI error chunk), which the splice kept
	// from the caller: the stream broke there, and may be continued.
	broke bool

	// Anthropic: the text block the answer is in, and whether it is open.
	block int
	open  bool

	// A continuation under way.
	cont     bool
	contBase int    // Anthropic: the index its block 0 maps to
	skipWS   string // whitespace cut from the prefill's end: dropped from the continuation's start
	contOpen bool   // Anthropic: its block 0 continues the open block
}

// continuable returns why the stream cannot be continued, or "".
func (s *splice) continuable() string {
	switch {
	case s.why != "":
		return s.why
	case s.api == apiUnknown:
		return "a stream whose events outlast does not know"
	}
	return ""
}

// begin starts a continuation whose prefill's end cut cut, whitespace
// that the caller already has.
func (s *splice) begin(cut string) {
	s.cont, s.skipWS = true, cut
	s.contOpen = s.api == apiAnthropic && s.open
	s.contBase = s.block
	if !s.open {
		s.contBase = s.block + 1
	}
}

// event observes ev, one whole event with its blank line, and returns
// what goes to the caller: ev itself, a rewritten event, or nil for none.
func (s *splice) event(ev []byte) []byte {
	name, data := parseEvent(ev)
	if data == nil {
		return ev // a comment, or an event without data: no client dispatches it
	}
	if s.api == apiUnknown {
		s.api = detectAPI(name, data)
	}
	switch s.api {
	case apiOpenAI:
		return s.openAI(ev, data)
	case apiAnthropic:
		return s.anthropic(ev, name, data)
	}
	return ev
}

// parseEvent returns an event's name and its data, the data lines joined
// by newlines, as WHATWG's event stream parsing reads them; data is nil
// when the event has none.
func parseEvent(ev []byte) (name string, data []byte) {
	for len(ev) > 0 {
		i := bytes.IndexAny(ev, "\r\n")
		line := ev
		if i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	return name, data
}

// detectAPI tells the stream's API from its first event with data.
func detectAPI(name string, data []byte) streamAPI {
	if name == "message_start" || bytes.HasPrefix(data, []byte(`{"type":"message_start"`)) {
		return apiAnthropic
	}
	var probe struct {
		Object string `json:"object"`
		Type   string `json:"type"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return apiUnknown
	}
	switch {
	case probe.Object == "chat.completion.chunk":
		return apiOpenAI
	case probe.Type == "message_start":
		return apiAnthropic
	}
	return apiUnknown
}

// oaChunk is what the splice reads of a chat.completion.chunk.
type oaChunk struct {
	ID      string          `json:"id"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string          `json:"role"`
			Content          *string         `json:"content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			FunctionCall     json.RawMessage `json:"function_call"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// openAI observes, and in a continuation rewrites, an OpenAI event.
func (s *splice) openAI(ev, data []byte) []byte {
	if string(data) == "[DONE]" {
		s.done = true
		return ev
	}
	var c oaChunk
	if err := json.Unmarshal(data, &c); err != nil {
		// Forwarded as it came, as any gateway would; it is not text
		// the splice can account for.
		s.unsupported("an event that is not a chunk outlast can read")
		return ev
	}
	if present(c.Error) {
		s.broke = true // kept from the caller, who may yet get the answer
		return nil
	}
	if s.id == "" {
		s.id = c.ID
	}
	keep := !s.cont
	content := ""
	for _, ch := range c.Choices {
		d := ch.Delta
		switch {
		case ch.Index != 0 || len(c.Choices) > 1:
			s.unsupported("more than one choice (n > 1)")
		case present(d.ToolCalls), present(d.FunctionCall):
			s.unsupported("a tool call")
		case d.ReasoningContent != nil && *d.ReasoningContent != "", d.Reasoning != nil && *d.Reasoning != "":
			s.unsupported("reasoning")
		}
		if d.Content != nil {
			content = *d.Content
			if s.cont {
				content = s.strip(content)
			}
			s.text.WriteString(content)
		}
		if ch.FinishReason != nil {
			s.finished = true
		}
		// A continuation's chunk goes on if it carries text, an end, or
		// anything but its role, which the caller has had.
		if content != "" || ch.FinishReason != nil || present(d.ToolCalls) || present(d.FunctionCall) {
			keep = true
		}
	}
	if len(c.Choices) == 0 {
		keep = true // the usage chunk
	}
	if !s.cont {
		return ev
	}
	if !keep {
		return nil
	}
	return rewriteChunk(data, s.id, content)
}

// present reports whether a JSON value is there and not null.
func present(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// rewriteChunk returns a continuation's chunk as the caller's stream
// carries it: with the first stream's id, its delta's text as content,
// and no role. Every other field is kept as it came.
func rewriteChunk(data []byte, id, content string) []byte {
	var chunk map[string]json.RawMessage
	if json.Unmarshal(data, &chunk) != nil || chunk == nil { // null is JSON too
		return eventOf("", data)
	}
	chunk["id"], _ = json.Marshal(id)
	var choices []map[string]json.RawMessage
	if json.Unmarshal(chunk["choices"], &choices) == nil && len(choices) == 1 {
		var delta map[string]json.RawMessage
		if json.Unmarshal(choices[0]["delta"], &delta) == nil {
			delete(delta, "role")
			if _, ok := delta["content"]; ok {
				delta["content"], _ = json.Marshal(content)
			}
			choices[0]["delta"], _ = json.Marshal(delta)
			chunk["choices"], _ = json.Marshal(choices)
		}
	}
	b, _ := json.Marshal(chunk)
	return eventOf("", b)
}

// eventOf returns an event named name (none if empty) with data.
func eventOf(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(append(append(b, "event: "...), name...), '\n')
	}
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	return b
}

// anEvent is what the splice reads of an Anthropic Messages event.
type anEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message struct {
		ID string `json:"id"`
	} `json:"message"`
	ContentBlock struct {
		Type string `json:"type"`
	} `json:"content_block"`
	Delta struct {
		Type       string  `json:"type"`
		Text       string  `json:"text"`
		StopReason *string `json:"stop_reason"`
	} `json:"delta"`
}

// anthropic observes, and in a continuation rewrites, an Anthropic
// event.
func (s *splice) anthropic(ev []byte, name string, data []byte) []byte {
	var e anEvent
	if err := json.Unmarshal(data, &e); err != nil {
		s.unsupported("an event that outlast cannot read")
		return ev
	}
	if name == "" {
		name = e.Type
	}
	index := e.Index
	if s.cont {
		index = s.contBase + e.Index
	}
	switch e.Type {
	case "message_start":
		if s.cont {
			return nil // the caller has the first stream's
		}
		s.id = e.Message.ID
	case "content_block_start":
		if e.ContentBlock.Type != "text" {
			s.unsupported("a " + e.ContentBlock.Type + " block")
		} else {
			s.block, s.open = index, true
		}
		if s.cont && e.Index == 0 && s.contOpen {
			return nil // it carries on the block the caller has open
		}
	case "content_block_delta":
		if e.Delta.Type != "text_delta" {
			s.unsupported("a " + e.Delta.Type)
			break
		}
		text := e.Delta.Text
		if s.cont {
			text = s.strip(text)
			if text == "" {
				return nil
			}
		}
		s.text.WriteString(text)
		if s.cont {
			return rewriteAnthropic(name, data, index, text, true)
		}
	case "content_block_stop":
		if index == s.block {
			s.open = false
		}
	case "message_delta":
		if e.Delta.StopReason != nil {
			s.finished = true
		}
	case "message_stop":
		s.done = true
	case "error":
		s.broke = true // kept from the caller, who may yet get the answer
		return nil
	}
	if s.cont && index != e.Index {
		return rewriteAnthropic(name, data, index, "", false)
	}
	return ev
}

// rewriteAnthropic returns a continuation's event as the caller's stream
// carries it: at index, and with text as its delta's text if withText.
func rewriteAnthropic(name string, data []byte, index int, text string, withText bool) []byte {
	var e map[string]json.RawMessage
	if json.Unmarshal(data, &e) != nil {
		return eventOf(name, data)
	}
	if _, ok := e["index"]; ok {
		e["index"] = json.RawMessage(strconv.Itoa(index))
	}
	if withText {
		var delta map[string]json.RawMessage
		if json.Unmarshal(e["delta"], &delta) == nil {
			delta["text"], _ = json.Marshal(text)
			e["delta"], _ = json.Marshal(delta)
		}
	}
	b, _ := json.Marshal(e)
	return eventOf(name, b)
}

// unsupported notes why the stream cannot be continued, the first reason
// found.
func (s *splice) unsupported(why string) {
	if s.why == "" {
		s.why = why
	}
}

// strip drops from t, a continuation's text, the whitespace at its start
// that the prefill's end had and the caller already has.
func (s *splice) strip(t string) string {
	for s.skipWS != "" && t != "" && t[0] == s.skipWS[0] {
		t, s.skipWS = t[1:], s.skipWS[1:]
	}
	if t != "" {
		s.skipWS = "" // the continuation's own text has begun
	}
	return t
}

// nextEvent splits the first whole event, with the blank line that ends
// it, off buf: an event ends at an empty line, whichever line endings
// the stream uses, mixed or not (WHATWG: CRLF, LF or CR). Empty lines
// before an event's first line are part of it, as they end nothing. A CR
// at buf's end may be half a CRLF: it ends the event only if it ends the
// blank line, so that a stream of CRs alone is not held back, and the LF
// that may follow joins the next event as an empty line.
func nextEvent(buf []byte) (ev, rest []byte, ok bool) {
	seen := false // a line with content has been read
	for i := 0; i < len(buf); {
		j := bytes.IndexAny(buf[i:], "\r\n")
		if j < 0 {
			break
		}
		empty, end := j == 0, i+j+1
		if buf[i+j] == '\r' {
			switch {
			case end < len(buf):
				if buf[end] == '\n' {
					end++
				}
			case !(empty && seen):
				return nil, buf, false // the CR's line may go on with an LF
			}
		}
		if empty && seen {
			return buf[:end], buf[end:], true
		}
		seen = seen || !empty
		i = end
	}
	return nil, buf, false
}
