package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The continuation's request: the answer so far as the final assistant
// message, its trailing whitespace cut and returned, and the requests
// that must not be continued refused with why.
func TestContinuationBody(t *testing.T) {
	t.Parallel()
	const user = `{"role":"user","content":"hi"}`
	for _, c := range []struct {
		name      string
		api       streamAPI
		orig      string
		text      string
		prefill   string // the final assistant message sent, "" for none
		cut       string
		continues bool // continue_final_message is set
		why       string
	}{
		// OpenAI-compatible: the fields that make vLLM continue.
		{"openai", apiOpenAI, `{"model":"m","messages":[` + user + `]}`, "Hello ", "Hello", " ", true, ""},
		// Anthropic refuses trailing whitespace: it is cut, and the
		// continuation's start drops it.
		{"anthropic", apiAnthropic, `{"model":"c","messages":[` + user + `]}`, "Hello\n\n", "Hello", "\n\n", false, ""},
		// The caller's own prefill is extended, not followed by another.
		{"a prefill of the caller's", apiAnthropic, `{"messages":[` + user + `,{"role":"assistant","content":"Sure:"}]}`, " here", "Sure: here", "", false, ""},
		// Nothing of the answer yet: the request goes as it was.
		{"no text yet", apiOpenAI, `{"messages":[` + user + `]}`, "", "", "", false, ""},
		{"thinking off", apiAnthropic, `{"thinking":{"type":"disabled"},"messages":[` + user + `]}`, "Hi", "Hi", "", false, ""},
		{"n = 2", apiOpenAI, `{"n":2,"messages":[` + user + `]}`, "Hi", "", "", false, "more than one choice"},
		{"thinking on", apiAnthropic, `{"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` + user + `]}`, "Hi", "", "", false, "extended thinking"},
		{"not JSON", apiOpenAI, `hello`, "Hi", "", "", false, "not a JSON object"},
		{"no messages", apiOpenAI, `{"prompt":"hi"}`, "Hi", "", "", false, "without messages"},
		{"an assistant message of parts", apiAnthropic, `{"messages":[` + user + `,{"role":"assistant","content":[{"type":"text","text":"x"}]}]}`, "Hi", "", "", false, "not text"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body, cut, why := continuationBody([]byte(c.orig), c.api, c.text)
			if c.why != "" {
				if !strings.Contains(why, c.why) {
					t.Fatalf("got why %q, want %q", why, c.why)
				}
				return
			}
			if why != "" || cut != c.cut {
				t.Fatalf("got why %q, cut %q; want none, %q", why, cut, c.cut)
			}
			if c.text == "" {
				if string(body) != c.orig {
					t.Errorf("got %s, want the request as it was", body)
				}
				return
			}
			var req struct {
				Messages []struct{ Role, Content string }
				Continue *bool `json:"continue_final_message"`
				Prompt   *bool `json:"add_generation_prompt"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			last := req.Messages[len(req.Messages)-1]
			assistants := 0
			for _, m := range req.Messages {
				if m.Role == "assistant" {
					assistants++
				}
			}
			if last.Role != "assistant" || last.Content != c.prefill || assistants != 1 {
				t.Errorf("got %s, want one final assistant message %q", body, c.prefill)
			}
			if got := req.Continue != nil && *req.Continue && req.Prompt != nil && !*req.Prompt; got != c.continues {
				t.Errorf("got %s: continue_final_message set %v, want %v", body, got, c.continues)
			}
		})
	}
}

// The whitespace cut from the prefill's end is dropped from the
// continuation's start once, and only as far as it matches.
func TestSpliceStrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cut  string
		in   []string // the continuation's texts, in order
		want string
	}{
		{" ", []string{" world"}, "world"},
		{" ", []string{"world"}, "world"},
		{"\n\n", []string{"\n", "\nNext"}, "Next"},
		{" ", []string{"", " ", "world", " again"}, "world again"},
		{" ", []string{"\nworld"}, "\nworld"},
	} {
		s := &splice{}
		s.begin(c.cut)
		var got strings.Builder
		for _, t := range c.in {
			got.WriteString(s.strip(t))
		}
		if got.String() != c.want {
			t.Errorf("cut %q, continuation %q: got %q, want %q", c.cut, c.in, got.String(), c.want)
		}
	}
}

// An event ends at an empty line, whichever line endings the stream uses.
func TestNextEvent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, ev, rest string }{
		{"data: a\n\ndata: b", "data: a\n\n", "data: b"},
		{"data: a\r\n\r\nrest", "data: a\r\n\r\n", "rest"},
		{"data: a\r\rrest", "data: a\r\r", "rest"},
		{"data: a\n", "", "data: a\n"},
		// Mixed endings: LF then CRLF, CRLF then CR, LF then CR.
		{"data: a\n\r\nrest", "data: a\n\r\n", "rest"},
		{"data: a\r\n\rrest", "data: a\r\n\r", "rest"},
		{"data: a\n\rrest", "data: a\n\r", "rest"},
		{"data: a\r\r\nrest", "data: a\r\r\n", "rest"},
		// Two lines, then the blank one.
		{"event: x\r\ndata: a\n\nrest", "event: x\r\ndata: a\n\n", "rest"},
		// A blank line before any content ends nothing.
		{"\ndata: a\n\nrest", "\ndata: a\n\n", "rest"},
		// A CR at the end: the blank line's ends the event; a line's
		// may be half a CRLF, and waits.
		{"data: a\r\r", "data: a\r\r", ""},
		{"data: a\r", "", "data: a\r"},
		{"data: a\n\r", "data: a\n\r", ""},
	} {
		ev, rest, ok := nextEvent([]byte(c.in))
		if string(ev) != c.ev || string(rest) != c.rest || ok != (c.ev != "") {
			t.Errorf("nextEvent(%q) = %q, %q, %v; want %q, %q", c.in, ev, rest, ok, c.ev, c.rest)
		}
	}
}

// A continuation after Anthropic's text block had stopped opens a block
// of its own, at the next index, rather than writing into a stopped one.
func TestSpliceAnthropicAfterBlockStop(t *testing.T) {
	t.Parallel()
	s := &splice{}
	for _, e := range []string{
		`{"type":"message_start","message":{"id":"msg_1"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_stop","index":0}`,
	} {
		s.event([]byte("data: " + e + "\n\n"))
	}
	s.begin("")
	var out []string
	for _, e := range []string{
		`{"type":"message_start","message":{"id":"msg_2"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" world"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_stop"}`,
	} {
		if b := s.event([]byte("event: x\ndata: " + e + "\n\n")); b != nil {
			_, data := parseEvent(b)
			out = append(out, string(data))
		}
	}
	if len(out) != 4 || !strings.Contains(out[0], `"index":1`) || !strings.Contains(out[1], `"index":1`) || !strings.Contains(out[2], `"index":1`) {
		t.Errorf("got %q, want the message_start dropped and the new block at index 1", out)
	}
	if s.text.String() != "Hello world" || !s.done {
		t.Errorf("text %q, done %v; want Hello world, done", s.text.String(), s.done)
	}
}

// FuzzSplice feeds any bytes through the event framing and the splice, as
// a first stream and then as a continuation: it never panics, and what it
// sends the caller is whole events; the framing loses no byte, and cuts
// only after a line's end.
func FuzzSplice(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"), []byte("data: {\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\" y\"}}]}\n\n"))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"), []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" z\"}}\n\n"))
	f.Add([]byte("data: {\"error\":{}}\r\n\r\n: comment\r\rdata:"), []byte("\n\n\n"))
	f.Add([]byte("data: a\n\r\ndata: b\r\n\rdata: c\n\r"), []byte("\r\r\ndata: d\r"))
	f.Add([]byte("data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"), []byte("data: null\n\n"))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		s := &splice{}
		check := func(stream []byte) {
			for {
				ev, rest, ok := nextEvent(stream)
				if !ok {
					break
				}
				if len(ev) == 0 || !bytes.Equal(append(ev[:len(ev):len(ev)], rest...), stream) {
					t.Fatalf("nextEvent(%q) split it into %q and %q", stream, ev, rest)
				}
				if last := ev[len(ev)-1]; last != '\n' && last != '\r' {
					t.Fatalf("nextEvent(%q) gave %q, which does not end a line", stream, ev)
				}
				if out := s.event(ev); out != nil && !bytes.HasSuffix(out, []byte("\n\n")) && !bytes.Equal(out, ev) {
					t.Fatalf("event %q became %q, which is not a whole event", ev, out)
				}
				stream = rest
			}
		}
		check(first)
		s.begin(" ")
		check(second)
	})
}

// TestRewriteChunkNull checks that a continuation's chunk that is JSON
// null, which parses into no map, passes as it came rather than panic.
func TestRewriteChunkNull(t *testing.T) {
	if got := string(rewriteChunk([]byte("null"), "a", "x")); got != "data: null\n\n" {
		t.Errorf("rewriteChunk(null) = %q, want the event as it came", got)
	}
}

// flushCounter is a ResponseWriter that keeps what is written and counts
// the flushes, with what had been written at each.
type flushCounter struct {
	header  http.Header
	buf     bytes.Buffer
	flushed []string
}

func (f *flushCounter) Header() http.Header         { return f.header }
func (f *flushCounter) Write(p []byte) (int, error) { return f.buf.Write(p) }
func (f *flushCounter) WriteHeader(int)             {}
func (f *flushCounter) Flush()                      { f.flushed = append(f.flushed, f.buf.String()) }

// chunkReader returns its chunks one Read at a time.
type chunkReader []string

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	(*c)[0] = (*c)[0][n:]
	if (*c)[0] == "" {
		*c = (*c)[1:]
	}
	return n, nil
}

// A continuable stream's events go whole, and once per read: the events
// one read brings are flushed together, a half event waits for its rest,
// and what is left at the end goes as one more event.
func TestCopyEventsFlushesOncePerRead(t *testing.T) {
	t.Parallel()
	const (
		ev1 = "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
		ev2 = "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"
		ev3 = "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n\n"
		end = "data: [DONE]"
	)
	w := &flushCounter{header: http.Header{}}
	var o response
	o.init(w)
	body := chunkReader{ev1 + ev2 + ev3[:20], ev3[20:], end}
	var started bool
	var sent int64
	if err := o.copyEvents(&body, &splice{}, 0, func(error) {}, &started, &sent); err != nil {
		t.Fatal(err)
	}
	want := []string{ev1 + ev2, ev1 + ev2 + ev3, ev1 + ev2 + ev3 + end}
	if !slices.Equal(w.flushed, want) {
		t.Errorf("flushed after each read:\n%q\nwant\n%q", w.flushed, want)
	}
	if !started || sent != int64(len(want[2])) {
		t.Errorf("started %v, sent %d; want true, %d", started, sent, len(want[2]))
	}
}
