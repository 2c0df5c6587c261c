// Package redact removes secrets from what outlast reports: the headers
// that carry credentials, and the query, fragment and user info of every
// URL in a message. It holds the one credential list and the one
// sanitizer: the library's log lines, the gateway's record and health, the
// journal and the traces all use them.
package redact

import (
	"net/http"
	"net/url"
	"strings"
)

// credentials are the headers that carry credentials. They never reach an
// observer, a log line, the journal or a trace.
var credentials = []string{
	"Authorization",
	"Proxy-Authorization",
	"Cookie",
	"Set-Cookie",
	"X-Api-Key",      // Anthropic
	"Api-Key",        // Azure OpenAI
	"X-Goog-Api-Key", // Gemini
	"Outlast-Token",  // the gateway's own
}

// Credentials returns the names of the headers that carry credentials, in
// canonical form.
func Credentials() []string { return append([]string(nil), credentials...) }

// IsCredential reports whether the header name carries credentials, in
// any case.
func IsCredential(name string) bool { return named(name, credentials) }

// Header returns a copy of h without the credential headers and without
// those named in extra, both matched in any case. Keys are canonical, and
// values are copied, so the result can be kept and changed. A nil h gives
// nil.
func Header(h http.Header, extra []string) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		if IsCredential(k) || named(k, extra) {
			continue
		}
		// A header given twice under keys that differ only in case
		// (possible in a hand-built map) is merged, not lost.
		k = http.CanonicalHeaderKey(k)
		out[k] = append(out[k], vs...)
	}
	return out
}

func named(k string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(k, strings.TrimSpace(n)) {
			return true
		}
	}
	return false
}

// URL returns u as scheme://host/path: without its user info, query and
// fragment, any of which may hold a key. A nil u gives "".
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return c.String()
}

// Text returns msg fit to show or keep: every query is cut, from its '?'
// to the end of its word, and every URL loses its user info
// (user:pass@) and fragment. Transport errors quote the URL they failed
// on, as in
//
//	Post "https://api.example.com/v1/chat?key=…": dial tcp: connection refused
//
// and some APIs take a key in the query. A word ends at white space, a
// quote, a backquote or an angle bracket, the characters that end a URL
// quoted in a message.
//
// A '?' outside a URL loses its word's tail too: a message is worth less
// than the certainty that no query survives.
func Text(msg string) string {
	if !strings.ContainsAny(msg, "?@#") {
		return msg // the common case, without an allocation
	}
	var b strings.Builder
	b.Grow(len(msg))
	for msg != "" {
		end := strings.IndexFunc(msg, endsWord)
		if end < 0 {
			end = len(msg)
		}
		b.WriteString(cleanWord(msg[:end]))
		// The delimiter, if any, is kept: it is one byte, since every
		// rune endsWord accepts is ASCII.
		if end < len(msg) {
			b.WriteByte(msg[end])
			end++
		}
		msg = msg[end:]
	}
	return b.String()
}

// cleanWord cuts w's query and, if w holds a URL, its fragment and user
// info.
func cleanWord(w string) string {
	if i := strings.IndexByte(w, '?'); i >= 0 {
		w = w[:i]
	}
	i := strings.Index(w, "://")
	if i < 0 {
		return w
	}
	// The fragment is the URL's: a '#' before the scheme's "://" is not one.
	if j := strings.IndexByte(w[i:], '#'); j >= 0 {
		w = w[:i+j]
	}
	// The authority runs from "://" to the path; its last '@' ends the
	// user info, since a password may hold an '@' of its own.
	auth := w[i+3:]
	if j := strings.IndexByte(auth, '/'); j >= 0 {
		auth = auth[:j]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		w = w[:i+3] + w[i+3+at+1:]
	}
	return w
}

// endsWord reports whether r ends a word, and so a URL, in a message.
func endsWord(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}
