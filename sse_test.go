package outlast

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
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
}

// FuzzFirstEventError feeds arbitrary stream openings to the first-event
// parser. It must never panic; what it reports must be a status the
// policy can judge; and on streams whose lines all end alike, with LF or
// with CRLF (what servers send), it must agree with sseReference, WHATWG's
// grammar written independently. FuzzFirstEventWHATWG checks the other
// line endings.
func FuzzFirstEventError(f *testing.F) {
	for _, s := range sseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := firstEventError(b, nil)
		if err != nil {
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode < 400 || se.StatusCode > 599 || !errors.Is(err, ErrErrorEvent) {
				t.Fatalf("firstEventError(%q): got %v, want a *StatusError 4xx/5xx wrapping ErrErrorEvent", b, err)
			}
		}
		if !sseUniformEndings(b) || bytes.HasPrefix(b, []byte("\ufeff")) {
			return
		}
		checkFirstEvent(t, b, err)
	})
}

// FuzzFirstEventWHATWG is FuzzFirstEventError's agreement with WHATWG's
// grammar for every input: a line may end with CRLF, LF or CR, alone or
// mixed, and a leading byte order mark is ignored ("Interpreting an event
// stream", which sse.go cites).
func FuzzFirstEventWHATWG(f *testing.F) {
	knownBug(f, "sse.go: eventEnded misses a blank line of mixed endings (\"\\n\\r\\n\"), "+
		"and firstEvent splits lines only at LF, so an error event with CR line endings, or after a byte order mark, is not seen")
	for _, s := range sseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFirstEvent(t, b, firstEventError(b, nil))
	})
}

// checkFirstEvent compares eventEnded, firstEvent and firstEventError's
// err on b with sseReference.
func checkFirstEvent(t *testing.T, b []byte, err error) {
	t.Helper()
	ref := sseReference(b)
	if got := eventEnded(b); got != ref.ended {
		t.Fatalf("eventEnded(%q) = %v, want %v", b, got, ref.ended)
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
	ended      bool // a blank line ended it
}

// sseReference reads the first event of b as WHATWG HTML's "Interpreting
// an event stream" does, without the code under test: a leading byte
// order mark is dropped; lines end at CRLF, LF or CR; a line starting
// with ':' is a comment; a field's value loses one leading space; "event"
// sets the name and each "data" adds a line. The event ends at the first
// blank line, a line ending right after another, as eventEnded counts
// them (a stream that opens with one line ending has not ended an event).
func sseReference(b []byte) sseEvent {
	s := strings.TrimPrefix(string(b), "\ufeff")
	var ev sseEvent
	var data []string
	var line strings.Builder
	afterEnd := false // the last thing read was a line ending
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
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\r' && c != '\n' {
			line.WriteByte(c)
			afterEnd = false
			continue
		}
		if c == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++ // CRLF is one line ending
		}
		if afterEnd {
			ev.ended = true
			break
		}
		field(line.String())
		line.Reset()
		afterEnd = true
	}
	if !ev.ended && line.Len() > 0 {
		field(line.String()) // a last line the stream has not ended yet
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

// sseUniformEndings reports whether every line of b ends alike: no CR
// at all, or every CR followed by LF and every LF preceded by CR.
func sseUniformEndings(b []byte) bool {
	if bytes.IndexByte(b, '\r') < 0 {
		return true
	}
	return bytes.Count(b, []byte("\r\n")) == bytes.Count(b, []byte("\r")) &&
		bytes.Count(b, []byte("\r\n")) == bytes.Count(b, []byte("\n"))
}
