package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
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
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(raw)
	}
	return s
}
