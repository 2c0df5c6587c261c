package mockllm_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outlast-llm/outlast/mockllm"
)

// Scripts that parse, and their canonical form.
var validScripts = []struct {
	name, src, want string
	steps           int
}{
	// Nothing at all is a script with no steps: every request succeeds.
	{"empty", "", "", 0},
	{"blank and comments", "  # nothing\n\n", "", 0},
	// The simplest scripts of the package documentation.
	{"status", "503", "503", 1},
	{"count", "502x3, ok", "502x3,ok", 2},
	{"count after a name", "okx2", "okx2", 1},
	{"count with a space", "ok x3", "okx3", 1},
	// A count after a number parameter needs no space, since a number
	// ends at a non-digit; the canonical form puts one in anyway.
	{"count after a parameter", "429:retry-after=1x2,ok", "429:retry-after=1 x2,ok", 2},
	{"window", "502 for 30s,ok", "502 for 30s,ok", 2},
	{"window after a parameter", "429:retry-after-ms=1500 for 10s", "429:retry-after-ms=1500 for 10s", 1},
	// JSON as a value may hold colons and commas; the canonical form puts
	// headers before the body.
	{"JSON body and header", `500:body={"error":"x","n":[1,2]}:header=X-Foo=bar`, `500:header=X-Foo=bar:body={"error":"x","n":[1,2]}`, 1},
	{"quoted body", `500:body="a, b: c" x2`, `500:body="a, b: c" x2`, 1},
	{"empty body", `200:body=`, `200:body=""`, 1},
	{"header twice", `ok:header=A=1:header=A=2`, `ok:header=A=1:header=A=2`, 1},
	{"header with a colon", `503:header="Link=<http://x>"`, `503:header="Link=<http://x>"`, 1},
	{"every retry-after", "429:retry-after-ms=5:retry-after-date=2", "429:retry-after-date=2:retry-after-ms=5", 1},
	// A fault's argument may follow "=" or ":".
	{"refuse colon", "refuse:5s", "refuse:5s", 1},
	{"refuse equals", "refuse=1m", "refuse:1m0s", 1},
	{"stall-after colon", "stall-after:3", "stall-after=3", 1},
	{"reset-after", "reset-after=0", "reset-after=0", 1},
	{"slow-headers", "slow-headers=1.5s", "slow-headers=1.5s", 1},
	{"delay", "502:delay=200ms x2", "502:delay=200ms x2", 1},
	// A duration is read as outlast serve reads one: a bare number is
	// seconds, as in Retry-After, and whole days may come first. The
	// canonical form is Go's.
	{"window in bare seconds", "503 for 20,ok", "503 for 20s,ok", 2},
	{"refuse in bare seconds", "refuse:5,ok", "refuse:5s,ok", 2},
	{"fractional seconds", "502:delay=1.5 x2", "502:delay=1.5s x2", 1},
	{"waits in bare seconds", "stall-after=2:resume=30:first-token-delay=0.25", "stall-after=2:first-token-delay=250ms:resume=30s", 1},
	// A count may follow a bare number unspaced, as it follows a unit.
	{"slow-headers in bare seconds", "slow-headers=2x3", "slow-headers=2sx3", 1},
	{"window in days", "502 for 1d12h", "502 for 36h0m0s", 1},
	{"every name", "ok,overloaded,overloaded-stream,loading,reset,close-after-headers,stall", "ok,overloaded,overloaded-stream,loading,reset,close-after-headers,stall", 7},
	// The faults that break a stream and go on, or end it without its
	// last event.
	{"malformed-after", "malformed-after:30", "malformed-after=30", 1},
	{"error-after", "error-after:6,ok", "error-after=6,ok", 2},
	{"error-after with a first-token delay", "error-after=0:first-token-delay=1s", "error-after=0:first-token-delay=1s", 1},
	{"no-done", "no-done x2,ok", "no-donex2,ok", 2},
	// Headers at once, the first token late, on ok and on the faults
	// that cut a stream.
	{"first-token-delay", "ok:first-token-delay=20s", "ok:first-token-delay=20s", 1},
	{"first-token-delay on a cut", "reset-after=40:first-token-delay=1.5s x2", "reset-after=40:first-token-delay=1.5s x2", 1},
	// A pause that ends; the canonical order puts the waits together.
	{"resume", "stall-after=20:resume=30s", "stall-after=20:resume=30s", 1},
	{"resume and delay", "stall-after=2:resume=1s:delay=5ms", "stall-after=2:delay=5ms:resume=1s", 1},
	// A flag parameter has no value, on any step that answers.
	{"refuse-prefill", "ok:refuse-prefill", "ok:refuse-prefill", 1},
	{"ignore-prefill", "reset-after=3,ok:ignore-prefill", "reset-after=3,ok:ignore-prefill", 2},
	{"refuse-prefill on a status", "503:refuse-prefill:retry-after=1 x2", "503:retry-after=1:refuse-prefill x2", 1},
	// A script file: one step a line, comments, a trailing comma.
	{"file", "# the outage\n502x3   # down\n429:retry-after=1,\n\nok\n", "502x3,429:retry-after=1,ok", 3},
	{"CRLF file", "502\r\nok\r\n", "502,ok", 2},
}

func TestParseScript(t *testing.T) {
	t.Parallel()
	for _, tc := range validScripts {
		t.Run(tc.name, func(t *testing.T) {
			s, err := mockllm.ParseScript(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.String(); got != tc.want {
				t.Errorf("String: got %q, want %q", got, tc.want)
			}
			if s.Len() != tc.steps {
				t.Errorf("Len: got %d, want %d", s.Len(), tc.steps)
			}
			again, err := mockllm.ParseScript(s.String())
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Errorf("String %q parses to %v, %v; want the same script", s.String(), again, err)
			}
		})
	}
}

func TestParseScriptErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src  string
		step, line int
		col        int
		want       string // in the message
	}{
		// Each error names the step, where it starts and what is wrong.
		{"unknown fault", "ok,foo", 2, 1, 4, `unknown fault "foo"`},
		{"status out of range", "50", 1, 1, 1, "status 50: want 200 to 599"},
		{"status too high", "600", 1, 1, 1, "status 600"},
		{"zero count", "502x0", 1, 1, 1, "at least 1"},
		{"unknown parameter", "500:bdy=x", 1, 1, 1, `unknown parameter "bdy"`},
		// A misspelt parameter is named whole, with the known ones, however
		// it is misspelt: with an underscore, in capitals, or with no value.
		{"unknown parameter with an underscore", "ok:first_token_delay=20s", 1, 1, 1, `unknown parameter "first_token_delay"; the parameters are ` + knownParams},
		{"unknown parameter in capitals", "429:Retry-After=1", 1, 1, 1, `unknown parameter "Retry-After"; the parameters are ` + knownParams},
		{"unknown parameter without a value", "ok:refuse-prefil", 1, 1, 1, `unknown parameter "refuse-prefil"; the parameters are ` + knownParams},
		{"long unknown parameter", "ok:" + strings.Repeat("a", 30) + "=1", 1, 1, 1, `unknown parameter "` + strings.Repeat("a", 24) + `…"`},
		{"missing parameter", "ok:", 1, 1, 1, `want a parameter after ":"`},
		{"parameter without its value", "ok:delay", 1, 1, 1, "delay needs a value, as in delay=200ms"},
		{"flag with a value", "ok:refuse-prefill=true", 1, 1, 1, "refuse-prefill takes no value"},
		{"first-token-delay on a stall", "stall:first-token-delay=1s", 1, 1, 1, "stall takes no first-token-delay"},
		{"first-token-delay on a status", "503:first-token-delay=1s", 1, 1, 1, "503 takes no first-token-delay"},
		{"resume on ok", "ok:resume=1s", 1, 1, 1, "ok takes no resume"},
		{"zero resume", "stall-after=2:resume=0s", 1, 1, 1, "resume: the pause must be more than 0"},
		{"malformed-after without N", "malformed-after", 1, 1, 1, "malformed-after needs an argument, as in malformed-after=3"},
		{"refuse-prefill on refuse", "refuse:5s:refuse-prefill", 1, 1, 1, "refuse takes no parameters"},
		{"parameter twice", "429:retry-after=1:retry-after=2", 1, 1, 1, "given twice"},
		{"missing argument", "refuse", 1, 1, 1, "refuse needs an argument"},
		{"zero refuse", "refuse:0s", 1, 1, 1, "more than 0"},
		{"argument where none is taken", "ok=3", 1, 1, 1, "ok takes no argument"},
		{"value without a key", "stall:3", 1, 1, 1, "stall takes no argument"},
		{"argument twice", "stall-after=2:3", 1, 1, 1, "stall-after's argument is given twice"},
		{"empty step", "ok,,ok", 2, 1, 4, "empty step"},
		// A duration that parse.Duration refuses is named, with the forms
		// it takes.
		{"bad duration", "502 for 1.2.3", 1, 1, 1, `for: "1.2.3" is not a duration such as 15s, 2m, 7d or 90 (seconds)`},
		{"bad days", "ok:delay=2dh", 1, 1, 1, `delay: "2dh" is not a duration such as 15s, 2m, 7d or 90 (seconds)`},
		{"too many seconds", "refuse:99999999999", 1, 1, 1, `refuse: "99999999999" is too long`},
		// The value is named as typed, not as far as it could be read.
		{"no duration", "502 for soon", 1, 1, 1, `for: "soon" is not a duration such as 15s, 2m, 7d or 90 (seconds)`},
		{"long bad duration", "502 for s" + strings.Repeat("o", 30), 1, 1, 1, `for: "s" is not a duration`},
		{"zero window in bare seconds", "502 for 0", 1, 1, 1, "for: the window must be more than 0"},
		{"negative window", "502 for -1s", 1, 1, 1, "for: want a duration"},
		{"body on ok", "ok:body=x", 1, 1, 1, "ok takes no body"},
		{"count on refuse", "refuse:5s x2", 1, 1, 1, "no count or window"},
		{"header on reset", "reset:header=A=b", 1, 1, 1, "reset sends no headers"},
		{"unbalanced JSON", `500:body={"a":1`, 1, 1, 1, "unbalanced {"},
		{"unterminated string", `500:body="abc`, 1, 1, 1, "unterminated string"},
		{"header without a value", "ok:header=X-Foo", 1, 1, 1, "want NAME=VALUE"},
		{"bad header name", `ok:header="X Foo=1"`, 1, 1, 1, "not a valid header name"},
		{"newline in a header", `ok:header="X=a\nb"`, 1, 1, 1, "control character"},
		{"two Retry-Afters", "429:retry-after=1:retry-after-date=2", 1, 1, 1, "give one"},
		{"junk after a step", "502 oops", 1, 1, 1, `unexpected "oops"`},
		{"junk after JSON", `500:body={}x`, 1, 1, 1, `unexpected "x"`},
		{"huge number", "502x99999999999999999999", 1, 1, 1, "too large"},
		// The position is the step's line and column in a file.
		{"third line", "ok\n502\n  bogus", 3, 3, 3, `unknown fault "bogus"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mockllm.ParseScript(tc.src)
			var se *mockllm.ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a *ScriptError", err)
			}
			if se.Step != tc.step || se.Line != tc.line || se.Column != tc.col {
				t.Errorf("got step %d at %d:%d, want step %d at %d:%d", se.Step, se.Line, se.Column, tc.step, tc.line, tc.col)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "mockllm: script step ") {
				t.Errorf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// knownParams is the list of parameters an unknown one's error gives.
const knownParams = "retry-after, retry-after-date, retry-after-ms, header, body, delay, first-token-delay, resume, refuse-prefill"

// FuzzParseScript checks that the parser never panics; that what it
// parses prints as one line that parses back to the same script; and
// that an error is one line naming a step that is in the source, where
// it starts.
func FuzzParseScript(f *testing.F) {
	for _, tc := range validScripts {
		f.Add(tc.src)
	}
	for _, s := range []string{
		`500:body=[{"a":"]"},"\"x"]:header=X=1 for 1h`,
		`200:body="\xff\x00" x1`,
		"refuse:1.5µs,stall-after=2x3,slow-headers=0s for 1ns",
		"500:body=a#b,ok",
		`503:header="A=#,:"`,
		"stall-after=1:resume=1ns:first-token-delay=0s,malformed-after=0,no-done:refuse-prefill",
		"ok:refuse-prefill x2,reset-after=3:first-token-delay=2m for 1s",
		// Bare seconds and days, as serve reads durations.
		"503 for 20,refuse:5,ok:delay=1.5:first-token-delay=0.000000001 for 7d",
		"slow-headers=2x3,stall-after=1:resume=.5 x2,502 for 1d12h30m",
		"refuse:106751d,503 for 9223372036,ok:delay=0 for 1.",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := mockllm.ParseScript(src)
		if err != nil {
			checkScriptError(t, src, err)
			return
		}
		out := s.String()
		if strings.ContainsAny(out, "\r\n") {
			t.Fatalf("%q: String %q, want one line", src, out)
		}
		again, err := mockllm.ParseScript(out)
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", src, out, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("%q: String %q parses to %q, a different script", src, out, again.String())
		}
	})
}

// checkScriptError checks that err, from parsing src, is a *ScriptError
// whose position is in src, whose text is the source's at that position,
// and whose message is one line.
func checkScriptError(t *testing.T, src string, err error) {
	t.Helper()
	var se *mockllm.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("ParseScript(%q): got %T, want a *ScriptError", src, err)
	}
	lines := strings.Split(src, "\n")
	if se.Step < 1 || se.Line < 1 || se.Line > len(lines) || se.Column < 1 || se.Column > utf8.RuneCountInString(lines[se.Line-1])+1 {
		t.Fatalf("ParseScript(%q): got step %d at line %d, column %d, want a position in the source", src, se.Step, se.Line, se.Column)
	}
	text, cut := strings.CutSuffix(se.Text, "…")
	at := lines[se.Line-1]
	for range se.Column - 1 { // columns count characters, an invalid byte as one
		_, n := utf8.DecodeRuneInString(at)
		at = at[n:]
	}
	if len(text) > 40 || cut && len(text) != 40 || !strings.HasPrefix(strings.TrimSpace(at), text) {
		t.Fatalf("ParseScript(%q): got text %q at line %d, column %d, want the step's first 40 bytes there, %q", src, se.Text, se.Line, se.Column, at)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || !strings.HasPrefix(msg, fmt.Sprintf("mockllm: script step %d ", se.Step)) {
		t.Fatalf("ParseScript(%q): got %q, want one line that names step %d", src, msg, se.Step)
	}
}
