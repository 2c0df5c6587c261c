package outlast

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/outlast-llm/outlast/internal/sse"
)

// Stream openings as the providers send them.
const (
	anthropicStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n"
	anthropicText  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	overloadedText = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	responsesStart = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"error\":null}}\n\n"
	responsesError = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"x\",\"param\":null,\"sequence_number\":1}\n\n"
	roleChunk      = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
)

// peek holds a stream's events up to the first that carries the answer,
// ends it or fails it, past comments, and stops at maxHeld; it reads the
// same however the stream comes.
func TestPeek(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		stream   string
		wantHead string // "": the first maxHeld bytes
		began    bool
		failure  string // the error event's data, if the stream failed
		wantErr  error
	}{
		// The preamble is held, with the first text delta: the rest is
		// the caller's, read after commit.
		{"anthropic", ": ping\n\n" + anthropicStart + anthropicText + "more", ": ping\n\n" + anthropicStart + anthropicText, true, "", nil},
		// Anthropic's overload after message_start fails the attempt.
		{"anthropic overloaded after message_start", anthropicStart + overloadedText, anthropicStart + overloadedText, false, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, nil},
		// The Responses API's error after response.created.
		{"responses error after created", responsesStart + responsesError, responsesStart + responsesError, false, `{"type":"error","code":"server_error","message":"x","param":null,"sequence_number":1}`, nil},
		// An OpenAI role chunk, then its error chunk.
		{"openai error after the role", roleChunk + "data: {\"error\":{\"type\":\"server_error\"}}\n\n", roleChunk + "data: {\"error\":{\"type\":\"server_error\"}}\n\n", false, `{"error":{"type":"server_error"}}`, nil},
		// The blank line that ends the deciding event ends at its CR,
		// which a read cannot see is half of a CRLF: its LF is the
		// caller's.
		{"CRLF", "data: x\r\n\r\ndata: y\r\n\r\n", "data: x\r\n\r", true, "", nil},
		// Comments alone up to the bound: the stream is committed there.
		{"comments past the bound", strings.Repeat(": ping\n\n", maxHeld), "", true, "", nil},
		// The stream ends with its preamble alone: the peek says so.
		{"preamble then the end", anthropicStart, anthropicStart, false, "", io.EOF},
		{"comments then the end", ": ping\n\n", ": ping\n\n", false, "", io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := &body{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader(c.stream))), stream: true}
			failure, err := b.peek()
			if err != c.wantErr {
				t.Fatalf("peek: got error %v, want %v", err, c.wantErr)
			}
			switch {
			case c.wantHead == "" && len(b.head) != maxHeld:
				t.Fatalf("peek: got %d bytes, want %d", len(b.head), maxHeld)
			case c.wantHead != "" && string(b.head) != c.wantHead:
				t.Fatalf("peek: got head %q, want %q", b.head, c.wantHead)
			}
			// The answer began when neither a failure nor the reads' end
			// decided first.
			began := failure == nil && err == nil
			if began != c.began || (failure == nil) != (c.failure == "") || failure != nil && string(failure.Data) != c.failure {
				t.Errorf("began %v, failure %+v; want %v, %q", began, failure, c.began, c.failure)
			}
		})
	}
}

// errorEvent gives an error event the status a policy judges it by.
func TestErrorEvent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stream string
		status int
	}{
		{overloadedText, 529},
		{responsesError, 500},
		{"data: {\"error\":{\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n", 429},
	} {
		blocks, _ := sse.Split([]byte(c.stream))
		err := errorEvent(&blocks[0].Event, nil)
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != c.status || !errors.Is(err, ErrErrorEvent) || Classify(err) != ClassErrorEvent {
			t.Errorf("errorEvent(%q) = %v, want a *StatusError %d wrapping ErrErrorEvent", c.stream, err, c.status)
		}
	}
}

// FuzzPeek reads any stream a byte a read and checks the decision against
// the one SSE scanner's own reading of the stream: the first event whose
// kind is not the preamble decides, head ends with it, and the same
// stream read whole decides alike.
func FuzzPeek(f *testing.F) {
	for _, s := range []string{anthropicStart + anthropicText, anthropicStart + overloadedText, responsesStart + responsesError, roleChunk, ": ping\n\n", "data: [DONE]\n\n", "\ufeffevent: error\rdata: {}\r\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		if len(stream) >= maxHeld {
			return
		}
		b := &body{rc: io.NopCloser(iotest.OneByteReader(bytes.NewReader(stream))), stream: true}
		failure, err := b.peek()
		// The reference: the stream's blocks as sse.Split reads them.
		blocks, _ := sse.Split(stream)
		var decided *sse.Block
		end := 0
		for i := range blocks {
			end += len(blocks[i].Raw)
			if blocks[i].HasData && sse.KindOf(&blocks[i].Event) != sse.Preamble {
				decided = &blocks[i]
				break
			}
		}
		switch {
		case decided == nil:
			if failure != nil || err == nil || !bytes.Equal(b.head, stream) {
				t.Fatalf("%q: no event decides, yet failure %v, error %v, head %q", stream, failure, err, b.head)
			}
		case !bytes.Equal(b.head, stream[:end]) || err != nil:
			t.Fatalf("%q: head %q, error %v; want %q, none", stream, b.head, err, stream[:end])
		case sse.KindOf(&decided.Event) == sse.Failure:
			if failure == nil || !bytes.Equal(failure.Data, decided.Data) {
				t.Fatalf("%q: failure %+v, want the event %q", stream, failure, decided.Data)
			}
		case failure != nil:
			t.Fatalf("%q: failure %+v; want the answer begun", stream, failure)
		}
		whole := &body{rc: io.NopCloser(bytes.NewReader(stream)), stream: true}
		wholeFailure, wholeErr := whole.peek()
		if (wholeErr == nil) != (err == nil) || (wholeFailure == nil) != (failure == nil) {
			t.Fatalf("%q read whole: error %v, failure %v; a byte a read: %v, %v", stream, wholeErr, wholeFailure, err, failure)
		}
	})
}
