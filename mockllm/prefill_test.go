package mockllm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

// foxText is the canonical text in n chunks: the fox sentence's words,
// repeated.
func foxText(n int) string {
	words := strings.Fields("The quick brown fox jumps over the lazy dog.")
	out := make([]string, n)
	for i := range out {
		out[i] = words[i%len(words)]
	}
	return strings.Join(out, " ")
}

// prefillBody is a chat request on path whose last message is the
// assistant's, with text: a string for OpenAI, a text block for
// Anthropic.
func prefillBody(path, text string, stream bool) string {
	t, _ := json.Marshal(text)
	if path == messagesPath {
		return fmt.Sprintf(`{"model":"m","max_tokens":64,"stream":%v,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":%s}]}]}`, stream, t)
	}
	return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":%s}]}`, stream, t)
}

// answerOf reads a response's answer text, and its content chunks if it
// streams.
func answerOf(t *testing.T, path string, resp *http.Response, stream bool) (string, []string) {
	t.Helper()
	if stream {
		evs, err := readEvents(resp.Body)
		if err != nil || !ended(path, evs) {
			t.Fatalf("got %v, %v; want a whole stream", evs, err)
		}
		var chunks []string
		for _, e := range evs {
			if c, ok := contentOf(path, e); ok {
				chunks = append(chunks, c)
			}
		}
		return strings.Join(chunks, ""), chunks
	}
	var body struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if path == messagesPath {
		return body.Content[0].Text, nil
	}
	return body.Choices[0].Message.Content, nil
}

// A chat request whose last message is the assistant's is a prefill: the
// answer continues the canonical text after it, from inside a word if it
// ends there, so that prefill and answer make the whole text. A prefill
// that is not a prefix of it gets the whole text.
func TestPrefill(t *testing.T) {
	t.Parallel()
	const chunks = 60
	full := foxText(chunks)
	// 23 words in, then "ove" of the 24th: inside the third sentence.
	mid := foxText(23) + " ove"
	for _, tc := range []struct {
		name, prefill string
		answer        string // the whole answer wanted
		first         string // its first chunk, streaming
	}{
		// At a word's end: the answer starts with the next word.
		{"word", "The quick", full[len("The quick"):], " brown"},
		// Inside a word: the answer starts with the rest of it.
		{"inside a word", "The qu", full[len("The qu"):], "ick"},
		// Trailing whitespace is cut first, as Anthropic requires.
		{"trailing space", "The quick \n", full[len("The quick"):], " brown"},
		// Far in, inside a repeated word.
		{"third sentence", mid, full[len(mid):], "r"},
		// Not a prefix: the whole text, as with no prefill.
		{"other text", "Hello", full, "The"},
		// Empty: every answer continues it.
		{"empty", "", full, "The"},
		// All of it: nothing is left to say.
		{"all of it", full, "", ""},
	} {
		for _, path := range []string{chatPath, messagesPath} {
			for _, stream := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s%s stream=%v", tc.name, path, stream), func(t *testing.T) {
					t.Parallel()
					s := start(t, "ok", &mockllm.Server{Chunks: chunks})
					resp, err := post(client(t, 5*time.Second), s.URL+path, prefillBody(path, tc.prefill, stream))
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("got %d, want 200", resp.StatusCode)
					}
					got, gotChunks := answerOf(t, path, resp, stream)
					if got != tc.answer {
						t.Errorf("answer: got %q, want %q", got, tc.answer)
					}
					if stream && tc.first != "" && (len(gotChunks) == 0 || gotChunks[0] != tc.first) {
						t.Errorf("first chunk: got %q, want %q", gotChunks, tc.first)
					}
				})
			}
		}
	}
}

// refuse-prefill, on a step or as Server.RefusePrefill, answers 400 in
// the API's error shape to a request with a prefill, whatever the step,
// and leaves other requests to the step.
func TestRefusePrefill(t *testing.T) {
	t.Parallel()
	const message = "This model does not support assistant message prefill. The conversation must end with a user message."
	want := map[string]string{
		chatPath:     `{"error":{"code":null,"message":"` + message + `","param":null,"type":"invalid_request_error"}}`,
		messagesPath: `{"error":{"message":"` + message + `","type":"invalid_request_error"},"type":"error"}`,
	}
	for _, tc := range []struct {
		name, script string
		server       bool // Server.RefusePrefill
		other        int  // the status of a request with no prefill
	}{
		// On one step.
		{"step", "ok:refuse-prefill", false, 200},
		// On every step, from the server.
		{"server", "ok", true, 200},
		// On a failing step: the 400 comes first, as an API checks the
		// request before anything.
		{"status step", "503:refuse-prefill", false, 503},
	} {
		for _, path := range []string{chatPath, messagesPath} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				s := start(t, tc.script, &mockllm.Server{RefusePrefill: tc.server})
				c := client(t, 5*time.Second)
				resp, body := do(t, c, s.URL+path, prefillBody(path, "The", true))
				if resp.StatusCode != 400 || body != want[path] {
					t.Errorf("with a prefill: got %d %s, want 400 %s", resp.StatusCode, body, want[path])
				}
				if resp, _ := do(t, c, s.URL+path, bodies[path]); resp.StatusCode != tc.other {
					t.Errorf("without: got %d, want %d", resp.StatusCode, tc.other)
				}
				outcome := map[int]string{200: "ok", 503: "503"}[tc.other]
				if got := s.Stats().Paths[path]; got["400"] != 1 || got[outcome] != 1 {
					t.Errorf("stats: got %v, want 400 once and %s once", got, outcome)
				}
			})
		}
	}
}

// ignore-prefill answers a prefill from the start, with the whole text,
// as a server that does not continue one.
func TestIgnorePrefill(t *testing.T) {
	t.Parallel()
	for _, path := range []string{chatPath, messagesPath} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			s := start(t, "ok:ignore-prefill", &mockllm.Server{Chunks: 4})
			resp, err := post(client(t, 5*time.Second), s.URL+path, prefillBody(path, "The quick", true))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got, _ := answerOf(t, path, resp, true); got != fourWords {
				t.Errorf("answer: got %q, want the whole text %q", got, fourWords)
			}
		})
	}
}
