package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/internal/sse"
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
		// Two runes that share their first bytes: none of either is cut.
		{"\u2003", []string{"\u2002and more."}, "\u2002and more."},
		{"\u2003", []string{"\u2003and more."}, "and more."},
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

// feed passes stream's whole events through s, as a relay does, and
// returns what goes to the caller, event by event, and the error that
// ended it, if any.
func feed(s *splice, stream string) (out []string, err error) {
	blocks, _ := sse.Split([]byte(stream))
	for i := range blocks {
		b, err := s.event(blocks[i].Raw, blocks[i].Event)
		if err != nil {
			return out, err
		}
		if b != nil {
			out = append(out, string(b))
		}
	}
	return out, nil
}

// A continuation after Anthropic's text block had stopped opens a block
// of its own, at the next index, rather than writing into a stopped one.
func TestSpliceAnthropicAfterBlockStop(t *testing.T) {
	t.Parallel()
	s := &splice{}
	var first strings.Builder
	for _, e := range []string{
		`{"type":"message_start","message":{"id":"msg_1"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_stop","index":0}`,
	} {
		first.WriteString("data: " + e + "\n\n")
	}
	feed(s, first.String())
	s.begin("")
	var cont strings.Builder
	for _, e := range []string{
		`{"type":"message_start","message":{"id":"msg_2"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" world"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_stop"}`,
	} {
		cont.WriteString("event: x\ndata: " + e + "\n\n")
	}
	got, err := feed(s, cont.String())
	blocks, _ := sse.Split([]byte(strings.Join(got, "")))
	var out []string
	for _, b := range blocks {
		out = append(out, string(b.Data))
	}
	if err != nil || len(out) != 4 || !strings.Contains(out[0], `"index":1`) || !strings.Contains(out[1], `"index":1`) || !strings.Contains(out[2], `"index":1`) {
		t.Errorf("got %q, %v; want the message_start dropped and the new block at index 1", out, err)
	}
	if s.text.String() != "Hello world" || !s.done {
		t.Errorf("text %q, done %v; want Hello world, done", s.text.String(), s.done)
	}
}

// chunk is an OpenAI chat chunk event with text, or with the role alone
// when text is "".
func chunk(text string) string {
	if text == "" {
		return `data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	}
	b, _ := json.Marshal(text)
	return `data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + string(b) + `}}]}` + "\n\n"
}

// fox is a sentence an answer may repeat.
const fox = "The quick brown fox jumps over the lazy dog. "

// counted returns the words wFrom … wTo, each followed by a space: text
// that never repeats itself.
func counted(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}

// A continuation must continue: one whose text begins with the answer's
// opening started over, and is ended before any of it reaches the
// caller; one that differs goes on, its held events at once. The text
// held is the answer's only once it goes on.
func TestSpliceRestart(t *testing.T) {
	t.Parallel()
	const finish = `data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
	for _, c := range []struct {
		why, answer string
		cont        []string
		restarted   bool
		sent        string // the text that reaches the caller
	}{
		// The server answered the prefill from the start.
		{"the opening again", "The quick brown fox", []string{"", "The", " quick", " brown", " fox jumps"}, true, ""},
		// Past restartProbe bytes of the opening: it started over.
		{"a long opening again", counted(1, 30), []string{"", counted(1, 19), "more"}, true, ""},
		// An answer whose opening recurs in it (the fox sentence, again
		// and again) may go on with its opening: cut after a whole
		// sentence, the continuation is the sentence again, and is the
		// caller's.
		{"a refrain", strings.Repeat(fox, 3), []string{"", fox, fox[:20]}, false, fox + fox[:20]},
		// Twice is not enough: the opening (64 bytes) is not in it again.
		{"a sentence twice, then again", strings.Repeat(fox, 2), []string{"", fox, fox[:20]}, true, ""},
		// A continuation that begins as the answer did, then differs.
		{"diverges", "The quick brown fox", []string{"", " The", " lazy dog."}, false, " The lazy dog."},
		// All of a short continuation is the opening's start: it
		// would repeat it.
		{"all of it the opening's start", "The quick brown fox", []string{"", " The"}, true, ""},
		// A continuation that continues.
		{"continues", "The quick brown", []string{"", " fox", " jumps."}, false, " fox jumps."},
	} {
		t.Run(c.why, func(t *testing.T) {
			t.Parallel()
			s := &splice{}
			feed(s, chunk("")+chunk(c.answer))
			s.begin("")
			var stream strings.Builder
			for _, p := range c.cont {
				stream.WriteString(chunk(p))
			}
			stream.WriteString(finish)
			out, err := feed(s, stream.String())
			var text strings.Builder
			blocks, _ := sse.Split([]byte(strings.Join(out, "")))
			for _, b := range blocks {
				var ch oaChunkJSON
				if json.Unmarshal(b.Data, &ch) == nil && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != nil {
					text.WriteString(*ch.Choices[0].Delta.Content)
				}
			}
			if got := errors.Is(err, errRestarted); got != c.restarted || text.String() != c.sent {
				t.Errorf("restarted %v, sent %q; want %v, %q", got, text.String(), c.restarted, c.sent)
			}
			if want := c.answer + c.sent; s.text.String() != want {
				t.Errorf("the answer as the caller has it: %q, want %q", s.text.String(), want)
			}
		})
	}
}

// An error event mid-stream is kept from the caller, and a continuation
// after it makes one stream with one end: the splice that saw the break
// starts afresh, and drops what comes after the end.
func TestSpliceOneEnd(t *testing.T) {
	t.Parallel()
	s := &splice{}
	feed(s, chunk("")+chunk("Hello")+`data: {"error":{"type":"server_error"}}`+"\n\n")
	if s.broke == nil || s.ended(nil) != endBroken {
		t.Fatalf("broke %q, ended %v; want the error held back, and the stream broken", s.broke, s.ended(nil))
	}
	s.begin("")
	out, err := feed(s, chunk("")+chunk(" world")+`data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+"data: [DONE]\n\n"+"data: [DONE]\n\n")
	done := 0
	for _, o := range out {
		done += strings.Count(o, "[DONE]")
	}
	if err != nil || done != 1 || s.ended(nil) != endWhole || s.text.String() != "Hello world" {
		t.Errorf("got %q, %v, ended %v, text %q; want one [DONE], whole, Hello world", out, err, s.ended(nil), s.text.String())
	}
}

// FuzzSplice feeds any bytes through the one SSE scanner and the splice,
// as a first stream and then as a continuation: it never panics, and
// what it sends the caller is whole events, which the scanner reads back
// with nothing left over.
func FuzzSplice(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"), []byte("data: {\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\" y\"}}]}\n\n"))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n"), []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" z\"}}\n\n"))
	f.Add([]byte("data: {\"error\":{}}\r\n\r\n: comment\r\rdata:"), []byte("\n\n\n"))
	f.Add([]byte("data: a\n\r\ndata: b\r\n\rdata: c\n\r"), []byte("\r\r\ndata: d\r"))
	f.Add([]byte("data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"), []byte("data: null\n\n"))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		s := &splice{}
		check := func(stream []byte) {
			out, _ := feed(s, string(stream))
			for _, o := range out {
				blocks, rest := sse.Split([]byte(o))
				if len(blocks) == 0 || len(rest) != 0 {
					t.Fatalf("the splice sent %q, which is not whole events", o)
				}
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
// and what is left at the end goes as one more event, with the blank line
// that ends it for a client.
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
	if err := o.copyEvents(&body, &watch{}, 0, func(error) {}, &started, &sent); err != nil {
		t.Fatal(err)
	}
	want := []string{ev1 + ev2, ev1 + ev2 + ev3, ev1 + ev2 + ev3 + end + "\n\n"}
	if !slices.Equal(w.flushed, want) {
		t.Errorf("flushed after each read:\n%q\nwant\n%q", w.flushed, want)
	}
	if !started || sent != int64(len(want[2])) {
		t.Errorf("started %v, sent %d; want true, %d", started, sent, len(want[2]))
	}
}

// FuzzCopyEvents copies any bytes, in reads of any sizes, to a caller,
// through a watch and through a splice: what the caller gets is whole
// events, which a client reads with nothing left over, so that an event
// the gateway adds after them (its error, a stream's end) is one of its
// own. The upstream's events are all there, in order.
func FuzzCopyEvents(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]"), uint8(7))
	f.Add([]byte("event: ping\r\ndata: {}\r\n\r\ndata: a\r"), uint8(3))
	f.Add([]byte("data: a\n\ndata: b\n"), uint8(1))
	f.Add([]byte(": comment only"), uint8(0))
	f.Add([]byte("data: a\n\ndata:{"), uint8(0)) // a last event cut mid-JSON: dropped
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		for _, fol := range []follower{&watch{}, &splice{}} {
			var body chunkReader
			for rest, n := string(stream), int(cut)+1; rest != ""; {
				k := min(n, len(rest))
				body, rest = append(body, rest[:k]), rest[k:]
			}
			w := &flushCounter{header: http.Header{}}
			var o response
			o.init(w)
			var started bool
			var sent int64
			if err := o.copyEvents(&body, fol, 0, func(error) {}, &started, &sent); err != nil {
				continue // the follower ended the stream: nothing to check of its end
			}
			got := w.buf.Bytes()
			if _, rest := sse.Split(got); len(rest) != 0 {
				t.Fatalf("%T: the caller got %q, which ends inside an event (%q left)", fol, got, rest)
			}
			if _, ok := fol.(*watch); ok {
				// A watch forwards every event as it came, and ends the
				// last if the stream did not, unless the end cut its data
				// mid-JSON, which no client could read; blank lines after
				// the last event are nothing to a client.
				want := stream
				if _, rest := sse.Split(stream); len(rest) > 0 {
					if blocks, _ := sse.Split(append(bytes.Clone(rest), "\n\n"...)); len(blocks) > 0 && cutJSON(blocks[len(blocks)-1].Event.Data) {
						want = stream[:len(stream)-len(rest)]
					}
				}
				if !bytes.Equal(bytes.TrimRight(got, "\r\n"), bytes.TrimRight(want, "\r\n")) || len(got) > len(want)+2 {
					t.Fatalf("the caller got %q for %q, want %q, with its last event ended", got, stream, want)
				}
			}
			if sent != int64(len(got)) {
				t.Fatalf("%T: sent %d, wrote %d", fol, sent, len(got))
			}
		}
	})
}
