package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	ssescan "github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
)

// Tests of the streams as the APIs send them: the commit at the
// first content event, an error event mid-stream, continuation that
// cannot duplicate, and the Responses API's resumption.

// relaying is a gateway in front of target with continuation c, an idle
// timeout of idle and serve's kind of policy, quick; it returns its URL,
// the bodies it sent upstream, and the records of its requests.
func relaying(t *testing.T, c gateway.Continuation, idle time.Duration, target string) (string, *bodyLog, chan record.Request) {
	t.Helper()
	log := &bodyLog{base: http.DefaultTransport}
	records := make(chan record.Request, 16)
	u, _ := url.Parse(target)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name: "primary", URL: u, IdleTimeout: idle, FirstByteTimeout: 10 * time.Second, Continuation: c,
			Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}, MaxAttempts: 3},
		}},
		Transport: log,
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  record.Observer{Done: func(r *record.Request) { records <- *r }},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL, log, records
}

// postRaw posts a streaming request and returns the stream's bytes.
func postRaw(t *testing.T, target, body string) []byte {
	t.Helper()
	resp, err := http.Post(target, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("got %d, %v: %s; want a 200 stream", resp.StatusCode, err, b)
	}
	return b
}

// eventsOf splits a stream into its events, as the one SSE scanner reads
// it, and counts them by name, or by data for those without one.
func eventsOf(stream []byte) ([]ssescan.Block, map[string]int) {
	blocks, _ := ssescan.Split(stream)
	count := map[string]int{}
	var events []ssescan.Block
	for _, b := range blocks {
		if !b.HasData {
			continue
		}
		events = append(events, b)
		key := string(b.Name)
		switch {
		case ssescan.IsFailure(&b.Event):
			key = "failure"
		case key == "" && string(b.Data) == "[DONE]":
			key = "[DONE]"
		case key == "" && strings.Contains(string(b.Data), `"role":"assistant"`):
			key = "role"
		}
		count[key]++
	}
	return events, count
}

// textOf joins the text the events carry, in any of the three APIs.
func textOf(events []ssescan.Block) string {
	var b strings.Builder
	for _, e := range events {
		var d struct {
			Delta   json.RawMessage `json:"delta"`
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(e.Data, &d) != nil {
			continue
		}
		var s string
		var an struct{ Text string }
		switch {
		case json.Unmarshal(d.Delta, &s) == nil: // the Responses API's
			b.WriteString(s)
		case json.Unmarshal(d.Delta, &an) == nil: // Anthropic's
			b.WriteString(an.Text)
		case len(d.Choices) > 0:
			b.WriteString(d.Choices[0].Delta.Content)
		}
	}
	return b.String()
}

// streamBodies are a streaming request for each API.
var streamBodies = map[string]string{
	"/v1/chat/completions": openAIStream,
	"/v1/messages":         `{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"say it"}]}`,
	"/v1/responses":        `{"model":"gpt-5","stream":true,"input":"say it"}`,
	"/completion":          `{"prompt":"say it","stream":true}`,
}

// An error event after a stream's preamble, before any of the answer, is
// a failed attempt like a 5xx: retried, and the caller reads one whole
// stream from the attempt that won, its preamble once, and no error.
// Anthropic's overloaded_error after message_start, the Responses API's
// error after response.created, and an OpenAI chat stream's error chunk
// after its role chunk.
func TestErrorBeforeContent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		path  string
		start string // the event that must come once
		end   string // the stream's last event
	}{
		{"/v1/messages", "message_start", "message_stop"},
		{"/v1/responses", "response.created", "response.completed"},
		{"/v1/chat/completions", "role", "[DONE]"},
	} {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			m := mock(t, "error-after=0,ok")
			base, _, records := relaying(t, gateway.ContinueOff, 2*time.Second, m.URL)
			events, count := eventsOf(postRaw(t, base+c.path, streamBodies[c.path]))
			if count[c.start] != 1 || count[c.end] != 1 || count["failure"] != 0 || textOf(events) != whole {
				t.Errorf("got events %v, text %q; want one %s, one %s, no error, and the whole text", count, textOf(events), c.start, c.end)
			}
			r := <-records
			if len(r.Attempts) != 2 || r.Attempts[0].Class != outlast.ClassErrorEvent || r.Attempts[1].Class != outlast.ClassNone || r.Error != "" || r.Status != 200 {
				t.Errorf("recorded %d attempts %+v, error %q, status %d; want 2, the first an error event, and the answer", len(r.Attempts), r.Attempts, r.Error, r.Status)
			}
		})
	}
}

// apiMode is a case of a stream test: an API's path, and the
// continuation of the upstream it streams from.
type apiMode struct {
	path string
	mode gateway.Continuation
}

func (c apiMode) String() string { return c.path + " " + c.mode.String() }

// An upstream's error event after the answer began ends the stream: the
// caller gets it, once and whole, and the record says the stream ended in
// the upstream's error, never a 200 with no error.
//
// With continuation on, the same holds for a stream the splice cannot
// continue, llama.cpp's own, whose error event is its end.
func TestErrorEventRecorded(t *testing.T) {
	t.Parallel()
	for _, c := range []apiMode{
		{"/v1/chat/completions", gateway.ContinueOff},
		{"/v1/messages", gateway.ContinueOff},
		{"/v1/responses", gateway.ContinueOff},
		{"/completion", gateway.ContinueOff},
		{"/completion", gateway.ContinuePrefill},
	} {
		path := c.path
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			m := mock(t, "error-after=6")
			base, _, records := relaying(t, c.mode, 2*time.Second, m.URL)
			events, count := eventsOf(postRaw(t, base+path, streamBodies[path]))
			if count["failure"] != 1 || !ssescan.IsFailure(&events[len(events)-1].Event) {
				t.Errorf("got events %v, want the upstream's error event last, once", count)
			}
			if r := <-records; r.Error != record.ErrorUpstreamError || len(r.Attempts) != 1 {
				t.Errorf("recorded error %q after %d attempts, want %q after 1", r.Error, len(r.Attempts), record.ErrorUpstreamError)
			}
		})
	}
}

// With continuation: prefill, a stream that sends 6 chunks, then an error
// event, then closes, is continued into one stream with one end: one
// [DONE] (one message_stop), the whole text once, and no error event.
func TestContinuationAfterErrorEvent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, end string }{
		{"/v1/chat/completions", "[DONE]"},
		{"/v1/messages", "message_stop"},
	} {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			m := mock(t, "error-after=6,ok")
			base, _, records := relaying(t, gateway.ContinuePrefill, 2*time.Second, m.URL)
			events, count := eventsOf(postRaw(t, base+c.path, streamBodies[c.path]))
			if count[c.end] != 1 || count["failure"] != 0 || textOf(events) != whole {
				t.Errorf("got events %v, text %q; want one %s, no error, the whole text once", count, textOf(events), c.end)
			}
			r := <-records
			if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK || r.Error != "" || m.Stats().Total != 2 {
				t.Errorf("recorded %+v, error %q; the mock saw %d; want one continuation, continued, no error, 2 requests", r.Continuations, r.Error, m.Stats().Total)
			}
		})
	}
}

// A server that answers the prefill from the start rather than continuing
// it: the caller gets none of the repeat, no end, and an error event; the
// record says the continuation started over.
func TestContinuationRestarted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, end string }{
		{"/v1/chat/completions", "[DONE]"},
		{"/v1/messages", "message_stop"},
	} {
		for _, script := range []string{"error-after=6,ok:ignore-prefill", "reset-after=6,ok:ignore-prefill"} {
			t.Run(c.path+" "+script, func(t *testing.T) {
				t.Parallel()
				m := mock(t, script)
				base, _, records := relaying(t, gateway.ContinuePrefill, 2*time.Second, m.URL)
				events, count := eventsOf(postRaw(t, base+c.path, streamBodies[c.path]))
				text := textOf(events)
				if count[c.end] != 0 || !strings.HasPrefix(whole, text) || len(text) == 0 || strings.Count(text, "The quick") != 1 {
					t.Errorf("got events %v, text %q; want no %s and the answer's start once", count, text, c.end)
				}
				if last := events[len(events)-1]; string(last.Name) != "error" || !strings.Contains(string(last.Data), "started the answer over") {
					t.Errorf("ended with %s %s, want the gateway's error event saying the continuation started over", last.Name, last.Data)
				}
				r := <-records
				if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationRestarted || r.Error == "" {
					t.Errorf("recorded %+v, error %q; want one continuation, restarted, and an error", r.Continuations, r.Error)
				}
			})
		}
	}
}

// A model that refused a prefill is sent no other for a while: the next
// stream of it that breaks is replayed at once, with no refused request
// first.
func TestPrefillRefusalRemembered(t *testing.T) {
	t.Parallel()
	// The first request breaks, its prefill is refused (the second step)
	// and its replay answers; the second breaks and is replayed.
	m := &mockllm.Server{Script: mockllm.MustParseScript("reset-after=6,ok,ok,reset-after=6,ok"), Chunks: chunks, RefusePrefill: true}
	if err := m.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	base, log, records := relaying(t, gateway.ContinuePrefill, 2*time.Second, m.URL)
	postRaw(t, base+"/v1/messages", streamBodies["/v1/messages"])
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationReplayed || r.Continuations[0].Reason != "its prefill was refused with 400" {
		t.Fatalf("first: recorded %+v, want a replay after the prefill was refused", r.Continuations)
	}
	events, _ := eventsOf(postRaw(t, base+"/v1/messages", streamBodies["/v1/messages"]))
	r := <-records
	if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationReplayed || textOf(events) != whole {
		t.Errorf("second: recorded %+v, text %q; want one continuation, a replay, and the whole text", r.Continuations, textOf(events))
	}
	if bodies := log.bodies(); len(bodies) != 5 || strings.Contains(bodies[4], `"assistant"`) {
		t.Errorf("sent %d requests, the last %s; want 5, the last with no prefill", len(bodies), bodies[len(bodies)-1])
	}
}

// A replay whose text differs from the answer so far, as a model that
// samples gives, is ended before any of it reaches the caller, who gets
// the error event of the break; the model is not replayed again for a
// while, and the next break ends at once.
func TestReplayDiverged(t *testing.T) {
	t.Parallel()
	chunk := func(id, text string) string {
		b, _ := json.Marshal(text)
		return `data: {"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + string(b) + `}}]}` + "\n\n"
	}
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"assistant"`) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"This model does not support assistant message prefill.","type":"invalid_request_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1)%2 == 1 { // the caller's requests: break after some text
			io.WriteString(w, chunk("c1", "Hello")+chunk("c1", " there"))
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		io.WriteString(w, chunk("c2", "Greetings")+chunk("c2", ", friend")+"data: [DONE]\n\n") // the replay: another text
	}))
	t.Cleanup(up.Close)
	base, _, records := relaying(t, gateway.ContinuePrefill, 2*time.Second, up.URL)
	events, _ := eventsOf(postRaw(t, base+"/v1/chat/completions", openAIStream))
	if last := events[len(events)-1]; string(last.Name) != "error" || textOf(events) != "Hello there" || !strings.Contains(string(last.Data), "differs") {
		t.Errorf("got text %q, ending %s %s; want the answer so far alone, and the error event", textOf(events), last.Name, last.Data)
	}
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationDiverged || r.Continuations[0].Reason != "its prefill was refused with 400; its replay's text differs from the answer so far" {
		t.Errorf("recorded %+v, want the replay diverged, after the prefill was refused", r.Continuations)
	}
	postRaw(t, base+"/v1/chat/completions", openAIStream)
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationUnsupported || !strings.Contains(r.Continuations[0].Reason, "answers a replay with other text") {
		t.Errorf("the next break: recorded %+v, want no continuation, saying why", r.Continuations)
	}
}

// With continuation: resume, a Responses API stream cut after 20 of its
// 60 events, or silent after them, reaches the caller byte for byte as
// the uncut stream, with one generation at the mock: the gateway made the
// response in background and streamed the rest after the last event it
// had forwarded.
func TestResume(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"reset-after=15,ok", "stall-after=15,ok"} {
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			// 5 events before the content in background, 51 content
			// events and 4 after: the cut comes after the 20th.
			m := &mockllm.Server{Script: mockllm.MustParseScript(script), Chunks: 51}
			if err := m.Start(""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			base, log, records := relaying(t, gateway.ContinueResume, 200*time.Millisecond, m.URL)
			got := postRaw(t, base+"/v1/responses", streamBodies["/v1/responses"])
			resp, err := http.Get(m.URL + "/v1/responses/resp_mock_1?stream=true")
			if err != nil {
				t.Fatal(err)
			}
			uncut, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(got, uncut) {
				t.Errorf("the caller got %d bytes, want the uncut stream's %d, byte for byte", len(got), len(uncut))
			}
			if events, _ := eventsOf(got); len(events) != 60 {
				t.Errorf("got %d events, want 60", len(events))
			}
			generations := 0
			for _, n := range m.Stats().Paths["/v1/responses"] {
				generations += n
			}
			if generations != 1 || !strings.Contains(log.bodies()[0], `"background":true`) {
				t.Errorf("the mock generated %d times, and was sent %s; want once, in background", generations, log.bodies()[0])
			}
			r := <-records
			if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationResumed || r.Error != "" || !r.Attempts[len(r.Attempts)-1].Continued {
				t.Errorf("recorded %+v, error %q; want one continuation, resumed, and no error", r.Continuations, r.Error)
			}
		})
	}
}

// A resumption past the provider's window is refused: the caller gets the
// error event of the break, and the background response is cancelled, as it
// is when the caller goes away, so that nothing generates for nobody.
func TestResumeCancels(t *testing.T) {
	t.Parallel()
	t.Run("past the window", func(t *testing.T) {
		t.Parallel()
		m := &mockllm.Server{Script: mockllm.MustParseScript("reset-after=15"), Chunks: 51, ResumeWindow: time.Nanosecond}
		if err := m.Start(""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		base, _, records := relaying(t, gateway.ContinueResume, 2*time.Second, m.URL)
		events, _ := eventsOf(postRaw(t, base+"/v1/responses", streamBodies["/v1/responses"]))
		if last := events[len(events)-1]; string(last.Name) != "error" || !strings.Contains(string(last.Data), "refused its continuation with 404") {
			t.Errorf("ended with %s %s, want the error event saying the resumption was refused", last.Name, last.Data)
		}
		if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationRefused {
			t.Errorf("recorded %+v, want one continuation, refused", r.Continuations)
		}
	})
	t.Run("the caller leaves", func(t *testing.T) {
		t.Parallel()
		m := &mockllm.Server{Script: mockllm.MustParseScript("stall-after=15"), Chunks: 51}
		if err := m.Start(""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		base, _, records := relaying(t, gateway.ContinueResume, time.Minute, m.URL)
		resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(streamBodies["/v1/responses"]))
		if err != nil {
			t.Fatal(err)
		}
		var s ssescan.Scanner
		buf := make([]byte, 512)
		for events := 0; events < 20; {
			n, err := resp.Body.Read(buf)
			for p := buf[:n]; len(p) > 0; {
				m, ended := s.Scan(p)
				p = p[m:]
				if ended {
					events++
				}
			}
			if err != nil {
				t.Fatalf("after %d events: %v", events, err)
			}
		}
		resp.Body.Close()
		if r := <-records; r.Error != record.ErrorClientClosed {
			t.Errorf("recorded %q, want the caller gone", r.Error)
		}
		if n := m.Stats().Paths["/v1/responses/{id}/cancel"]["cancelled"]; n != 1 {
			t.Errorf("the mock saw %d cancels, want 1", n)
		}
	})
}

// A stream whose upstream breaks off after its last event ([DONE],
// message_stop, response.completed) reached the caller whole: the record
// says the request succeeded, never upstream-broke, and the caller gets
// no error event. Continued or not, a break after the end is no failure.
func TestBreakAfterEndIsWhole(t *testing.T) {
	t.Parallel()
	for _, c := range []apiMode{
		{"/v1/chat/completions", gateway.ContinueOff},
		{"/v1/messages", gateway.ContinueOff},
		{"/v1/responses", gateway.ContinueOff},
		{"/v1/chat/completions", gateway.ContinuePrefill},
		{"/v1/messages", gateway.ContinuePrefill},
		{"/v1/responses", gateway.ContinuePrefill}, // events the splice does not know
	} {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			m := mock(t, "ok")
			// The whole stream, then the connection cut with no end to
			// its chunked body: the gateway reads an unexpected EOF.
			cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				resp, err := http.Post(m.URL+r.URL.Path, "application/json", r.Body)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				w.Header().Set("Content-Type", "text/event-stream")
				io.Copy(w, resp.Body)
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}))
			t.Cleanup(cut.Close)
			base, _, records := relaying(t, c.mode, 2*time.Second, cut.URL)
			events, count := eventsOf(postRaw(t, base+c.path, streamBodies[c.path]))
			if count["failure"] != 0 || len(events) == 0 || ssescan.KindOf(&events[len(events)-1].Event) != ssescan.End {
				t.Errorf("got events %v, want the stream whole, its end last, no error", count)
			}
			if r := <-records; r.Status != 200 || r.Error != "" || len(r.Attempts) != 1 || len(r.Continuations) != 0 {
				t.Errorf("recorded %d %q, %d attempts, continuations %+v; want 200, no error, 1 attempt, none", r.Status, r.Error, len(r.Attempts), r.Continuations)
			}
		})
	}
}

// An answer that repeats itself, as mockllm's fox sentence does, is
// continued when it breaks after a whole sentence: the continuation
// begins with the answer's opening, which recurs in the answer, so the
// restart guard cannot call it a restart. The caller gets the whole
// text, once.
func TestContinuationOfRefrain(t *testing.T) {
	t.Parallel()
	const sentence = "The quick brown fox jumps over the lazy dog."
	whole := strings.TrimSpace(strings.Repeat(sentence+" ", chunks/9) + strings.Join(strings.Fields(sentence)[:chunks%9], " "))
	for _, n := range []int{27, 36, 45} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			m := mock(t, fmt.Sprintf("stall-after=%d,ok", n))
			base, _, records := relaying(t, gateway.ContinuePrefill, 200*time.Millisecond, m.URL)
			events, count := eventsOf(postRaw(t, base+"/v1/chat/completions", openAIStream))
			if got := textOf(events); got != whole || count["failure"] != 0 || count["[DONE]"] != 1 {
				t.Errorf("got %v and the text %q; want one [DONE], no error, and %q", count, got, whole)
			}
			if r := <-records; r.Error != "" || len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK {
				t.Errorf("recorded %q, continuations %+v; want one, continued", r.Error, r.Continuations)
			}
		})
	}
}
