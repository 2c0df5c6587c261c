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

// eventEnded reports whether b holds a whole server-sent event: one ended
// by a blank line (WHATWG HTML, "Interpreting an event stream").
func eventEnded(b []byte) bool {
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\r\r"))
}

// firstEventError returns a *StatusError if the first event in b is an
// error: an "event: error" event, or data whose JSON is an error object
// (Anthropic's {"type":"error","error":{…}} or OpenAI's {"error":{…}}).
func firstEventError(b []byte, h http.Header) error {
	name, data := firstEvent(b)
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
func firstEvent(b []byte) (name string, data []byte) {
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
		b = b[:i]
	}
	var lines [][]byte
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			lines = append(lines, value)
		}
	}
	return name, bytes.Join(lines, []byte("\n"))
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
