// Package sse holds what the Transport and the gateway must judge alike
// about server-sent events: whether a response is a stream, the one
// reader of event streams (Scanner), and what an event of the LLM APIs
// outlast knows means to the commit point (KindOf).
package sse

import (
	"bytes"
	"mime"
	"net/http"
)

// IsStream reports whether h's Content-Type is text/event-stream. It
// reads the canonical key directly: h.Get would canonicalize it again on
// every call, and a response is judged so several times.
func IsStream(h http.Header) bool {
	ct := ""
	if v := h["Content-Type"]; len(v) > 0 {
		ct = v[0]
	}
	switch ct {
	case "text/event-stream", "text/event-stream; charset=utf-8":
		return true // the common forms, without ParseMediaType's allocations
	case "application/json", "application/json; charset=utf-8", "":
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "text/event-stream"
}

// HasField reports whether p, a stream's start, holds a line of an event
// stream: a comment (":…"), or a field that WHATWG's reader acts on
// (data, event, id, retry). A body that holds none of them, such as a
// JSON answer labelled as a stream, has nothing a client reads as one.
// A leading byte order mark is skipped, as the reader skips it.
func HasField(p []byte) bool {
	p = bytes.TrimPrefix(p, utf8BOM)
	for len(p) > 0 {
		end := bytes.IndexAny(p, "\r\n")
		line := p
		if end >= 0 {
			line, p = p[:end], p[end+1:]
		} else {
			p = nil
		}
		if len(line) == 0 {
			continue
		}
		if line[0] == ':' {
			return true
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		switch string(name) {
		case "data", "event", "id", "retry":
			return true
		}
	}
	return false
}
