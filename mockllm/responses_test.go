package mockllm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sseread "github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/mockllm"
)

// The fields a Responses API client reads, streaming and not: a response
// object, and a stream whose events are named as their type, numbered
// from 0 in order, and carry the text in output_text deltas up to
// response.completed.
func TestResponsesShape(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{Chunks: 4})
	_, body := do(t, client(t, 0), s.URL+responsesPath, bodies[responsesPath])
	var o struct {
		ID, Object, Status string
		Output             []struct {
			Type, Role string
			Content    []struct{ Type, Text string }
		}
		Usage struct {
			Input  int `json:"input_tokens"`
			Output int `json:"output_tokens"`
		}
	}
	decode(t, body, &o)
	if o.ID != "resp_mock_1" || o.Object != "response" || o.Status != "completed" || len(o.Output) != 1 || o.Output[0].Role != "assistant" ||
		len(o.Output[0].Content) != 1 || o.Output[0].Content[0].Text != fourWords || o.Usage.Input != 2 || o.Usage.Output != 4 {
		t.Errorf("got %s, want a completed response with the text and its usage", body)
	}
	for _, background := range []bool{false, true} {
		req := strings.Replace(streamBody(responsesPath), "{", `{"background":`+map[bool]string{false: "false", true: "true"}[background]+`,`, 1)
		_, evs := stream(t, s, responsesPath, req)
		var names []string
		for i, e := range evs {
			var d struct {
				Type string `json:"type"`
				Seq  int    `json:"sequence_number"`
			}
			decode(t, e.data, &d)
			if d.Type != e.name || d.Seq != i {
				t.Errorf("event %d: %s %s, want named as its type and numbered %d", i, e.name, e.data, i)
			}
			names = append(names, e.name)
		}
		head := "response.created,response.in_progress,response.output_item.added,response.content_part.added"
		if background {
			head = "response.created,response.queued,response.in_progress,response.output_item.added,response.content_part.added"
		}
		if got := strings.Join(names, ","); !strings.HasPrefix(got, head+",response.output_text.delta") || !ended(responsesPath, evs) || textOf(responsesPath, evs) != fourWords {
			t.Errorf("background %v: got events %s, text %q; want %s, the deltas, and response.completed", background, got, textOf(responsesPath, evs), head)
		}
	}
}

// A Responses API request's prompt tokens are the words of its
// instructions and of its input, whether the input is a string or items.
func TestResponsesUsageCountsInstructions(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{Chunks: 4})
	for _, req := range []string{
		`{"model":"m","instructions":"be brief now","input":"hello there"}`,
		`{"model":"m","instructions":"be brief now","input":[{"role":"user","content":"hello there"}]}`,
		`{"model":"m","instructions":"be brief now","input":[{"role":"user","content":[{"type":"input_text","text":"hello there"}]}]}`,
	} {
		_, body := do(t, client(t, 0), s.URL+responsesPath, req)
		var o struct {
			Usage struct {
				Input int `json:"input_tokens"`
			}
		}
		decode(t, body, &o)
		if o.Usage.Input != 5 {
			t.Errorf("%s: got %d input tokens, want 5", req, o.Usage.Input)
		}
	}
}

// error-after=N sends a stream's events before the content and N content
// chunks, then the API's error event, and ends the stream; a body that is
// not a stream gets the error as the response it stands for.
func TestErrorAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path   string
		name   string // the error event's name
		data   string // part of its data
		status int    // the same error as a response
	}{
		{chatPath, "", `"type":"server_error"`, 500},
		{messagesPath, "error", `"type":"overloaded_error"`, 529},
		{responsesPath, "error", `"code":"server_error"`, 500},
		{completionPath, "", `"code":500`, 500},
	} {
		for _, n := range []int{0, 2} {
			t.Run(tc.path+"/"+strconv.Itoa(n), func(t *testing.T) {
				t.Parallel()
				s := start(t, "error-after="+strconv.Itoa(n), &mockllm.Server{Chunks: 5})
				_, evs := stream(t, s, tc.path, streamBody(tc.path))
				last := evs[len(evs)-1]
				if got := contentEvents(tc.path, evs[:len(evs)-1]); got != n || last.name != tc.name || !strings.Contains(last.data, tc.data) {
					t.Errorf("got %d content events, then %s %s; want %d, then an error event with %s", got, last.name, last.data, n, tc.data)
				}
				if ev := (sseread.Event{Name: []byte(last.name), Data: []byte(last.data), HasData: true}); sseread.KindOf(&ev) != sseread.Failure {
					t.Errorf("the error event %s %s is not one outlast knows", last.name, last.data)
				}
				if tc.path == completionPath {
					return
				}
				resp, b := do(t, client(t, 5*time.Second), s.URL+tc.path, bodies[tc.path])
				if resp.StatusCode != tc.status || !json.Valid([]byte(b)) {
					t.Errorf("not a stream: got %d %s, want %d and the API's error", resp.StatusCode, b, tc.status)
				}
			})
		}
	}
}

// postRaw posts body to url and reads the whole response body, with the
// error that ended it; getRaw gets url so.
func postRaw(t *testing.T, c *http.Client, url, body string) ([]byte, error) {
	t.Helper()
	resp, err := post(c, url, body)
	return rawBody(t, resp, err)
}

func getRaw(t *testing.T, c *http.Client, url string) ([]byte, error) {
	t.Helper()
	resp, err := c.Get(url)
	return rawBody(t, resp, err)
}

// rawBody reads a 200 response's whole body, and the error that ended it.
func rawBody(t *testing.T, resp *http.Response, err error) ([]byte, error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("got %d %s, want 200", resp.StatusCode, b)
	}
	return io.ReadAll(resp.Body)
}

// A background response is kept: a stream of it cut short can be had
// again from GET /v1/responses/{id}?stream=true, whole or after any
// sequence number, byte for byte as the first stream sent it, and with
// no second generation. A response not made in background is not kept.
func TestResponsesResume(t *testing.T) {
	t.Parallel()
	// In background: 5 events before the content, 51 content events and
	// 4 after them; the cut comes after the 20th, numbered 19.
	s := start(t, "reset-after=15,ok", &mockllm.Server{Chunks: 51})
	c := client(t, 5*time.Second)
	body := strings.Replace(streamBody(responsesPath), "{", `{"background":true,`, 1)
	cut, err := postRaw(t, c, s.URL+responsesPath, body)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the first stream ended with %v, want a reset after 15 content events", err)
	}
	all, err := getRaw(t, c, s.URL+"/v1/responses/resp_mock_1?stream=true")
	if err != nil || !bytes.HasPrefix(all, cut) {
		t.Fatalf("the stream again: %v; want the cut stream's bytes and the rest", err)
	}
	blocks, rest := sseread.Split(all)
	if len(blocks) != 60 || len(rest) != 0 || string(blocks[59].Name) != "response.completed" {
		t.Fatalf("the stream again has %d events, the last %s; want 60, the last response.completed", len(blocks), blocks[len(blocks)-1].Name)
	}
	after, err := getRaw(t, c, s.URL+"/v1/responses/resp_mock_1?stream=true&starting_after=19")
	if want := all[len(all)-len(bytes.Join(rawOf(blocks[20:]), nil)):]; err != nil || !bytes.Equal(after, want) {
		t.Errorf("after sequence number 19: got %d bytes, %v; want the 40 events after it, %d bytes", len(after), err, len(want))
	}
	st := s.Stats()
	if st.Total != 1 || st.Paths[responsesPath]["reset-after"] != 1 || st.Paths["/v1/responses/{id}"]["stream"] != 2 {
		t.Errorf("stats %+v: want one generation and two streams again", st)
	}
	// Not in background: not kept.
	do(t, c, s.URL+responsesPath, streamBody(responsesPath))
	resp, err := c.Get(s.URL + "/v1/responses/resp_mock_2?stream=true")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a response not made in background, streamed again: got %d, want 404", resp.StatusCode)
	}
}

func rawOf(blocks []sseread.Block) [][]byte {
	raws := make([][]byte, len(blocks))
	for i, b := range blocks {
		raws[i] = b.Raw
	}
	return raws
}

// Past the window a background response is gone: 404 in OpenAI's error
// shape. Within it, POST /v1/responses/{id}/cancel cancels it.
func TestResponsesWindowAndCancel(t *testing.T) {
	t.Parallel()
	s := start(t, "", &mockllm.Server{ResumeWindow: time.Hour})
	c := client(t, 5*time.Second)
	body := strings.Replace(streamBody(responsesPath), "{", `{"background":true,`, 1)
	postRaw(t, c, s.URL+responsesPath, body)
	resp, b := do(t, c, s.URL+"/v1/responses/resp_mock_1/cancel", "")
	var o struct{ Status string }
	decode(t, b, &o)
	if resp.StatusCode != 200 || o.Status != "cancelled" || s.Stats().Paths["/v1/responses/{id}/cancel"]["cancelled"] != 1 {
		t.Errorf("cancel: got %d %s, want 200 and the response cancelled, counted", resp.StatusCode, b)
	}

	gone := start(t, "", &mockllm.Server{ResumeWindow: time.Nanosecond})
	postRaw(t, c, gone.URL+responsesPath, body)
	resp, err := c.Get(gone.URL + "/v1/responses/resp_mock_1?stream=true&starting_after=3")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message, Type string }
	}
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(e.Error.Message, "not found") {
		t.Errorf("past the window: got %d %+v, want 404 with OpenAI's error", resp.StatusCode, e)
	}
}

// A path the server does not serve gets a JSON 404 that names it, as
// OpenAI's does, not net/http's text.
func TestNotFound(t *testing.T) {
	t.Parallel()
	s := start(t, "", nil)
	resp, b := do(t, client(t, 5*time.Second), s.URL+"/v1/embeddings", `{}`)
	var e struct {
		Error struct{ Message, Type string }
	}
	decode(t, b, &e)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(e.Error.Message, "/v1/embeddings") {
		t.Errorf("got %d %s, want a JSON 404 naming the path", resp.StatusCode, b)
	}
	if st := s.Stats(); st.Total != 0 {
		t.Errorf("stats %+v: a 404 is no model request", st)
	}
}
