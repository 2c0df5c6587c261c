package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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
		{"OpenAI chat", `{"model":"gpt-x","messages":[{"role":"user","content":"hi, {\"x\":1}"}],"stream":true}`, bodyFields{model: "gpt-x", stream: true, slot: -1}, true},
		{"llama.cpp slot", `{ "prompt" : "a]b}" , "id_slot" : 3 , "n_predict": 8 }`, bodyFields{model: "", stream: false, slot: 3}, true},
		// -1 is llama.cpp's "any slot".
		{"any slot", `{"id_slot":-1}`, bodyFields{model: "", stream: false, slot: -1}, true},
		{"stream false", `{"stream":false,"model":"m"}`, bodyFields{model: "m", stream: false, slot: -1}, true},
		// The last of a repeated key wins, as in encoding/json.
		{"repeated key", `{"model":"a","model":"b"}`, bodyFields{model: "b", stream: false, slot: -1}, true},
		{"escaped model", `{"model":"a\"b\u00e9"}`, bodyFields{model: "a\"bé", stream: false, slot: -1}, true},
		// JSON's escapes are not Go's: \/ is JSON's alone, and a rune
		// beyond the BMP is a UTF-16 surrogate pair.
		{"escaped slash", `{"model":"gpt\/4"}`, bodyFields{model: "gpt/4", stream: false, slot: -1}, true},
		{"surrogate pair", `{"model":"\ud83d\ude00"}`, bodyFields{model: "😀", stream: false, slot: -1}, true},
		// The last of a repeated key wins even when it is of another
		// type, and then it is none.
		{"repeated model null", `{"model":"a","model":null}`, bodyFields{model: "", stream: false, slot: -1}, true},
		{"repeated slot string", `{"id_slot":2,"id_slot":"x"}`, bodyFields{model: "", stream: false, slot: -1}, true},
		{"repeated stream", `{"stream":true,"stream":1}`, bodyFields{model: "", stream: false, slot: -1}, true},
		// llama.cpp takes a null id_slot as none given.
		{"null slot", `{"id_slot":null}`, bodyFields{model: "", stream: false, slot: -1}, true},
		{"nested fields are not read", `{"x":{"model":"inner","stream":true}}`, bodyFields{model: "", stream: false, slot: -1}, true},
		{"empty object", `{}`, bodyFields{model: "", stream: false, slot: -1}, true},
		// A broken body keeps what came before the break.
		{"cut short", `{"model":"m","messages":[{"role":`, bodyFields{model: "m", stream: false, slot: -1}, false},
		{"not an object", `[1,2]`, bodyFields{model: "", stream: false, slot: -1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := scanBody([]byte(c.body))
			got.modelAt, got.modelEnd = 0, 0 // TestScanModelSpan checks them
			if got != c.want || ok != c.ok {
				t.Errorf("got %+v %v, want %+v %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// The model's span is its value's, quotes included, for a rewrite: the
// last of a repeated key's, and none without one.
func TestScanModelSpan(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"model":"gpt-4o","stream":true}`, `"gpt-4o"`},
		{`{ "messages":[], "model" : "a\"b" }`, `"a\"b"`},
		{`{"model":"a","model":"b"}`, `"b"`},
		{`{"messages":[]}`, ``},
	} {
		f, _ := scanBody([]byte(c.body))
		if got := c.body[f.modelAt:f.modelEnd]; got != c.want {
			t.Errorf("%s: span %q, want %q", c.body, got, c.want)
		}
	}
}

// scanSeeds are bodies for the scanner's fuzzers: the APIs' shapes,
// values that hide brackets and quotes, numbers that are not whole,
// and repeated keys.
var scanSeeds = []string{
	`{"model":"m","stream":true,"id_slot":2}`,
	`{"messages":[{"content":"a\"}]"}],"model":"x"}`,
	`{"a":[[[]]],"b":{"c":{}},"stream":false}`,
	`{"id_slot":1.5}`, `{"id_slot":"2"}`, `{"id_slot":-0}`, `{"id_slot":1e2}`, `{"id_slot":99999999999999999999}`,
	`{"model":null}`, `{ }`, `{"":1}`, "{\"model\":\"\xff\"}",
	`{"model":"a","model":"b"}`, `{"stream":true,"stream":1}`, `{"model":"a","model":null}`, `{"id_slot":2,"id_slot":"x"}`,
	`{"model":"a\u00e9\/b\ud83d\ude00"}`, `{"mod\u0065l":"m","x\"y":1}`,
	`{"model":"gpt\/4"}`, `{"id_slot":null}`, `{"model":"\ud800"}`,
}

// FuzzScanBody checks scanBody against encoding/json on every valid JSON
// object without escapes in it, repeated keys included, and that it
// never panics on anything.
func FuzzScanBody(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := scanBody(b)
		members, valid := topMembers(b)
		if !valid || bytes.ContainsRune(b, '\\') {
			return
		}
		got = checkModelSpan(t, b, got)
		if want := wantFields(members); !ok || got != want {
			t.Fatalf("scanBody(%q) = %+v %v, want %+v true", b, got, ok, want)
		}
	})
}

// FuzzScanBodyJSON checks scanBody against encoding/json on every valid
// JSON object whose model, stream and id_slot keys are written plainly,
// as scanner.str documents: escapes in values, and repeated keys, of
// which the last wins.
func FuzzScanBodyJSON(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := scanBody(b)
		members, valid := topMembers(b)
		if !valid {
			return
		}
		for _, m := range members {
			if isField(m.key) && m.raw != `"`+m.key+`"` {
				return // an escaped key the scanner does not read
			}
		}
		got = checkModelSpan(t, b, got)
		if want := wantFields(members); !ok || got != want {
			t.Fatalf("scanBody(%q) = %+v %v, want %+v true", b, got, ok, want)
		}
	})
}

// A member is one key and value at the top of a JSON object.
type member struct {
	raw   string // the key as written, quotes and escapes included
	key   string // the key decoded
	value json.RawMessage
}

// topMembers returns the members of b in order, if b is one valid JSON
// object.
func topMembers(b []byte) ([]member, bool) {
	if !json.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var ms []member
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return nil, false
		}
		raw := strings.TrimLeft(string(b[before:dec.InputOffset()]), " \t\r\n,")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		ms = append(ms, member{raw, key, v})
	}
	return ms, true
}

// isField reports whether key is one that scanBody reads.
func isField(key string) bool { return key == "model" || key == "stream" || key == "id_slot" }

// wantFields is what encoding/json reads of the fields: the last value
// of each key wins; a model that is not a string is none; a slot that
// is not a whole number, 0 or more, is -1, as llama.cpp's "any slot"
// (null too, which json.Unmarshal would leave as 0).
func wantFields(ms []member) bodyFields {
	want := bodyFields{slot: -1}
	for _, m := range ms {
		switch m.key {
		case "model":
			want.model = ""
			json.Unmarshal(m.value, &want.model)
		case "stream":
			want.stream = string(m.value) == "true"
		case "id_slot":
			var n int
			want.slot = -1
			if string(m.value) != "null" && json.Unmarshal(m.value, &n) == nil && n >= 0 && !strings.ContainsAny(string(m.value), ".eE") {
				want.slot = n
			}
		}
	}
	return want
}

// BenchmarkScanBody measures scanBody on a chat body of 16 KiB, the size
// at which encoding/json was most of the gateway's cost, with a plain
// model, the common case, and with an escaped one.
func BenchmarkScanBody(b *testing.B) {
	content := strings.Repeat(`hello, \"world\" {[]} `, 16<<10/23)
	for _, bc := range []struct{ name, model string }{
		{"plain", `gpt-4o-mini`},
		{"escaped", `org\/gpt-4o-mini`},
	} {
		body := []byte(`{"model":"` + bc.model + `","messages":[{"role":"user","content":"` + content + `"}],"stream":true,"id_slot":1}`)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if f, ok := scanBody(body); !ok || f.slot != 1 {
					b.Fatalf("scanBody = %+v %v", f, ok)
				}
			}
		})
	}
}

// TestKeptText checks what the record keeps of a model, a path or a
// method: valid UTF-8 without control characters, cut at a character
// with a marker, so that a log line or the page shows it as it is.
func TestKeptText(t *testing.T) {
	for _, c := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"short", "gpt-4o", 256, "gpt-4o"},
		{"exactly max", "abcd", 4, "abcd"},
		{"cut", "abcdefgh", 6, "abc…"},
		{"cut before a character that would not fit", "ab" + "é" + "cdef", 6, "ab…"},
		{"invalid byte", "a\xffb", 256, "a\uFFFDb"},
		{"control characters", "a\nb\x1b[31mc\u0085", 256, "a\uFFFDb\uFFFD[31mc\uFFFD"},
		{"delete", "a\x7fb", 256, "a\uFFFDb"},
		{"bidirectional formatting", "run\u202e1txt.exe\u2066x\u2069", 256, "run\uFFFD1txt.exe\uFFFDx\uFFFD"},
		{"invalid and long", strings.Repeat("\xff", 300), 256, strings.Repeat("\uFFFD", (256-len("…"))/3) + "…"},
	} {
		got := keptText(c.in, c.max)
		if got != c.want {
			t.Errorf("%s: keptText(%.40q, %d) = %q, want %q", c.name, c.in, c.max, got, c.want)
		}
		if len(got) > c.max || !utf8.ValidString(got) || strings.ContainsFunc(got, unkept) {
			t.Errorf("%s: keptText(%.40q, %d) = %q: longer than %d, not UTF-8, or with a control character", c.name, c.in, c.max, got, c.max)
		}
	}
}

// FuzzKeptText checks keptText's promise for any text: at most max bytes
// of valid UTF-8 without control characters, the text itself when it is
// such already, and otherwise a prefix of the text's characters, with
// those replaced by U+FFFD, ended with the marker if it was cut.
func FuzzKeptText(f *testing.F) {
	f.Add("gpt-4o", 256)
	f.Add("a\x7fb\u0085c\xff", 8)
	f.Add("abécdef", 6)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < len("…") || max > 4096 {
			return // the record's bounds are 32 to 2048
		}
		got := keptText(s, max)
		if len(got) > max || !utf8.ValidString(got) || strings.ContainsFunc(got, unkept) {
			t.Fatalf("keptText(%q, %d) = %q: longer than %d, not UTF-8, or with a control character", s, max, got, max)
		}
		if len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, unkept) && got != s {
			t.Fatalf("keptText(%q, %d) = %q, want the text unchanged", s, max, got)
		}
		var want strings.Builder
		for _, c := range s {
			if unkept(c) {
				c = utf8.RuneError
			}
			want.WriteRune(c)
		}
		if cut, ok := strings.CutSuffix(got, "…"); ok && got != want.String() {
			got = cut
		}
		if !strings.HasPrefix(want.String(), got) {
			t.Fatalf("keptText(%q, %d) = %q, not a prefix of %q", s, max, got, want.String())
		}
	})
}

// checkModelSpan checks that the model's span in b is its string value,
// which decodes to the model read, and returns got without the span, to
// compare with fields that have none.
func checkModelSpan(t *testing.T, b []byte, got bodyFields) bodyFields {
	t.Helper()
	if got.modelEnd > 0 {
		var m string
		if err := json.Unmarshal(b[got.modelAt:got.modelEnd], &m); err != nil || m != got.model {
			t.Fatalf("scanBody(%q): the model's span %q decodes to %q (%v), want %q", b, b[got.modelAt:got.modelEnd], m, err, got.model)
		}
	}
	got.modelAt, got.modelEnd = 0, 0
	return got
}
