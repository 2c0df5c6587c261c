package outlast

import (
	"errors"
	"testing"
)

// FuzzFirstEventError feeds arbitrary stream openings to the first-event
// parser: it must never panic, and what it reports must be a status the
// policy can judge.
func FuzzFirstEventError(f *testing.F) {
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"))
	f.Add([]byte("data: {\"error\":{\"type\":\"server_error\",\"code\":null}}\r\n\r\n"))
	f.Add([]byte("event: message_start\ndata: {}\n\n"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("event: error\n\n"))
	f.Add([]byte(":comment\ndata\ndata:\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := firstEventError(b, nil)
		if err == nil {
			return
		}
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode < 400 || se.StatusCode > 599 || !errors.Is(err, ErrErrorEvent) {
			t.Fatalf("got %v, want a *StatusError 4xx/5xx wrapping ErrErrorEvent", err)
		}
	})
}
