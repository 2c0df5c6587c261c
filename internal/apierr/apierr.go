// Package apierr writes the errors that outlast's gateway makes itself,
// for the proxy and its /outlast/ endpoints alike, in one shape: OpenAI's
// error object with Anthropic's top-level "type", so that both SDKs read
// it as an API error, and an Outlast-Error header naming its kind:
//
//	Outlast-Error: busy
//	{"type":"error","error":{"type":"outlast_busy","message":"…"}}
//
// The error's type is "outlast_" and the kind, with underscores for
// hyphens.
package apierr

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Header is the response header that names the kind of an error the
// gateway made.
const Header = "Outlast-Error"

// The kinds of error, in Outlast-Error.
const (
	Invalid     = "invalid"        // 400: a bad Outlast-* header, body or query parameter
	NotFound    = "not-found"      // 404: no upstream, endpoint or record for the path
	Method      = "method"         // 405: the endpoint does not take the method
	TooSlow     = "too-slow"       // 408: the body came too slowly
	TooLarge    = "too-large"      // 413: the body is over the gateway's limit
	Internal    = "internal"       // 500: the gateway failed, as in reading its journal
	Unreachable = "unreachable"    // 502: the upstream could not be reached
	Broke       = "upstream-broke" // 502: the upstream broke off its answer before the body's first byte
	RateLimited = "rate-limited"   // 429: every member of a pool is out of quota until after the request's deadline less reserve
	Busy        = "busy"           // 503: the slot's queue, or the gateway's connections, are full
	Down        = "upstream-down"  // 503: the upstream is down, and its next chance comes after the request's deadline less reserve
	Shutdown    = "shutdown"       // 503: the gateway is shutting down
	Timeout     = "timeout"        // 504: no first byte from the upstream in time
	Deadline    = "deadline"       // 504: the request's deadline passed
	Token       = "token"          // 401: the request lacks the gateway's token
)

// Type returns the JSON error type of kind: "outlast_too_large" for
// "too-large".
func Type(kind string) string {
	return "outlast_" + strings.ReplaceAll(kind, "-", "_")
}

// body is the error's JSON shape.
type body struct {
	Type  string `json:"type"`
	Error struct {
		Type     string `json:"type"`
		Message  string `json:"message"`
		Upstream string `json:"upstream,omitempty"`
	} `json:"error"`
}

// Body returns the JSON of an error of kind with msg and, if not empty,
// the upstream's own answer, quoted as a string.
func Body(kind, msg string, upstream []byte) []byte {
	var e body
	e.Type = "error"
	e.Error.Type, e.Error.Message = Type(kind), msg
	if len(upstream) > 0 {
		e.Error.Upstream = string(upstream)
	}
	b, _ := json.Marshal(e) // strings only: it cannot fail
	return b
}

// Write answers with an error of kind: the status, Outlast-Error, and the
// JSON body, ended by a newline. Headers already set on w are kept, but
// for Content-Length, which the body replaces.
func Write(w http.ResponseWriter, status int, kind, msg string) {
	h := w.Header()
	h.Set(Header, kind)
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(Body(kind, msg, nil), '\n'))
}
