// Package sse holds what the Transport and the gateway must judge alike
// about server-sent events: whether a response is a stream, the one
// reader of event streams (Scanner), and what an event of the LLM APIs
// outlast knows means to the commit point (KindOf).
package sse

import (
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
