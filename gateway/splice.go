package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outlast-llm/outlast/internal/sse"
)

// streamAPI is the API a stream speaks, as its events show it.
type streamAPI uint8

const (
	apiUnknown   streamAPI = iota
	apiOpenAI              // chat.completion.chunk data events, then data: [DONE]
	apiAnthropic           // Messages events, from message_start to message_stop
)

// restartProbe is how much of the answer's opening a continuation's text
// is compared with: a continuation that begins with the answer's first
// restartProbe bytes (or all of the answer, if shorter) started over
// rather than continued, unless the opening recurs in the answer so far:
// an answer that repeats itself (a list, a refrain, a test's fox
// sentence) may go on with its opening, and the check cannot tell.
const restartProbe = 64

// errRestarted ends a continuation that started the answer over: its
// server answered the prefill rather than continuing it.
var errRestarted = errors.New("its continuation started the answer over instead of continuing it")

// errDiverged ends a replay whose text differs from the answer the
// caller has: the rest of it is another answer's.
var errDiverged = errors.New("its replay's text differs from the answer so far")

// errForeign ends a continuation that sent an event its API's streams do
// not carry: another API's, or data that is not one of its events. None
// of it reaches the caller, whose stream it would break.
var errForeign = errors.New("its continuation sent an event that is not one of its API's")

// splice follows a stream forwarded to the caller, event by event, for its
// continuation with a prefill: the answer's text as the caller has it,
// whether the answer is whole, and whether it can be continued safely.
// Once a continuation is under way it rewrites the new stream's events so
// that the caller reads one stream: the first stream's id, its choice and
// content-block indices, no second preamble, one end, and the whitespace
// cut from the prefill's end neither lost nor repeated. It holds the
// continuation's first events until its text shows it continues the
// answer rather than starting it over (see restartProbe).
type splice struct {
	api  streamAPI
	id   string          // the first stream's id: chatcmpl-… or msg_…
	text strings.Builder // the answer's text, as the caller has it
	why  string          // why the stream cannot be continued, once known
	// finished says a finish_reason or a stop_reason came: the answer is
	// whole, though its last events may not have.
	finished bool
	done     bool // the terminal event came: [DONE] or message_stop
	// broke holds the data of an error the upstream ended the stream with
	// (an error event, or an OpenAI error chunk), which the splice kept
	// from the caller: the stream broke there, and may be continued.
	broke []byte
	// failed says the upstream's error event came after the answer's
	// finish, and went to the caller: there is nothing to carry on.
	failed bool
	chunk  oaChunk // the chunk being read, its choices' room kept for the next
	// unknown follows a stream the splice does not know (llama.cpp's,
	// the Responses API's), whose events go to the caller as they came:
	// as a watch follows one, for its error event or its last event.
	unknown watch

	// Anthropic: the text block the answer is in, and whether it is open,
	// as the caller has them; shownBlock and shownOpen are what they were
	// when the continuation under way began, for one whose events the
	// check still holds, none of which reached the caller.
	block      int
	open       bool
	shownBlock int
	shownOpen  bool

	// A continuation under way.
	cont     bool
	contBase int    // Anthropic: the index its block 0 maps to
	skip     string // text the continuation's start drops: the whitespace cut from a prefill's end, or a replay's whole answer so far
	strict   bool   // a replay: its text must start with skip, whole
	diverged bool   // a replay's text differed from skip, or ended before all of it
	foreign  bool   // a continuation's event was not one of its API's
	contOpen bool   // Anthropic: its block 0 continues the open block

	// The check that a continuation continues: the answer's opening, the
	// continuation's text so far, and its events held until it shows.
	checking bool
	opening  string
	contText strings.Builder
	held     [][]byte
}

// over: the caller has the stream's end, its terminal event, after which
// the splice sends nothing. A stream of events it does not know is over
// as a watch's is.
func (s *splice) over() bool {
	if s.api == apiUnknown {
		return s.unknown.over()
	}
	return s.done
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
	if s.cont && s.checking {
		// The continuation before broke while its events were held: the
		// caller has none of them, nor the blocks they began or ended.
		s.block, s.open = s.shownBlock, s.shownOpen
	}
	s.shownBlock, s.shownOpen = s.block, s.open
	s.cont, s.skip, s.strict = true, cut, false
	s.broke, s.finished, s.done = nil, false, false
	s.contOpen = s.api == apiAnthropic && s.open
	s.contBase = s.block
	if !s.open {
		s.contBase = s.block + 1
	}
	s.contText, s.held = strings.Builder{}, nil
	answer := strings.TrimLeft(s.text.String(), " \t\r\n")
	s.opening = answer[:min(len(answer), restartProbe)]
	// With no answer yet there is nothing to repeat; with an opening that
	// recurs in the answer, its repeat may be the answer's own.
	s.checking = s.opening != "" && !strings.Contains(answer[1:], s.opening)
}

// beginReplay starts a replay: the request sent again as it was, whose
// answer, to carry the caller's on, must start with the whole answer so
// far, which it drops; only the rest goes to the caller.
func (s *splice) beginReplay() {
	s.begin(s.text.String())
	s.strict, s.checking = true, false
}

// event observes ev, one whole event whose bytes are raw, and returns
// what goes to the caller: raw itself, a rewritten event, or nil for
// none; or errRestarted, which ends a continuation that started over.
func (s *splice) event(raw []byte, ev sse.Event) ([]byte, error) {
	if !ev.HasData {
		return raw, nil // a comment, or an event without data: no client dispatches it
	}
	if s.done {
		return nil, nil // the caller has the stream's end: one end, and nothing after it
	}
	if s.failed {
		return raw, nil // as without continuation: the caller reads on past the upstream's error
	}
	if s.broke != nil {
		// The stream failed at the error held back: what the upstream
		// sends after it (vLLM's [DONE]) is not the answer's, and its end
		// least of all, which would tell the caller the answer was whole.
		return nil, nil
	}
	read := false // whether s.chunk holds ev's chunk already
	if s.api == apiUnknown {
		s.api, read = s.detect(&ev)
	}
	var out []byte
	text := ""
	switch {
	case s.api != apiUnknown && sse.IsFailureName(ev.Name):
		// An error event by its name, whatever its data: some
		// OpenAI-compatible servers send the error object alone.
		out = s.failure(raw, ev.Data)
	case s.api == apiOpenAI:
		out, text = s.openAI(raw, ev.Data, read)
	case s.api == apiAnthropic:
		out, text = s.anthropic(raw, string(ev.Name), ev.Data)
	default:
		out = raw
		s.unknown.passed(ev)
	}
	if s.strict && s.skip != "" && (s.finished || s.done) {
		s.diverged = true // the replay's answer ended short of the answer so far
	}
	switch {
	case s.foreign:
		return nil, errForeign
	case s.diverged:
		return nil, errDiverged
	}
	if !s.checking {
		s.text.WriteString(text)
		return out, nil
	}
	return s.check(out, text)
}

// check holds a continuation's events, and its text, until the text
// shows whether it continues the answer: it does once it differs from the
// answer's opening, or the stream ends with no text; it started over if
// it begins with the opening, or is all the opening's start. The events
// held, and their text, go on together once it shows; the text joins the
// answer only then, since the caller has it only then.
func (s *splice) check(out []byte, text string) ([]byte, error) {
	s.contText.WriteString(text)
	c := strings.TrimLeft(s.contText.String(), " \t\r\n")
	n := min(len(c), len(s.opening))
	switch {
	case c[:n] != s.opening[:n]:
		s.checking = false // it diverged: a continuation
	case len(c) > 0 && (n == len(s.opening) || s.done || s.finished):
		return nil, errRestarted
	case s.done || s.finished:
		s.checking = false // no text at all before its end
	}
	if out != nil {
		s.held = append(s.held, bytes.Clone(out))
	}
	if s.checking {
		return nil, nil
	}
	s.text.WriteString(s.contText.String())
	all := bytes.Join(s.held, nil)
	s.held = nil
	return all, nil
}

// detect tells the stream's API from ev, its first event with data, as
// detectAPI does. An OpenAI chunk it reads into s.chunk in the same walk,
// and reports that it did: the first event, which the caller waits on,
// is walked once.
func (s *splice) detect(ev *sse.Event) (api streamAPI, read bool) {
	if isAnthropicStart(ev) {
		return apiAnthropic, false
	}
	var object, typ string
	if !scanFirst(ev.Data, &s.chunk, s.id == "", &object, &typ) {
		return detectAPI(ev), false
	}
	api = apiOf(object, typ)
	return api, api == apiOpenAI
}

// isAnthropicStart reports whether ev is, by its name or its data's
// start, Anthropic's message_start.
func isAnthropicStart(ev *sse.Event) bool {
	return string(ev.Name) == "message_start" || bytes.HasPrefix(ev.Data, []byte(`{"type":"message_start"`))
}

// detectAPI tells the stream's API from its first event with data.
func detectAPI(ev *sse.Event) streamAPI {
	if isAnthropicStart(ev) {
		return apiAnthropic
	}
	var object, typ string
	if !scanProbe(ev.Data, &object, &typ) {
		// Only a text the scanner is unsure of costs the probe an
		// allocation: encoding/json's.
		var probe struct {
			Object string `json:"object"`
			Type   string `json:"type"`
		}
		if json.Unmarshal(ev.Data, &probe) != nil {
			return apiUnknown
		}
		object, typ = probe.Object, probe.Type
	}
	return apiOf(object, typ)
}

// apiOf tells a stream's API from its first event's object and type.
func apiOf(object, typ string) streamAPI {
	switch {
	case object == "chat.completion.chunk":
		return apiOpenAI
	case typ == "message_start":
		return apiAnthropic
	}
	return apiUnknown
}

// openAI observes, and in a continuation rewrites, an OpenAI event, and
// returns what goes to the caller and the text it adds. With read, s.chunk
// holds the event's chunk already (see detect).
func (s *splice) openAI(raw, data []byte, read bool) ([]byte, string) {
	if string(data) == "[DONE]" {
		s.done = true
		return raw, ""
	}
	c := &s.chunk
	if !read && readOAChunk(data, c, s.id == "") != nil {
		if s.cont {
			s.foreign = true
			return nil, ""
		}
		// Forwarded as it came, as any gateway would; it is not text
		// the splice can account for.
		s.unsupported("an event that is not a chunk outlast can read")
		return raw, ""
	}
	if present(c.Error) {
		return s.failure(raw, data), ""
	}
	if s.id == "" {
		s.id = c.ID
	}
	keep := !s.cont
	content := ""
	for _, ch := range c.Choices {
		switch {
		case ch.Index != 0 || len(c.Choices) > 1:
			s.unsupported("more than one choice (n > 1)")
		case hasItems(ch.ToolCalls), present(ch.FunctionCall):
			s.unsupported("a tool call")
		case ch.Reasoning:
			s.unsupported("reasoning")
		}
		if ch.HasContent {
			content = ch.Content
			if s.cont {
				content = s.strip(content)
			}
		}
		if ch.Finished {
			s.finished = true
		}
		// A continuation's chunk goes on if it carries text, an end, or
		// anything but its role, which the caller has had.
		if content != "" || ch.Finished || hasItems(ch.ToolCalls) || present(ch.FunctionCall) {
			keep = true
		}
	}
	if len(c.Choices) == 0 {
		keep = true // the usage chunk
	}
	if !s.cont {
		return raw, content
	}
	if !keep {
		return nil, ""
	}
	return rewriteChunk(data, s.id, content), content
}

// present reports whether a JSON value is there and not null.
func present(v []byte) bool { return len(v) > 0 && string(v) != "null" }

// hasItems reports whether a JSON value is there, not null, and not an
// empty array: some OpenAI-compatible servers send "tool_calls": [] with
// a text delta.
func hasItems(v []byte) bool {
	if !present(v) {
		return false
	}
	t := bytes.TrimSpace(v)
	return len(t) < 2 || t[0] != '[' || len(bytes.TrimSpace(t[1:len(t)-1])) > 0
}

// failure takes the upstream's error event, raw, whose data is data, and
// returns what goes to the caller. Before the answer's finish it is held
// back, for the caller may yet get the answer; after it there is nothing
// left to carry on, and it goes to the caller as it came, as it would
// without continuation.
func (s *splice) failure(raw, data []byte) []byte {
	if s.finished {
		s.failed = true
		return raw
	}
	s.broke = bytes.Clone(data)
	return nil
}

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

// eventOf returns an event named name (none if empty) with data, as the
// one SSE scanner reads it back.
func eventOf(name string, data []byte) []byte {
	return sse.Append(nil, &sse.Event{Name: []byte(name), Data: data, HasData: true})
}

// anthropic observes, and in a continuation rewrites, an Anthropic
// event, and returns what goes to the caller and the text it adds.
func (s *splice) anthropic(raw []byte, name string, data []byte) ([]byte, string) {
	var e anEvent
	if err := readAnEvent(data, &e); err != nil || e.Type == "" {
		if s.cont {
			s.foreign = true
			return nil, ""
		}
		s.unsupported("an event that outlast cannot read")
		return raw, ""
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
			return nil, "" // the caller has the first stream's
		}
		s.id = e.MessageID
	case "content_block_start":
		if e.BlockType != "text" {
			s.unsupported("a " + e.BlockType + " block")
		} else {
			s.block, s.open = index, true
		}
		if s.cont && e.Index == 0 && s.contOpen {
			return nil, "" // it carries on the block the caller has open
		}
	case "content_block_delta":
		if e.DeltaType != "text_delta" {
			s.unsupported("a " + e.DeltaType)
			break
		}
		text := e.Text
		if s.cont {
			text = s.strip(text)
			if text == "" {
				return nil, ""
			}
		}
		if s.cont {
			return rewriteAnthropic(name, data, index, text, true), text
		}
		return raw, text
	case "content_block_stop":
		if index == s.block {
			s.open = false
		}
	case "message_delta":
		if e.StopReason {
			s.finished = true
		}
	case "message_stop":
		s.done = true
	case "error":
		return s.failure(raw, data), ""
	}
	if s.cont && index != e.Index {
		return rewriteAnthropic(name, data, index, "", false), ""
	}
	return raw, ""
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

// passed takes an event too long to hold, which went to the caller as it
// came: the splice cannot account for it.
func (s *splice) passed(ev sse.Event) {
	s.unsupported("an event too long to hold")
	s.unknown.passed(ev)
}

// strip drops from t, a continuation's text, what the caller already
// has: the whitespace that a prefill's end had, as far as it matches,
// rune by rune, or a replay's whole answer so far, which must match.
func (s *splice) strip(t string) string {
	for s.skip != "" && t != "" {
		n := 1
		if !s.strict {
			_, n = utf8.DecodeRuneInString(s.skip)
		}
		if len(t) < n || t[:n] != s.skip[:n] {
			if s.strict {
				s.diverged = true
				return ""
			}
			break
		}
		t, s.skip = t[n:], s.skip[n:]
	}
	if t != "" {
		s.skip = "" // the continuation's own text has begun
	}
	return t
}
