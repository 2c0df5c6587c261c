package tracing

import "strings"

// sanitize returns msg fit for a span: every query is cut, from its '?'
// to the end of its word, and every URL loses its user info (user:pass@)
// and fragment. Transport errors quote the URL they failed on, as in
//
//	Post "https://api.example.com/v1/chat?key=…": dial tcp: connection refused
//
// and some APIs take a key in the query. A word ends at white space, a
// quote, a backquote or an angle bracket, the characters that end a URL
// quoted in a message.
//
// A '?' outside a URL loses its word's tail too: a message is worth less
// than the certainty that no query survives.
func sanitize(msg string) string {
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
	if j := strings.IndexByte(w, '#'); j >= 0 {
		w = w[:j]
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
