package journal

import (
	"net/http"
	"strings"
)

// secretHeaders are the headers that carry credentials. [Redact] always
// removes them, and so does every Store on write.
var secretHeaders = []string{
	"Authorization",
	"Proxy-Authorization",
	"Cookie",
	"Set-Cookie",
	"X-Api-Key",      // Anthropic
	"Api-Key",        // Azure OpenAI
	"X-Goog-Api-Key", // Gemini
}

// Redact returns a copy of h without the headers that carry credentials
// (Authorization, Proxy-Authorization, Cookie, Set-Cookie, X-Api-Key,
// Api-Key, X-Goog-Api-Key) and without those named in extra, which are
// matched case-insensitively. Keys are canonicalized. A nil h gives nil.
func Redact(h http.Header, extra []string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		k = http.CanonicalHeaderKey(k)
		if isSecret(k) || named(k, extra) {
			continue
		}
		// A header given twice under keys that differ only in case
		// (possible in a hand-built map) is merged, not lost.
		out[k] = append(out[k], vs...)
	}
	return out
}

// isSecret reports whether the canonical key k is a credential header.
func isSecret(k string) bool {
	return named(k, secretHeaders)
}

func named(k string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(k, strings.TrimSpace(n)) {
			return true
		}
	}
	return false
}

// Sanitize returns msg with every URL in it cut down to its scheme, host
// and path: the user info (user:password@), the query and the fragment are
// removed. Transport errors quote the URL they failed on, as in
//
//	Post "https://api.example.com/v1/chat?key=…": dial tcp: connection refused
//
// and some APIs take a key in the query.
//
// A URL is any text from a scheme before "://" up to the next white space,
// quote, backquote or angle bracket, the characters that end a URL quoted
// in a message.
func Sanitize(msg string) string {
	if !strings.Contains(msg, "://") {
		return msg // the common case, without an allocation
	}
	var b strings.Builder
	b.Grow(len(msg))
	for {
		i := strings.Index(msg, "://")
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		// msg[:i] ends with the scheme, kept as is; the URL's rest runs
		// from i to the end of the token.
		end := i + strings.IndexFunc(msg[i:], endsURL)
		if end < i {
			end = len(msg)
		}
		b.WriteString(msg[:i])
		b.WriteString(cleanURL(msg[i:end]))
		msg = msg[end:]
	}
}

// cleanURL cuts the user info, query and fragment from rest, a URL from its
// "://" on.
func cleanURL(rest string) string {
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	// The authority ends at the path; an '@' before then ends the user
	// info. The last '@' counts, because a password may hold one.
	authEnd := len(rest)
	if i := strings.IndexByte(rest[3:], '/'); i >= 0 {
		authEnd = 3 + i
	}
	if at := strings.LastIndexByte(rest[:authEnd], '@'); at >= 0 {
		rest = "://" + rest[at+1:]
	}
	return rest
}

// endsURL reports whether r ends a URL quoted in a message.
func endsURL(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}
