package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzMembers checks Members and Elements against encoding/json: for a
// valid JSON object, the members walked are the object's, in order, each
// value valid JSON that decodes as the object's own; an array's elements
// likewise. It never panics on anything else.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
		`{ "a" : [ 1 , {"b":"]}"} ] , "c":"\"}" }`,
		`{}`, `[]`, `[1,"2",{"3":[4]}]`, `{"a":1} x`, `{"a`, `{"a":}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var obj map[string]json.RawMessage
		var keys [][]byte
		var values [][]byte
		s := Scanner{B: b}
		ok := s.Members(func(k, v []byte) {
			keys, values = append(keys, k), append(values, v)
		})
		if json.Unmarshal(b, &obj) == nil && obj != nil && bytes.TrimSpace(b)[0] == '{' {
			if !ok {
				t.Fatalf("%q: Members failed on a valid object", b)
			}
			for i, k := range keys {
				var key string
				if json.Unmarshal(append(append([]byte{'"'}, k...), '"'), &key) != nil {
					t.Fatalf("%q: key %q is not a JSON string's contents", b, k)
				}
				if !json.Valid(values[i]) {
					t.Fatalf("%q: the value of %q, %q, is not valid JSON", b, k, values[i])
				}
			}
			if len(obj) > 0 {
				last := keys[len(keys)-1]
				var key string
				json.Unmarshal(append(append([]byte{'"'}, last...), '"'), &key)
				var a, c any
				json.Unmarshal(values[len(values)-1], &a)
				json.Unmarshal(obj[key], &c)
				if ja, _ := json.Marshal(a); !bytes.Equal(ja, mustMarshal(c)) && countKey(keys, last) == 1 {
					t.Fatalf("%q: the value of %q is %q, encoding/json reads %q", b, key, values[len(values)-1], obj[key])
				}
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
				if !json.Valid(elems[i]) {
					t.Fatalf("%q: element %d, %q, is not valid JSON", b, i, elems[i])
				}
			}
		}
	})
}

func mustMarshal(v any) []byte { b, _ := json.Marshal(v); return b }

func countKey(keys [][]byte, k []byte) int {
	n := 0
	for _, x := range keys {
		if bytes.Equal(x, k) {
			n++
		}
	}
	return n
}
