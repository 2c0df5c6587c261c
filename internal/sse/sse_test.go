package sse

import (
	"net/http"
	"testing"
)

func TestIsStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                true,
		"text/event-stream; charset=utf-8": true,
		"Text/Event-Stream; charset=UTF-8": true, // the slow path, case-insensitive
		"text/event-stream;foo=bar":        true,
		"application/json":                 false,
		"":                                 false,
		"text/plain":                       false,
		"text/event-streamx":               false,
		";;;":                              false,
	} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if got := IsStream(h); got != want {
			t.Errorf("IsStream(%q) = %v, want %v", ct, got, want)
		}
	}
}
