package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// scanBody reads the three fields the gateway needs, as encoding/json
// would with exact key names, skipping everything else.
func TestScanBody(t *testing.T) {
	cases := []struct {
		name string
		body string
		want bodyFields
		ok   bool
	}{
		{"OpenAI chat", `{"model":"gpt-x","messages":[{"role":"user","content":"hi, {\"x\":1}"}],"stream":true}`, bodyFields{"gpt-x", true, -1}, true},
		{"llama.cpp slot", `{ "prompt" : "a]b}" , "id_slot" : 3 , "n_predict": 8 }`, bodyFields{"", false, 3}, true},
		// -1 is llama.cpp's "any slot".
		{"any slot", `{"id_slot":-1}`, bodyFields{"", false, -1}, true},
		{"stream false", `{"stream":false,"model":"m"}`, bodyFields{"m", false, -1}, true},
		// The last of a repeated key wins, as in encoding/json.
		{"repeated key", `{"model":"a","model":"b"}`, bodyFields{"b", false, -1}, true},
		{"escaped model", `{"model":"a\"b\u00e9"}`, bodyFields{"a\"bé", false, -1}, true},
		{"nested fields are not read", `{"x":{"model":"inner","stream":true}}`, bodyFields{"", false, -1}, true},
		{"empty object", `{}`, bodyFields{"", false, -1}, true},
		// A broken body keeps what came before the break.
		{"cut short", `{"model":"m","messages":[{"role":`, bodyFields{"m", false, -1}, false},
		{"not an object", `[1,2]`, bodyFields{"", false, -1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := scanBody([]byte(c.body))
			if got != c.want || ok != c.ok {
				t.Errorf("got %+v %v, want %+v %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// FuzzScanBody checks scanBody against encoding/json on every valid JSON
// object without escapes in it, and that it never panics on anything.
func FuzzScanBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"id_slot":2}`,
		`{"messages":[{"content":"a\"}]"}],"model":"x"}`,
		`{"a":[[[]]],"b":{"c":{}},"stream":false}`,
		`{"id_slot":1.5}`, `{"id_slot":"2"}`, `{"model":null}`, `{ }`, `{"":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := scanBody(b)
		var m map[string]json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &m) != nil || m == nil || bytes.ContainsRune(b, '\\') {
			return
		}
		want := bodyFields{slot: -1}
		var model string
		if json.Unmarshal(m["model"], &model) == nil {
			want.model = model
		}
		want.stream = strings.TrimSpace(string(m["stream"])) == "true"
		var slot int
		if json.Unmarshal(m["id_slot"], &slot) == nil && slot >= 0 && !strings.ContainsAny(string(m["id_slot"]), ".eE") {
			want.slot = slot
		}
		if !ok || got != want {
			t.Fatalf("scanBody(%q) = %+v %v, want %+v true", b, got, ok, want)
		}
	})
}
