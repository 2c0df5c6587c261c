package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/outlast-llm/outlast/internal/jsonscan"
)

// bodyFields are what the gateway reads from a JSON request body.
type bodyFields struct {
	model  string
	stream bool
	slot   int // llama.cpp's id_slot; -1 when absent or not a whole number
	// modelAt and modelEnd bound the value of the last "model" key in
	// the body, quotes included, if it is a string; modelEnd is 0 when
	// there is none.
	modelAt, modelEnd int
	// The Responses API's store and background: 1 for true, -1 for
	// false, 0 when absent or not a boolean.
	store, background int8
}

// scanBody reads "model", "stream", "id_slot", "store" and "background"
// from the top level of a
// JSON object in one pass, skipping every other value without decoding
// it. It is not a validator: the upstream judges the body. A body it
// cannot follow yields what it had read so far, and ok false.
//
// encoding/json would scan a large prompt twice (validate, then decode)
// and was most of the gateway's cost with 16 KiB bodies.
func scanBody(b []byte) (f bodyFields, ok bool) {
	f.slot = -1
	s := jsonscan.Scanner{B: b}
	ok = s.Members(func(key, v []byte) {
		f.set(key, v)
		if string(key) == "model" {
			f.modelAt, f.modelEnd = 0, 0
			if v[0] == '"' {
				f.modelAt = s.I - len(v) // s.I is just past v while Members calls back
				f.modelEnd = f.modelAt + len(v)
			}
		}
	})
	return f, ok
}

// set records the value of a field the gateway reads. As in
// encoding/json, the last of a repeated key wins, even when its value is
// not of the field's type: that value counts as none.
func (f *bodyFields) set(key []byte, v []byte) {
	switch string(key) {
	case "model":
		f.model = ""
		if len(v) >= 2 && v[0] == '"' {
			f.model = jsonString(v)
		}
	case "stream":
		f.stream = string(v) == "true"
	case "id_slot":
		f.slot = -1
		if n, err := strconv.Atoi(string(v)); err == nil && n >= 0 {
			f.slot = n
		}
	case "store":
		f.store = boolean(v)
	case "background":
		f.background = boolean(v)
	}
}

// boolean reads a JSON boolean as 1 or -1, and anything else as 0.
func boolean(v []byte) int8 {
	switch string(v) {
	case "true":
		return 1
	case "false":
		return -1
	}
	return 0
}

// jsonString decodes the string token v, quotes included, by JSON's
// rules, which are not Go's: JSON has \/ and writes a rune beyond the
// BMP as a UTF-16 surrogate pair of \u escapes. A string without escapes
// in valid UTF-8, the common case, is copied without decoding. A string
// that is not valid JSON yields its raw contents: the upstream judges it.
func jsonString(v []byte) string {
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw)
	}
	if s, ok := unescape(raw); ok {
		return s
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(raw)
	}
	return s
}

// unescape decodes raw, a JSON string's contents, as encoding/json does,
// in one allocation: an invalid escape or surrogate, or a byte that is
// not UTF-8, becomes U+FFFD. It reports false for contents that are not
// a valid string's (a control character, a bare quote, a bad escape).
func unescape(raw []byte) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw) + 8)
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 >= len(raw) {
				return "", false
			}
			switch e := raw[i+1]; e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r := hex4(raw[i+2:])
				if r < 0 {
					return "", false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if len(raw) > i+1 && raw[i] == '\\' && raw[i+1] == 'u' {
						if r2 := hex4(raw[i+2:]); r2 >= 0 {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								b.WriteRune(d)
								i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				b.WriteRune(r)
				continue
			default:
				return "", false
			}
			i += 2
		case c == '"' || c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			b.WriteRune(r) // U+FFFD for a byte that is not UTF-8
			i += n
		}
	}
	return b.String(), true
}

// hex4 reads the four hex digits at the start of b as a rune, or returns
// -1 if they are not there.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
