package outlast

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ErrErrorEvent is wrapped by the *StatusError of an attempt whose event
// stream opened with an error event: a 200 whose first event is Anthropic's
// overloaded_error, say. Nothing had reached the caller, so the policy
// judges it like the status that the event's error type stands for.
var ErrErrorEvent = errors.New("outlast: the stream's first event is an error")

// eventEnded reports whether b holds the stream's first event whole:
// the first one a blank line dispatches (WHATWG HTML, "Interpreting an
// event stream"). Blocks of comments alone, or of fields without data,
// are not dispatched, so they come before it.
func eventEnded(b []byte) bool {
	var s eventScan
	return s.scan(b)
}

// firstEventError returns a *StatusError if the first event in b is an
// error: an "event: error" event, or data whose JSON is an error object
// (Anthropic's {"type":"error","error":{…}} or OpenAI's {"error":{…}}).
func firstEventError(b []byte, h http.Header) error {
	name, data := firstEvent(b)
	if name != "error" && !mayNameError(data) {
		return nil // most streams: their first event is not decoded
	}
	return decodeErrorEvent(name, data, h)
}

// mayNameError reports whether data could be a JSON error object: one
// names "error", as a key or a type, in any case (as encoding/json
// matches keys), unless an escape spells it.
func mayNameError(data []byte) bool {
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	for i := 0; i+5 <= len(data); i++ {
		if data[i]|0x20 == 'e' && bytes.EqualFold(data[i:i+5], []byte("error")) {
			return true
		}
	}
	return false
}

// decodeErrorEvent is firstEventError for an event that may be an error.
func decodeErrorEvent(name string, data []byte, h http.Header) error {
	var body struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	jsonErr := json.Unmarshal(data, &body)
	if name != "error" && (jsonErr != nil || body.Error == nil) {
		return nil
	}
	typ := "unknown"
	if jsonErr == nil && body.Error != nil && body.Error.Type != "" {
		typ = body.Error.Type
	}
	return &StatusError{
		StatusCode: errorTypeStatus(typ),
		Header:     h,
		Err:        fmt.Errorf("%w: %s", ErrErrorEvent, typ),
	}
}

// firstEvent returns the first event's name and its data lines joined.
// If b ends before a blank line dispatches one, they are those of the
// event still being read, its last line too if b ends inside it.
func firstEvent(b []byte) (name string, data []byte) {
	var s eventScan
	if !s.scan(b) {
		s.field(s.tail(b))
	}
	return string(s.name), bytes.Join(s.data, []byte("\n"))
}

// utf8BOM is the byte order mark that WHATWG strips, once, from the start
// of an event stream.
var utf8BOM = []byte("\ufeff")

// eventScan reads the opening of an event stream a line at a time, as
// WHATWG HTML's "Interpreting an event stream" does, up to the end of its
// first dispatched event. It keeps its place, so that peek can give it the
// stream each time a read grows it without rescanning what came before,
// and its result is the same however the stream was split.
type eventScan struct {
	off   int      // where in the stream the next line starts
	cr    bool     // the last line ended at a CR, which an LF may follow as one CRLF
	name  []byte   // the event type buffer
	data  [][]byte // the data buffer, a line a field
	ended bool     // a blank line dispatched the event in name and data
}

// scan reads the lines of b, the stream so far, that it has not read, and
// reports whether the first event has ended. Only whole lines are read:
// the rest waits for the bytes that end it.
func (s *eventScan) scan(b []byte) bool {
	for !s.ended && s.off < len(b) {
		if s.cr {
			// A line ends at CRLF, LF or CR: an LF right after a CR is the
			// same line ending, even when the CR came in an earlier read.
			s.cr = false
			if b[s.off] == '\n' {
				s.off++
				continue
			}
		}
		rest := s.tail(b)
		i := bytes.IndexAny(rest, "\r\n")
		if i < 0 {
			break
		}
		s.cr = rest[i] == '\r'
		s.off = len(b) - len(rest) + i + 1
		s.line(rest[:i])
	}
	return s.ended
}

// tail returns what of b scan has not read. A leading byte order mark is
// not part of the first line.
func (s *eventScan) tail(b []byte) []byte {
	if s.off == 0 {
		return bytes.TrimPrefix(b, utf8BOM)
	}
	return b[s.off:]
}

// line takes one line of the stream, without its line ending.
func (s *eventScan) line(l []byte) {
	if len(l) > 0 {
		s.field(l)
		return
	}
	// A blank line dispatches the event, unless its data buffer is empty:
	// then the event type is reset and nothing is dispatched, so a block
	// of comments (": ping", a proxy's keep-alive) is not the first event.
	if len(s.data) > 0 {
		s.ended = true
		return
	}
	s.name = nil
}

// field takes a line that is not blank: a comment (a line starting with a
// colon, whose field name is empty) or a field, of which only event and
// data matter here.
func (s *eventScan) field(l []byte) {
	name, value, _ := bytes.Cut(l, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		s.name = value
	case "data":
		s.data = append(s.data, value)
	}
}

// errorTypeStatus maps an API error type to the status that the same
// error has when it comes as a response (Anthropic's and OpenAI's error
// types). An unknown type counts as a server error.
func errorTypeStatus(typ string) int {
	switch typ {
	case "overloaded_error":
		return 529
	case "rate_limit_error", "rate_limit_exceeded":
		return http.StatusTooManyRequests
	case "timeout_error":
		return http.StatusGatewayTimeout
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}
