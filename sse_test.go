package outlast

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// sseSeeds are stream openings for the first-event fuzzers: the error
// events of both APIs, ordinary first events, and the line endings and
// field forms that WHATWG's grammar allows.
var sseSeeds = []string{
	"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
	"data: {\"error\":{\"type\":\"server_error\",\"code\":null}}\r\n\r\n",
	"event: message_start\ndata: {}\n\n",
	"data: [DONE]\n\n",
	"event: error\n\n",
	":comment\ndata\ndata:\n\n",
	"data: a\ndata:b\ndata:  c\n\nevent: error\n\n",
	"event:error\r\ndata: {\"error\":{\"type\":\"rate_limit_error\",\"message\":\"x\"}}\r\n\r\n",
	"id: 1\nretry: 10\nevent: error\nevent: ping\ndata: x\n\n",
	"data: {\"error\":null}\n\n",
	"data: {\"error\":\"overloaded\"}\n\n",
	"data: {\"type\":\"error\",\"error\":{\"type\":5}}\n\n",
	"data: partial",
	"\n\nevent: error\n\n",
	"event: error\rdata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\r",
	"data: x\n\r\n",
	"\ufeffevent: error\ndata: {}\n\n",
	": ping\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
	"event: error\nid: 1\n\ndata: {}\r",
}

// TestFirstEventError reads stream openings as the Transport does before
// commit: whether the first event has ended, and the status of the error
// it is, if it is one.
func TestFirstEventError(t *testing.T) {
	t.Parallel()
	overloaded := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	cases := []struct {
		name       string
		stream     string
		wantEnded  bool
		wantStatus int // 0: no error
	}{
		// Anthropic's overload as it sends it, with LF line endings.
		{"anthropic LF", "event: error\ndata: " + overloaded + "\n\n", true, 529},
		// OpenAI's error object, with CRLF line endings.
		{"openai CRLF", "data: {\"error\":{\"type\":\"rate_limit_exceeded\"}}\r\n\r\n", true, 429},
		// An ordinary first event is no error.
		{"ordinary", "event: message_start\ndata: {\"type\":\"message_start\"}\n\n", true, 0},
		// WHATWG: a line may end at a lone CR, so this is an error event
		// ended by a blank line, not one long event name.
		{"CR only", "event: error\rdata: " + overloaded + "\r\r", true, 529},
		// A line ended by LF, then a blank line ended by CRLF: the event
		// has ended, though neither "\n\n" nor "\r\n\r\n" is in it.
		{"LF then CRLF", "data: {\"error\":{\"type\":\"timeout_error\"}}\n\r\n", true, 504},
		// All three line endings in one event: CR, CRLF, then LF.
		{"CR, CRLF and LF", "event: error\rdata: " + overloaded + "\r\n\n", true, 529},
		// WHATWG strips one leading byte order mark: it must not hide the
		// field of the first line, data or event.
		{"byte order mark", "\ufeffdata: {\"error\":{\"type\":\"rate_limit_exceeded\"}}\n\n", true, 429},
		{"byte order mark before event", "\ufeffevent: error\ndata: {}\n\n", true, 500},
		// Only one: a second one is part of the field name.
		{"two byte order marks", "\ufeff\ufeffevent: error\ndata: {}\n\n", true, 0},
		// A keep-alive comment (a proxy's ": ping", the gateway's progress)
		// dispatches no event, so the error event after it is the first.
		{"comment block first", ": ping\n\nevent: error\ndata: " + overloaded + "\n\n", true, 529},
		{"comments and blank lines first", "\r\n: a\r\n: b\r\n\r\n\r\ndata: {\"error\":{}}\r\n\r\n", true, 500},
		// Comments alone have not ended a first event: the peek reads on.
		{"comments only", ": ping\n\n: ping\n\n", false, 0},
		// WHATWG dispatches no event without data, and clears its type:
		// the data event after it is a message.
		{"event without data", "event: error\n\ndata: {}\n\n", true, 0},
		{"event without data alone", "event: error\n\n", false, 0},
		// The first dispatched event counts, even an Anthropic ping: what
		// comes after it may have reached the caller.
		{"ping first", "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: error\ndata: " + overloaded + "\n\n", true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := []byte(c.stream)
			if got := eventEnded(b); got != c.wantEnded {
				t.Errorf("eventEnded(%q): got %v, want %v", b, got, c.wantEnded)
			}
			err := firstEventError(b, nil)
			var se *StatusError
			switch {
			case c.wantStatus == 0 && err != nil:
				t.Errorf("firstEventError(%q): got %v, want nil", b, err)
			case c.wantStatus != 0 && (!errors.As(err, &se) || se.StatusCode != c.wantStatus):
				t.Errorf("firstEventError(%q): got %v, want a *StatusError with status %d", b, err, c.wantStatus)
			}
		})
	}
}

// TestPeekFirstEvent: peek reads an event stream that comes a byte a read
// up to the end of its first dispatched event, past comments, and stops
// at maxFirstEvent.
func TestPeekFirstEvent(t *testing.T) {
	t.Parallel()
	event := ": ping\r\r: ping\n\nevent: error\rdata: {}\r\n\r\n"
	cases := []struct {
		name     string
		stream   string
		wantHead string // "": the first maxFirstEvent bytes
		wantErr  error
	}{
		// The head ends with the blank line that ends the first event: the
		// rest is the caller's, read after commit. That line ends at its
		// CR, which a read cannot see is half of a CRLF, so its LF is the
		// caller's too.
		{"comments then event", event + "data: more\n\n", strings.TrimSuffix(event, "\n"), nil},
		// Comments alone up to the bound: the peek stops there.
		{"comments past the bound", strings.Repeat(": ping\n\n", maxFirstEvent), "", nil},
		// The stream ends with no event: the peek says so.
		{"comments then the end", ": ping\n\n", ": ping\n\n", io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := &body{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader(c.stream))), stream: true}
			err := b.peek()
			if err != c.wantErr {
				t.Fatalf("peek: got error %v, want %v", err, c.wantErr)
			}
			if c.wantHead == "" {
				if n := len(b.head); n != maxFirstEvent {
					t.Fatalf("peek: got %d bytes, want %d", n, maxFirstEvent)
				}
				return
			}
			if string(b.head) != c.wantHead {
				t.Fatalf("peek: got head %q, want %q", b.head, c.wantHead)
			}
		})
	}
}

// FuzzFirstEventError feeds arbitrary stream openings to the first-event
// parser. It must never panic; what it reports must be a status the
// policy can judge; and it must agree with sseReference, WHATWG's grammar
// written independently.
func FuzzFirstEventError(f *testing.F) {
	for _, s := range sseSeeds {
		f.Add([]byte(s))
	}
	// Keys as encoding/json matches them: in any case, or escaped.
	f.Add([]byte("data: {\"ERROR\":{\"type\":\"OVERLOADED\"}}\n\n"))
	f.Add([]byte("data: {\"\\u0065rror\":{\"type\":\"RATE_LIMIT\"}}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := firstEventError(b, nil)
		if err != nil {
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode < 400 || se.StatusCode > 599 || !errors.Is(err, ErrErrorEvent) {
				t.Fatalf("firstEventError(%q): got %v, want a *StatusError 4xx/5xx wrapping ErrErrorEvent", b, err)
			}
		}
		checkFirstEvent(t, b, err)
		// Skipping the decoding of data that names no error changes
		// nothing.
		name, data := firstEvent(b)
		if ref := decodeErrorEvent(name, data, nil); (ref == nil) != (err == nil) || err != nil && err.Error() != ref.Error() {
			t.Fatalf("firstEventError(%q) = %v; decoding it regardless gives %v", b, err, ref)
		}
	})
}

// FuzzFirstEventWHATWG is FuzzFirstEventError's agreement with WHATWG's
// grammar for every input: a line may end with CRLF, LF or CR, alone or
// mixed, and a leading byte order mark is ignored ("Interpreting an event
// stream", which sse.go cites).
func FuzzFirstEventWHATWG(f *testing.F) {
	for _, s := range sseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFirstEvent(t, b, firstEventError(b, nil))
	})
}

// checkFirstEvent compares eventEnded, firstEvent and firstEventError's
// err on b with sseReference, and the scan that peek does as the stream
// grows, a byte a read, with eventEnded.
func checkFirstEvent(t *testing.T, b []byte, err error) {
	t.Helper()
	ref := sseReference(b)
	if got := eventEnded(b); got != ref.ended {
		t.Fatalf("eventEnded(%q) = %v, want %v", b, got, ref.ended)
	}
	var s eventScan
	for n := range len(b) + 1 {
		if s.scan(b[:n]) != eventEnded(b[:n]) {
			t.Fatalf("scanning %q a byte at a time: at %d bytes got ended %v, want eventEnded's %v", b, n, s.ended, !s.ended)
		}
	}
	name, data := firstEvent(b)
	if name != ref.name || string(data) != ref.data {
		t.Fatalf("firstEvent(%q) = (%q, %q), want (%q, %q)", b, name, data, ref.name, ref.data)
	}
	status, isErr, decided := ref.errorStatus()
	if !decided {
		return
	}
	var se *StatusError
	switch {
	case !isErr && err != nil:
		t.Fatalf("firstEventError(%q) = %v, want nil: event %q, data %q is no error", b, err, ref.name, ref.data)
	case isErr && (!errors.As(err, &se) || se.StatusCode != status):
		t.Fatalf("firstEventError(%q) = %v, want a *StatusError with status %d", b, err, status)
	}
}

// sseEvent is the first event of a stream as sseReference reads it.
type sseEvent struct {
	name, data string
	ended      bool // a blank line dispatched it
}

// sseReference reads the first event of b as WHATWG HTML's "Interpreting
// an event stream" does, without the code under test: a leading byte
// order mark is dropped; lines end at CRLF, LF or CR; a line starting
// with ':' is a comment; a field's value loses one leading space; "event"
// sets the name and each "data" adds a line; a blank line dispatches the
// event if it has data, and else clears the name and dispatches nothing.
// The first event is the first one dispatched. If b ends before it, the
// event is the one being read, its unended last line included.
func sseReference(b []byte) sseEvent {
	s := strings.TrimPrefix(string(b), "\ufeff")
	var ev sseEvent
	var data []string
	var line strings.Builder
	field := func(l string) {
		if strings.HasPrefix(l, ":") {
			return
		}
		name, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			ev.name = value
		case "data":
			data = append(data, value)
		}
	}
	for i := 0; i < len(s) && !ev.ended; i++ {
		c := s[i]
		if c != '\r' && c != '\n' {
			line.WriteByte(c)
			continue
		}
		if c == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++ // CRLF is one line ending
		}
		l := line.String()
		line.Reset()
		switch {
		case l != "":
			field(l)
		case len(data) > 0:
			ev.ended = true
		default:
			ev.name = ""
		}
	}
	if !ev.ended {
		field(line.String())
	}
	ev.data = strings.Join(data, "\n")
	return ev
}

// errorStatus says whether the event is an error and with what status,
// from the package doc's rule: an "error" event, or data that is a JSON
// object with an "error" object, whose "type" names the status. decided
// is false where the rule is silent: a member with a type no API sends
// (a number for a message), a key given twice, or a key that differs
// from "error", "type" or "message" only in case.
func (ev sseEvent) errorStatus() (status int, isErr, decided bool) {
	top, ok := jsonMembers([]byte(ev.data), "error", "type")
	if !ok {
		return 0, false, false
	}
	var e map[string]json.RawMessage
	if raw := top["error"]; len(raw) > 0 && raw[0] == '{' {
		if e, ok = jsonMembers(raw, "type", "message"); !ok {
			return 0, false, false
		}
	}
	var typ string
	if !jsonString(top["type"], new(string)) || !jsonString(e["type"], &typ) || !jsonString(e["message"], new(string)) {
		return 0, false, false
	}
	if e == nil && ev.name != "error" {
		return 0, false, true
	}
	if typ == "" {
		typ = "unknown"
	}
	return errorTypeStatus(typ), true, true
}

// jsonMembers returns the members of b if it is a JSON object, and nil
// if it is anything else. ok is false for an object with a key given
// twice, or one that differs from a watched name only in case.
func jsonMembers(b []byte, watched ...string) (m map[string]json.RawMessage, ok bool) {
	if json.Unmarshal(b, &m) != nil || m == nil {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token() // {
	for n := 0; dec.More(); n++ {
		tok, _ := dec.Token()
		key, _ := tok.(string)
		var v json.RawMessage
		dec.Decode(&v)
		for _, w := range watched {
			if strings.EqualFold(key, w) && key != w {
				return nil, false
			}
		}
		if n >= len(m) {
			return nil, false // more members than keys: one came twice
		}
	}
	return m, true
}

// jsonString decodes a member that must be a string if it is present.
func jsonString(raw json.RawMessage, s *string) bool {
	return raw == nil || string(raw) == "null" || json.Unmarshal(raw, s) == nil
}
