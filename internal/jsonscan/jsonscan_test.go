package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzMembers checks Members and Elements against encoding/json: for a
// valid JSON object, the members walked are the object's, each value
// valid JSON, and the last of a repeated key, which wins as it does
// there, the bytes encoding/json reads for it; an array's elements
// likewise. Each value Members gives is B[I-len(value):I] while member
// runs. It never panics on anything else.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
		`{ "a" : [ 1 , {"b":"]}"} ] , "c":"\"}" }`,
		`{"a":1,"b":2,"a":3}`, `{"a":1,"\u0061":2,"c":{}}`,
		`{}`, `[]`, `[1,"2",{"3":[4]}]`, `{"a":1} x`, `{"a`, `{"a":}`,
		`{"n":[-0.5e+3,0,1E2,true,false,null,{}],"s":"\u00e9\/\b"}`, `[01]`, `[1.]`, `[-]`, `[1e]`,
		`{"a":"\x"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", `[tru]`, `[nul,1]`, `{"a":1,}`, `[1,]`, `[[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var keys, values [][]byte
		s := Scanner{B: b}
		ok := s.Members(func(k, v []byte) {
			if at := s.I - len(v); at < 0 || len(v) == 0 || &b[at] != &v[0] {
				t.Fatalf("%q: the value %q is not B[I-len(value):I], I %d", b, v, s.I)
			}
			keys, values = append(keys, k), append(values, v)
		})
		var obj map[string]json.RawMessage
		if json.Unmarshal(b, &obj) == nil && obj != nil {
			if !ok {
				t.Fatalf("%q: Members failed on a valid object", b)
			}
			walked := map[string][]byte{}
			for i, k := range keys {
				var key string
				if json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &key) != nil {
					t.Fatalf("%q: key %q is not a JSON string's contents", b, k)
				}
				if !json.Valid(values[i]) {
					t.Fatalf("%q: the value of %q, %q, is not valid JSON", b, k, values[i])
				}
				walked[key] = values[i] // the last of a repeated key wins
			}
			if len(walked) != len(obj) {
				t.Fatalf("%q: Members gave %d keys, encoding/json %d", b, len(walked), len(obj))
			}
			for key, want := range obj {
				if got, found := walked[key]; !found || !bytes.Equal(got, want) {
					t.Fatalf("%q: the value of %q is %q (found %v), encoding/json reads %q", b, key, got, found, want)
				}
			}
		}
		// Object and Array, walking a text in place to any depth as the
		// gateway's readers do, hold it to JSON's grammar under Strict as
		// json.Valid does: the nesting is theirs here, not a skip's.
		in := Scanner{B: b, Strict: true}
		in.Space()
		if got, want := walkInPlace(&in) && in.End(), json.Valid(b); got != want {
			t.Fatalf("%q: a Strict walk in place says %v, json.Valid %v", b, got, want)
		}
		// Strict: a walk that succeeds, with nothing after it, crossed a
		// valid text; a valid text no deeper than MaxDepth is walked.
		for _, w := range []struct {
			name string
			top  byte
			walk func(*Scanner) bool
		}{
			{"Members", '{', func(s *Scanner) bool { return s.Members(func(_, _ []byte) {}) }},
			{"Elements", '[', func(s *Scanner) bool { return s.Elements(func([]byte) {}) }},
		} {
			st := Scanner{B: b, Strict: true}
			sok := w.walk(&st) && st.End()
			valid := json.Valid(b)
			if sok && !valid {
				t.Fatalf("%q: a Strict %s walk succeeded on a text json.Valid rejects", b, w.name)
			}
			if !sok && valid && bytes.TrimLeft(b, " \t\r\n")[0] == w.top && depth(b) <= MaxDepth {
				t.Fatalf("%q: a Strict %s walk failed on a valid text %d deep", b, w.name, depth(b))
			}
		}
		var arr []json.RawMessage
		var elems [][]byte
		as := Scanner{B: b}
		aok := as.Elements(func(v []byte) { elems = append(elems, v) })
		if json.Unmarshal(b, &arr) == nil && arr != nil {
			if !aok || len(elems) != len(arr) {
				t.Fatalf("%q: Elements gave %d elements (%v), encoding/json %d", b, len(elems), aok, len(arr))
			}
			for i := range elems {
				if !bytes.Equal(elems[i], arr[i]) {
					t.Fatalf("%q: element %d is %q, encoding/json reads %q", b, i, elems[i], arr[i])
				}
			}
		}
	})
}

// walkInPlace walks the value at s in place: an object or array through
// Object or Array, each member or element in turn, and a scalar through
// Null or Value.
func walkInPlace(s *Scanner) bool {
	switch s.peek() {
	case '{':
		return s.Object(func([]byte) bool { return walkInPlace(s) })
	case '[':
		return s.Array(func() bool { return walkInPlace(s) })
	}
	if s.Null() {
		return true
	}
	_, ok := s.Value()
	return ok
}

// depth returns how deeply the valid JSON text b nests.
func depth(b []byte) int {
	d, most := 0, 0
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			d++
			most = max(most, d)
		case !in && (c == '}' || c == ']'):
			d--
		}
	}
	return most
}
