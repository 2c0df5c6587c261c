package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
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
	s := scanner{b: b}
	if !s.next('{') {
		return f, false
	}
	if s.space(); s.peek() == '}' {
		return f, true
	}
	for {
		key, kok := s.str()
		if !kok || !s.next(':') {
			return f, false
		}
		s.space()
		start := s.i
		if !s.skipValue() {
			return f, false
		}
		f.set(key, b[start:s.i])
		if string(key) == "model" {
			f.modelAt, f.modelEnd = 0, 0
			if b[start] == '"' {
				f.modelAt, f.modelEnd = start, s.i
			}
		}
		switch s.space(); s.peek() {
		case ',':
			s.i++
			s.space()
		case '}':
			return f, true
		default:
			return f, false
		}
	}
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
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(raw)
	}
	return s
}

// scanner walks a JSON text without decoding it.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips space and then c, and reports whether c was there.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// str reads a string and returns its raw contents: only keys are read
// this way, and the keys the gateway wants have no escapes. The contents
// are not copied, since most keys are only compared and dropped.
func (s *scanner) str() ([]byte, bool) {
	s.space()
	start := s.i
	if !s.skipString() {
		return nil, false
	}
	return s.b[start+1 : s.i-1], true
}

// skipString skips a string, escapes included.
func (s *scanner) skipString() bool {
	if s.peek() != '"' {
		return false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return true
		}
	}
	return false
}

// skipValue skips one value: a string, or anything up to the end of its
// nesting, counting brackets outside strings.
func (s *scanner) skipValue() bool {
	switch s.peek() {
	case '"':
		return s.skipString()
	case '{', '[':
		return s.skipNested()
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		}
		s.i++
	}
	return false
}

// skipNested skips an object or array.
func (s *scanner) skipNested() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if !s.skipString() {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}
