package sse

import (
	"mime"
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

// FuzzIsStream checks IsStream's fast path against mime.ParseMediaType,
// which its slow path and RFC 9110 §8.3.1 both follow: the media type,
// case-insensitive, is text/event-stream, whatever its parameters.
func FuzzIsStream(f *testing.F) {
	for _, s := range []string{
		"text/event-stream", "text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM",
		"text/event-stream ;charset=UTF-8", "application/json", "application/json; charset=utf-8",
		"", " text/event-stream", "text/event-stream;", "text/event-stream; charset", "text/event-streamx",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		h := http.Header{"Content-Type": {ct}}
		mt, _, _ := mime.ParseMediaType(ct)
		if got, want := IsStream(h), mt == "text/event-stream"; got != want {
			t.Fatalf("IsStream(Content-Type %q) = %v, want %v (media type %q)", ct, got, want, mt)
		}
		// Only the first value counts, as http.Header.Get reads it.
		h["Content-Type"] = append(h["Content-Type"], "text/event-stream")
		if got, want := IsStream(h), mt == "text/event-stream"; got != want {
			t.Fatalf("IsStream(Content-Type %q, text/event-stream) = %v, want %v", ct, got, want)
		}
	})
}

// HasField tells a stream's start from a body that holds no line of an
// event stream.
func TestHasField(t *testing.T) {
	for _, c := range []struct {
		p    string
		want bool
	}{
		{"data: {\"x\":1}", true},
		{"\ufeffevent: message_start\n", true},
		{": ping\n\n", true},
		{"\r\nid: 7\r\n", true},
		{"retry: 10\n", true},
		{"data\n", true},
		{`{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`, false},
		{"[1, 2]\n", false},
		{"<html><body>502 Bad Gateway</body></html>", false},
		{"", false},
		{"\n\n", false},
		{"datum: 1\n", false},
	} {
		if got := HasField([]byte(c.p)); got != c.want {
			t.Errorf("HasField(%q) = %v, want %v", c.p, got, c.want)
		}
	}
}
