package mockllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outlast-llm/outlast/mockllm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The three model endpoints, and a body for each that each API accepts.
const (
	chatPath       = "/v1/chat/completions"
	messagesPath   = "/v1/messages"
	completionPath = "/completion"
	responsesPath  = "/v1/responses"
)

var bodies = map[string]string{
	chatPath:       `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`,
	messagesPath:   `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"hello there"}]}]}`,
	completionPath: `{"prompt":"hello there"}`,
	responsesPath:  `{"model":"m","input":"hello there"}`,
}

// streamBody is the path's body, asking for a stream.
func streamBody(path string) string {
	return strings.Replace(bodies[path], "{", `{"stream":true,`, 1)
}

// start starts s, which has the script src unless s.Script is set, and
// closes it when the test ends.
func start(t *testing.T, src string, s *mockllm.Server) *mockllm.Server {
	t.Helper()
	if s == nil {
		s = &mockllm.Server{}
	}
	s.Script = mockllm.MustParseScript(src)
	s.Logf = t.Logf
	if err := s.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// client returns a client of its own, so that no test reuses another's
// connections, with the given timeout (0 for none).
func client(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// post sends body to url with c.
func post(c *http.Client, url, body string) (*http.Response, error) {
	return c.Post(url, "application/json", strings.NewReader(body))
}

// do posts and reads the whole response, failing the test on an error.
func do(t *testing.T, c *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := post(c, url, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// sse is one server-sent event as a test reads it.
type sse struct {
	name string
	data string
}

// readEvents reads events from r until it ends, and returns them with the
// error that ended them (nil at a clean end).
func readEvents(r io.Reader) ([]sse, error) {
	br := bufio.NewReader(r)
	var evs []sse
	var cur sse
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				err = nil
			}
			return evs, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			evs = append(evs, cur)
			cur = sse{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// contentOf returns the text an event carries, and whether it is a
// content event, in each API's stream.
func contentOf(path string, e sse) (string, bool) {
	switch path {
	case chatPath:
		var c struct {
			Choices []struct {
				Delta struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(e.data), &c) != nil || len(c.Choices) == 0 {
			return "", false
		}
		d := c.Choices[0].Delta
		if d.Role != "" || d.Content == nil {
			return "", false
		}
		return *d.Content, true
	case messagesPath:
		var d struct {
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		if e.name != "content_block_delta" || json.Unmarshal([]byte(e.data), &d) != nil {
			return "", false
		}
		return d.Delta.Text, true
	case responsesPath:
		var d struct {
			Delta string `json:"delta"`
		}
		if e.name != "response.output_text.delta" || json.Unmarshal([]byte(e.data), &d) != nil {
			return "", false
		}
		return d.Delta, true
	default:
		var r struct {
			Content string `json:"content"`
			Stop    bool   `json:"stop"`
		}
		if json.Unmarshal([]byte(e.data), &r) != nil || r.Stop {
			return "", false
		}
		return r.Content, true
	}
}

// contentEvents counts the content events among evs.
func contentEvents(path string, evs []sse) int {
	n := 0
	for _, e := range evs {
		if _, ok := contentOf(path, e); ok {
			n++
		}
	}
	return n
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// stats fetches GET /mock/stats.
func stats(t *testing.T, c *http.Client, s *mockllm.Server) mockllm.Stats {
	t.Helper()
	resp, err := c.Get(s.URL + "/mock/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st mockllm.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// ended reports whether evs end with the event that ends a whole stream
// of the path's API: [DONE], message_stop, or llama.cpp's result with
// "stop": true.
func ended(path string, evs []sse) bool {
	if len(evs) == 0 {
		return false
	}
	last := evs[len(evs)-1]
	switch path {
	case chatPath:
		return last.data == "[DONE]"
	case messagesPath:
		return last.name == "message_stop"
	case responsesPath:
		return last.name == "response.completed"
	}
	var r struct {
		Stop bool `json:"stop"`
	}
	return json.Unmarshal([]byte(last.data), &r) == nil && r.Stop
}

// textOf joins the text of the content events among evs.
func textOf(path string, evs []sse) string {
	var b strings.Builder
	for _, e := range evs {
		if s, ok := contentOf(path, e); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}

// malformed returns the events among evs whose data is not JSON, and
// the number of content events before the first of them.
func malformed(path string, evs []sse) (bad []sse, before int) {
	before = -1
	for i, e := range evs {
		if e.data != "[DONE]" && !json.Valid([]byte(e.data)) {
			if before < 0 {
				before = contentEvents(path, evs[:i])
			}
			bad = append(bad, e)
		}
	}
	return bad, before
}

// wholeBody returns a whole non-streaming chat completion of the given
// chunks, from a server of its own, and the size of each of its Chunks
// parts, as the faults that cut a body count them.
func wholeBody(t *testing.T, chunks int) (string, int) {
	t.Helper()
	s := start(t, "ok", &mockllm.Server{Chunks: chunks})
	_, b := do(t, client(t, 0), s.URL+chatPath, bodies[chatPath])
	return b, (len(b) + chunks - 1) / chunks
}
