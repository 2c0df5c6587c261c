package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
)

// Tests of continuation: streams from mockllm that break after their
// first byte, continued with a prefill, and the streams that must not be.

// chunks is the mock's answer length in these tests: 60 content chunks.
const chunks = 60

// whole is the mock's whole answer of 60 chunks.
var whole = func() string {
	words := strings.Fields("The quick brown fox jumps over the lazy dog.")
	var b strings.Builder
	for i := range chunks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[i%len(words)])
	}
	return b.String()
}()

// bodyLog records the bodies of the requests a RoundTripper sends on.
type bodyLog struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (l *bodyLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(b))
		l.mu.Lock()
		l.seen = append(l.seen, string(b))
		l.mu.Unlock()
	}
	return l.base.RoundTrip(r)
}

func (l *bodyLog) bodies() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// mock starts a mockllm server of 60 chunks with script.
func mock(t *testing.T, script string) *mockllm.Server {
	t.Helper()
	s := &mockllm.Server{Script: mockllm.MustParseScript(script), Chunks: chunks}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// continuing is a gateway in front of upstreams given as name=URL, the
// first with the others as its fallbacks, each continuing streams unless
// named in off; idle is their idle timeout.
func continuing(t *testing.T, idle time.Duration, off []string, ups ...[2]string) (string, *bodyLog, chan record.Request) {
	t.Helper()
	log := &bodyLog{base: http.DefaultTransport}
	records := make(chan record.Request, 16)
	var cfg gateway.Config
	for i, u := range ups {
		target, _ := url.Parse(u[1])
		up := gateway.Upstream{
			Name: u[0], URL: target, Prefix: "/" + u[0], IdleTimeout: idle, FirstByteTimeout: 10 * time.Second,
			Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}, MaxAttempts: 3}, Continuation: gateway.ContinuePrefill,
		}
		if i == 0 {
			up.Prefix = "/"
			for _, f := range ups[1:] {
				up.Fallbacks = append(up.Fallbacks, f[0])
			}
		}
		for _, name := range off {
			if name == u[0] {
				up.Continuation = gateway.ContinueOff
			}
		}
		cfg.Upstreams = append(cfg.Upstreams, up)
	}
	cfg.Transport = log
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Observer = record.Observer{Done: func(r *record.Request) { records <- *r }}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL, log, records
}

// streamed is what a caller read of a stream.
type streamed struct {
	events []sseEvent
	err    error
}

type sseEvent struct{ name, data string }

// read reads an event stream to its end.
func readStream(body io.Reader) streamed {
	var s streamed
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.data != "" || ev.name != "" {
				s.events = append(s.events, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	s.err = sc.Err()
	return s
}

// openAIText returns a chat.completion.chunk stream's text, its ids, how
// many chunks carried a role, and how many [DONE] and error events came.
func (s streamed) openAIText() (text string, ids map[string]bool, roles, done, errs int) {
	ids = map[string]bool{}
	var b strings.Builder
	for _, e := range s.events {
		switch {
		case e.name == "error":
			errs++
		case e.data == "[DONE]":
			done++
		default:
			var c struct {
				ID      string `json:"id"`
				Choices []struct {
					Index int `json:"index"`
					Delta struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(e.data), &c) != nil {
				errs++
				continue
			}
			ids[c.ID] = true
			for _, ch := range c.Choices {
				if ch.Delta.Role != "" {
					roles++
				}
				b.WriteString(ch.Delta.Content)
			}
		}
	}
	return b.String(), ids, roles, done, errs
}

func postStream(t *testing.T, target, body string, header map[string]string) streamed {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("got %v, want a stream", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("got %d %s, want a 200 stream", resp.StatusCode, b)
	}
	return readStream(resp.Body)
}

const openAIStream = `{"model":"m","stream":true,"messages":[{"role":"user","content":"say it"}]}`

// A stream cut after 20 of 60 chunks, and one silent after 20, reach the
// caller whole, as one stream: one id, one role, the whole text once,
// one [DONE] and no error event. The continuation is an attempt of its
// own in the record, which says how long a prefill it carried.
func TestContinuationOpenAI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, script string
	}{
		{"cut", "reset-after=20,ok"},
		{"silent", "stall-after=20,ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := mock(t, c.script)
			base, log, records := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
			start := time.Now()
			s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
			took := time.Since(start)
			text, ids, roles, done, errs := s.openAIText()
			if text != whole || len(ids) != 1 || roles != 1 || done != 1 || errs != 0 {
				t.Errorf("got %q: %d ids, %d roles, %d [DONE], %d error events; want the whole text, 1, 1, 1, 0", text, len(ids), roles, done, errs)
			}
			if took > 15*time.Second {
				t.Errorf("took %v, want within 15 s", took)
			}
			r := <-records
			if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK || r.Error != "" {
				t.Fatalf("recorded continuations %+v, error %q; want one, continued, and no error", r.Continuations, r.Error)
			}
			last := r.Attempts[len(r.Attempts)-1]
			if !last.Continued || last.PrefillBytes != r.Continuations[0].Prefill || last.PrefillBytes == 0 || r.Attempts[0].Continued {
				t.Errorf("attempts %+v, want the last a continuation carrying the prefill", r.Attempts)
			}
			bodies := log.bodies()
			var sent struct {
				Messages []struct{ Role, Content string }
				Continue bool `json:"continue_final_message"`
			}
			json.Unmarshal([]byte(bodies[len(bodies)-1]), &sent)
			if n := len(sent.Messages); n != 2 || sent.Messages[1].Role != "assistant" || !strings.HasPrefix(whole, sent.Messages[1].Content) || !sent.Continue {
				t.Errorf("the continuation sent %s, want the answer so far as a final assistant message, continue_final_message set", bodies[len(bodies)-1])
			}
		})
	}
}

// Anthropic's form: one message_start, one message_stop, every text
// delta in block 0, and the whole text once.
func TestContinuationAnthropic(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok")
	base, log, _ := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
	s := postStream(t, base+"/v1/messages", `{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"say it"}]}`, nil)
	count := map[string]int{}
	var text strings.Builder
	for _, e := range s.events {
		count[e.name]++
		if e.name == "content_block_delta" {
			var d struct {
				Index int
				Delta struct{ Text string }
			}
			json.Unmarshal([]byte(e.data), &d)
			if d.Index != 0 {
				t.Errorf("a delta at index %d, want 0", d.Index)
			}
			text.WriteString(d.Delta.Text)
		}
	}
	if text.String() != whole || count["message_start"] != 1 || count["message_stop"] != 1 || count["content_block_start"] != 1 || count["error"] != 0 {
		t.Errorf("got %q with events %v; want the whole text, one start, one stop, one block, no error", text.String(), count)
	}
	bodies := log.bodies()
	if strings.Contains(bodies[len(bodies)-1], "continue_final_message") || !strings.Contains(bodies[len(bodies)-1], `"role":"assistant"`) {
		t.Errorf("the continuation sent %s, want a prefill without OpenAI's fields", bodies[len(bodies)-1])
	}
}

// A continuation the upstream refuses, with a 400 to the prefill, and
// whose replay fails too, ends the caller's stream with an error event
// naming the break, not the 400, and no [DONE]: the truncated answer is
// never presented as complete.
func TestContinuationRefused(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok:refuse-prefill,503")
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	_, _, _, done, _ := s.openAIText()
	last := s.events[len(s.events)-1]
	if last.name != "error" || done != 0 || strings.Contains(last.data, "prefill") || !strings.Contains(last.data, "upstream primary broke off the stream") {
		t.Errorf("ended with %+v, %d [DONE]; want an error event naming the break, without the 400's text", last, done)
	}
	r := <-records
	if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationFailed || !strings.HasPrefix(r.Continuations[0].Reason, "its prefill was refused with 400; ") || r.Error != record.ErrorUpstreamBroke {
		t.Errorf("recorded %+v, %q; want one break: its replay failed, after the prefill was refused, and upstream-broke", r.Continuations, r.Error)
	}
	if len(r.Attempts) == 0 || r.Attempts[0].Bytes == 0 || r.Attempts[0].Bytes != r.Bytes {
		t.Errorf("the broken attempt forwarded %d bytes of the request's %d: want all of them, none being the refused continuation's", attemptBytes(&r), r.Bytes)
	}
}

// attemptBytes returns the bytes r's first attempt forwarded, or -1.
func attemptBytes(r *record.Request) int64 {
	if len(r.Attempts) == 0 {
		return -1
	}
	return r.Attempts[0].Bytes
}

// Without continuation nothing changes: the stream ends with an error
// event, and no prefill is sent.
func TestContinuationOff(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok")
	base, log, _ := continuing(t, 2*time.Second, []string{"primary"}, [2]string{"primary", m.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	if last := s.events[len(s.events)-1]; last.name != "error" {
		t.Errorf("ended with %+v, want an error event", last)
	}
	if n := len(log.bodies()); n != 1 {
		t.Errorf("%d requests sent, want 1: no continuation", n)
	}
}

// A continuation goes where a retry would: when the primary cannot
// continue, to a fallback that continues streams, and never to one that
// does not.
func TestContinuationFallback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		off      []string
		complete bool
	}{
		{"the fallback continues", nil, true},
		{"the fallback does not", []string{"fallback"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			primary, fallback := mock(t, "reset-after=20,503"), mock(t, "ok")
			base, _, _ := continuing(t, 2*time.Second, c.off, [2]string{"primary", primary.URL}, [2]string{"fallback", fallback.URL})
			s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
			text, _, _, done, errs := s.openAIText()
			if got := text == whole && done == 1 && errs == 0; got != c.complete {
				t.Errorf("got %q, %d [DONE], %d errors; want complete %v", text, done, errs, c.complete)
			}
			if n := fallback.Stats().Total; (n > 0) != c.complete {
				t.Errorf("the fallback saw %d requests", n)
			}
		})
	}
}

// Streams that cannot be continued safely are not: the caller gets the
// error event of today, and the upstream no second request.
func TestContinuationRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, path, body string
		events           []string
		why              string
	}{
		{"a tool call", "/v1/chat/completions", openAIStream, []string{
			`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t","type":"function","function":{"name":"f","arguments":""}}]}}]}`,
		}, "a tool call"},
		{"reasoning", "/v1/chat/completions", openAIStream, []string{
			`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":"Let me think"}}]}`,
		}, "reasoning"},
		{"n = 2", "/v1/chat/completions", `{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`, []string{
			`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}`,
			`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":1,"delta":{"role":"assistant","content":"Hey"}}]}`,
		}, "more than one choice"},
		{"thinking", "/v1/messages", `{"model":"claude","max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, []string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`,
		}, "a thinking block"},
		{"an unknown shape", "/v1/chat/completions", openAIStream, []string{`{"hello":"world"}`}, "events outlast does not know"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, e := range c.events {
					io.WriteString(w, "data: "+e+"\n\n")
				}
				w.(http.Flusher).Flush()
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
			})
			base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
			s := postStream(t, base+c.path, c.body, nil)
			if last := s.events[len(s.events)-1]; last.name != "error" || !strings.Contains(last.data, c.why) {
				t.Errorf("ended with %+v, want an error event saying %q", last, c.why)
			}
			if n := up.attempts(); n != 1 {
				t.Errorf("the upstream saw %d requests, want 1", n)
			}
			if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationUnsupported {
				t.Errorf("recorded %+v, want one continuation, unsupported", r.Continuations)
			}
		})
	}
}

// OpenAI's own API answers a final assistant message rather than
// continuing it: New refuses prefill for it.
func TestContinuationRefusedForOpenAI(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"https://api.openai.com/v1", "https://mine.openai.azure.com/openai"} {
		u, _ := url.Parse(host)
		_, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{URL: u, Continuation: gateway.ContinuePrefill}}})
		if err == nil || !strings.Contains(err.Error(), "does not continue a final assistant message") {
			t.Errorf("%s: got %v, want a refusal", host, err)
		}
	}
}

// A model that refuses a prefill is sent the request again as it was, a
// replay: its answer, the same text from the start, carries the caller's
// stream on past what the caller has, and the caller reads one stream.
func TestContinuationReplayed(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok:refuse-prefill")
	base, log, records := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	text, ids, roles, done, errs := s.openAIText()
	if text != whole || len(ids) != 1 || roles != 1 || done != 1 || errs != 0 {
		t.Errorf("got %q: %d ids, %d roles, %d [DONE], %d errors; want the whole text once, as one stream", text, len(ids), roles, done, errs)
	}
	r := <-records
	if len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationReplayed || r.Continuations[0].Reason != "its prefill was refused with 400" || r.Error != "" {
		t.Errorf("recorded %+v, %q; want one break, replayed after the prefill was refused, and no error", r.Continuations, r.Error)
	}
	// The page and outlast requests say each answer's ending by its break.
	if n := len(r.Attempts); n != 3 || !strings.HasSuffix(r.Ending(0), ", replayed") || r.Ending(n-1) != "200, stream whole" {
		t.Errorf("attempts end %q … %q; want the first replayed, the replay's whole", r.Ending(0), r.Ending(n-1))
	}
	if bodies := log.bodies(); len(bodies) != 3 || bodies[2] != openAIStream {
		t.Errorf("sent %q, want the replay to be the request as the caller sent it", bodies)
	}
}

// Scenario 14 of the failover suite: a continuation that moves to a
// fallback that refuses the prefill is replayed there, and the caller
// reads the whole answer, never the fallback's refusal.
func TestContinuationReplayedAtFallback(t *testing.T) {
	t.Parallel()
	primary, fallback := mock(t, "reset-after=20,503"), mock(t, "ok:refuse-prefill")
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", primary.URL}, [2]string{"fallback", fallback.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	if text, _, _, done, errs := s.openAIText(); text != whole || done != 1 || errs != 0 {
		t.Errorf("got %q, %d [DONE], %d errors; want the whole text", text, done, errs)
	}
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationReplayed || r.Continuations[0].Upstream != "primary" || fallback.Stats().Total != 2 {
		t.Errorf("recorded %+v, the fallback saw %d; want the primary's stream replayed at the fallback, after its 400", r.Continuations, fallback.Stats().Total)
	}
}

// brokenThen503 answers its first attempt with a stream that breaks after
// two chunks, and the rest with 503, in virtual time; it records when
// each attempt came.
type brokenThen503 struct {
	mu   sync.Mutex
	sent []time.Time
}

func (b *brokenThen503) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	n := len(b.sent)
	b.mu.Unlock()
	if n > 1 {
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	}
	events := `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"The"}}]}` + "\n\n" +
		`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" quick"}}]}` + "\n\n"
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(io.MultiReader(strings.NewReader(events), &errReader{io.ErrUnexpectedEOF})), Request: r}, nil
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// A continuation is a retry of the stream that broke: its first attempt
// goes at once, and its retries wait as retries after a first failure
// do, the policy's second wait and on.
func TestContinuationWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &brokenThen503{}
		u, _ := url.Parse("http://upstream.test")
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{URL: u, Continuation: gateway.ContinuePrefill, FirstByteTimeout: time.Minute,
				Policy: &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, Reserve: -1}}},
			Transport: up,
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rec := serve(g, openAIStream, map[string]string{"Outlast-Timeout": "10s"})
		if !strings.Contains(rec.Body.String(), "event: error") {
			t.Errorf("got %q, want an error event once the continuation's retries are spent", rec.Body.String())
		}
		var at []time.Duration
		for _, s := range up.sent {
			at = append(at, s.Sub(start))
		}
		want := []time.Duration{0, 0, 2 * time.Second, 6 * time.Second}
		if len(at) < len(want) || at[1] != want[1] || at[2] != want[2] || at[3] != want[3] {
			t.Errorf("attempts at %v, want %v and on: the continuation at once, then the policy's second wait and on", at, want)
		}
	})
}

// The refusals against mockllm's own streams: a request for more than
// one choice, one with extended thinking, and llama.cpp's /completion,
// whose events are neither API's chat stream, are not continued; the
// caller gets the error event and the mock no second request.
func TestContinuationRefusalsWithMock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, path, body, why string
	}{
		{"n = 2", "/v1/chat/completions", `{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`, "more than one choice"},
		{"extended thinking", "/v1/messages", `{"model":"c","max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, "extended thinking"},
		{"llama.cpp's completion", "/completion", `{"prompt":"hi","stream":true}`, "events outlast does not know"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := mock(t, "reset-after=20,ok")
			base, log, _ := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
			s := postStream(t, base+c.path, c.body, nil)
			if last := s.events[len(s.events)-1]; last.name != "error" || !strings.Contains(last.data, c.why) {
				t.Errorf("ended with %+v, want an error event saying %q", last, c.why)
			}
			if n := len(log.bodies()); n != 1 {
				t.Errorf("%d requests sent, want 1", n)
			}
		})
	}
}

// An upstream that ends the stream with an error chunk and then [DONE],
// as vLLM does when generation fails mid-answer: the caller gets one
// stream, continued, with one [DONE] at its end, never the failed
// stream's [DONE] before the continuation's text. The upstream's streams
// are short enough that net/http gives them a Content-Length, which the
// caller's stream, longer, must not carry.
func TestContinuationAfterErrorThenDone(t *testing.T) {
	t.Parallel()
	role := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n"
	up := newUpstream(t,
		sseOnce(role+chunkEvent("Hello", "")+"\n\n"+`data: {"error":{"object":"error","message":"generation failed","type":"InternalServerError","code":500}}`+"\n\ndata: [DONE]\n\n"),
		sseOnce(chunkEvent(" world", "")+"\n\n"+chunkEvent("", "stop")+"\n\ndata: [DONE]\n\n"))
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	text, _, _, done, errs := s.openAIText()
	if text != "Hello world" || done != 1 || errs != 0 || s.events[len(s.events)-1].data != "[DONE]" {
		t.Errorf("got %q, %d [DONE], %d error events, last %+v; want \"Hello world\" continued, one [DONE] at the end, no error", text, done, errs, s.events[len(s.events)-1])
	}
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK || r.Error != "" {
		t.Errorf("recorded continuations %+v, error %q; want one, continued, and no error", r.Continuations, r.Error)
	}
}

// An error event known by its name, whose data is not an error chunk
// or Anthropic's error (some OpenAI-compatible servers send the error
// object alone), is held back as either would be: the caller gets one
// stream, continued, with no error in it.
func TestContinuationAfterNamedErrorEvent(t *testing.T) {
	t.Parallel()
	named := "event: error\ndata: {\"message\":\"boom\",\"code\":\"server_error\"}\n\n"
	t.Run("openai", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t,
			sseOnce(chunkEvent("Hello", "")+"\n\n"+named),
			sseOnce(chunkEvent(" world", "stop")+"\n\ndata: [DONE]\n\n"))
		base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
		s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
		if text, _, _, done, errs := s.openAIText(); text != "Hello world" || done != 1 || errs != 0 {
			t.Errorf("got %q, %d [DONE], %d error events; want \"Hello world\" continued, one [DONE], no error", text, done, errs)
		}
		if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK || r.Error != "" {
			t.Errorf("recorded continuations %+v, error %q; want one, continued, and no error", r.Continuations, r.Error)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		t.Parallel()
		start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
		delta := func(text string) string {
			return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
		}
		end := "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		up := newUpstream(t, sseOnce(start+delta("Hello")+named), sseOnce(start+delta(" world")+end))
		base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
		s := postStream(t, base+"/v1/messages", `{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"say it"}]}`, nil)
		var text strings.Builder
		count := map[string]int{}
		for _, e := range s.events {
			count[e.name]++
			var d struct{ Delta struct{ Text string } }
			if e.name == "content_block_delta" && json.Unmarshal([]byte(e.data), &d) == nil {
				text.WriteString(d.Delta.Text)
			}
		}
		if text.String() != "Hello world" || count["error"] != 0 || count["message_stop"] != 1 {
			t.Errorf("got %q with events %v; want \"Hello world\" continued, one message_stop, no error", text.String(), count)
		}
		if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationOK || r.Error != "" {
			t.Errorf("recorded continuations %+v, error %q; want one, continued, and no error", r.Continuations, r.Error)
		}
	})
}

// A stream whose last event the upstream cuts off, by its clean end
// without the blank line, or by a break inside an event too long to hold:
// what the gateway sends after it (the continuation, or its error event)
// starts an event of its own, never joined to the rest of that one.
func TestContinuationAfterEventCutOff(t *testing.T) {
	t.Parallel()
	role := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n"
	for _, c := range []struct {
		name  string
		first string // the stream that breaks
		check func(t *testing.T, body string)
	}{
		{"its end without a blank line", role + chunkEvent("Hello", "") + "\n\n" + chunkEvent(" wor", ""), func(t *testing.T, body string) {
			text, _, _, done, errs := readStream(strings.NewReader(body)).openAIText()
			if text != "Hello world" || done != 1 || errs != 0 {
				t.Errorf("got %q, %d [DONE], %d events unread or errors; want \"Hello world\", 1, 0 in %q", text, done, errs, body)
			}
		}},
		{"its end mid-JSON", role + chunkEvent("Hello", "") + "\n\n" + `data: {"id":"chatcmpl-1","object":"ch`, func(t *testing.T, body string) {
			text, _, _, done, errs := readStream(strings.NewReader(body)).openAIText()
			if text != "Hellold" || done != 1 || errs != 0 || strings.Contains(body, `"object":"ch`+"\n") {
				t.Errorf("got %q, %d [DONE], %d events unread or errors; want the half event dropped, and the stream continued after \"Hello\", in %q", text, done, errs, body)
			}
		}},
		{"a break inside an event over 4 MiB", role + chunkEvent("Hello", "") + "\n\n" + "data: " + strings.Repeat("A", 5<<20), func(t *testing.T, body string) {
			if strings.Contains(body, "Ald") || strings.Contains(body, `"ld"`) {
				t.Errorf("the stream was carried on after half an event")
			}
			if !strings.HasSuffix(strings.TrimRight(body, "\n"), "}") || !strings.Contains(body, "\n\nevent: error\n") {
				t.Errorf("the stream ends %q, want the gateway's error event on its own", body[max(0, len(body)-300):])
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, sseOnce(c.first), sseOnce(chunkEvent("ld", "")+"\n\n"+chunkEvent("", "stop")+"\n\ndata: [DONE]\n\n"))
			base, _, _ := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(openAIStream))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			c.check(t, string(b))
		})
	}
}

// chunkEvent is an OpenAI chat chunk's event carrying content, with
// finish as its finish_reason if not empty, without the blank line that
// ends it.
func chunkEvent(content, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":` + f + "}]}"
}

// sseOnce answers with the event stream events in one write, unflushed,
// so that net/http sends a short one with a Content-Length.
func sseOnce(events string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events)
	}
}

// heldOpen returns the URL of an upstream that answers every request with
// the event stream events, flushed, and then holds the response open
// until the gateway leaves.
func heldOpen(t *testing.T, events string) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// offIf returns continuing's names of the upstreams with continuation
// off: "primary" if off.
func offIf(off bool) []string {
	if off {
		return []string{"primary"}
	}
	return nil
}

// A stream ends for the caller at its last event, [DONE], though the
// upstream keeps its connection open after it: with the stream carried
// on if it breaks (a splice follows it) and without (a watch does).
func TestStreamEndsAtItsLastEvent(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("continuation off %v", off), func(t *testing.T) {
			t.Parallel()
			up := heldOpen(t, chunkEvent("Hello", "")+"\n\n"+chunkEvent("", "stop")+"\n\ndata: [DONE]\n\n")
			base, _, records := continuing(t, time.Hour, offIf(off), [2]string{"primary", up})
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(openAIStream))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make(chan streamed, 1)
			go func() { got <- readStream(resp.Body) }()
			select {
			case s := <-got:
				if text, _, _, done, errs := s.openAIText(); text != "Hello" || done != 1 || errs != 0 || s.err != nil {
					t.Errorf("got %q, %d [DONE], %d errors, %v; want Hello and one [DONE]", text, done, errs, s.err)
				}
			case <-time.After(30 * time.Second): // a bound on a hang, not a timing
				t.Fatal("the caller's stream did not end at [DONE]")
			}
			select {
			case r := <-records:
				if r.Error != "" {
					t.Errorf("recorded error %q, want none", r.Error)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no record")
			}
		})
	}
}

// A stream whose lines end in CRLF reaches the caller with its last
// event's line endings whole, though the stream ends for the caller at
// that event: "\r\n\r\n", not "\r\n\r", which a client that splits on
// "\r\n\r\n" would never see end.
func TestStreamEndKeepsCRLF(t *testing.T) {
	t.Parallel()
	events := strings.ReplaceAll(chunkEvent("Hello", "stop")+"\n\ndata: [DONE]\n\n", "\n", "\r\n")
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("continuation off %v", off), func(t *testing.T) {
			t.Parallel()
			base, _, _ := continuing(t, time.Hour, offIf(off), [2]string{"primary", heldOpen(t, events)})
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(openAIStream))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != events {
				t.Errorf("the caller got %q, %v; want the upstream's %q", got, err, events)
			}
		})
	}
}

// Nothing after a stream's last event reaches the caller, though it came
// in the same read: not another chunk after [DONE], and not an error
// event after message_stop, which would make a whole answer a failure,
// for the caller and in the record.
func TestNothingAfterTheLastEvent(t *testing.T) {
	t.Parallel()
	openAI := chunkEvent("Hello", "stop") + "\n\ndata: [DONE]\n\n"
	anthropic := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, c := range []struct {
		name, whole, after string
	}{
		{"openai", openAI, chunkEvent(" again", "") + "\n\n"},
		{"anthropic", anthropic, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"},
	} {
		for _, off := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/continuation off %v", c.name, off), func(t *testing.T) {
				t.Parallel()
				base, _, records := continuing(t, time.Hour, offIf(off), [2]string{"primary", heldOpen(t, c.whole+c.after)})
				resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(openAIStream))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(got) != c.whole {
					t.Errorf("the caller got %q, %v; want the stream to its last event, %q", got, err, c.whole)
				}
				if r := <-records; r.Error != "" {
					t.Errorf("recorded error %q, want none", r.Error)
				}
			})
		}
	}
}

// With continuation off, a stream that ends cleanly before its last event
// is broken, not whole, when its API ends with an event of its own: the
// caller gets an error event after what came, as it would for a reset,
// rather than a cut answer that looks complete, and the record says it
// broke. A stream of events outlast does not know is whole at its end.
func TestWatchedStreamEndedEarly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		broke      bool
	}{
		{"openai", chunkEvent("Hel", "") + "\n\n", true},
		{"anthropic", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n", true},
		{"responses", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hel\"}\n\n", true},
		{"azure", "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[]}\n\n" + chunkEvent("Hel", "") + "\n\n", true},
		// Some servers end there: the answer's finish, with no [DONE].
		{"openai finished", chunkEvent("Hel", "") + "\n\n" + chunkEvent("lo", "stop") + "\n\n", false},
		{"openai whole", chunkEvent("Hello", "stop") + "\n\ndata: [DONE]\n\n", false},
		{"unknown", "data: Hel\n\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, c.body) // and ends the response cleanly
			}))
			t.Cleanup(up.Close)
			base, _, records := continuing(t, time.Hour, []string{"primary"}, [2]string{"primary", up.URL})
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(openAIStream))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.HasPrefix(string(got), c.body) {
				t.Errorf("the caller got\n%s\nwant what the upstream sent first\n%s", got, c.body)
			}
			if tail := string(got[min(len(got), len(c.body)):]); c.broke != strings.Contains(tail, "the stream ended before its last event") {
				t.Errorf("after the upstream's events the caller got %q; want an error event saying the stream ended early: %v", tail, c.broke)
			}
			r := <-records
			if want := map[bool]string{true: record.ErrorUpstreamBroke}[c.broke]; r.Error != want {
				t.Errorf("recorded error %q, want %q", r.Error, want)
			}
		})
	}
}

// A stream ends for the caller at [DONE], and the gateway reads the
// upstream's response to its end first, as net/http needs to keep its
// connection: here the end comes in a read of its own after [DONE].
func TestStreamEndReadsTheResponseEnd(t *testing.T) {
	t.Parallel()
	for _, c := range []gateway.Continuation{gateway.ContinuePrefill, gateway.ContinueOff} {
		body := &endBody{events: chunkEvent("Hello", "") + "\n\n" + chunkEvent("", "stop") + "\n\ndata: [DONE]\n\n"}
		u, _ := url.Parse("http://upstream.test")
		g, err := gateway.New(gateway.Config{
			Upstreams: []gateway.Upstream{{URL: u, Continuation: c, IdleTimeout: time.Hour}},
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body}, nil
			}),
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(g, openAIStream, nil)
		if text, _, _, done, _ := readStream(rec.Body).openAIText(); text != "Hello" || done != 1 {
			t.Errorf("%v: got %q and %d [DONE], want Hello and one", c, text, done)
		}
		if !body.closedAtEOF {
			t.Errorf("%v: the upstream's body was closed before its end was read", c)
		}
	}
}

// endBody is a response body that sends its events in one read and its
// end in the next, and notes whether it was closed after that end.
type endBody struct {
	events      string
	reads       int
	closedAtEOF bool
}

func (b *endBody) Read(p []byte) (int, error) {
	if b.reads++; b.reads == 1 {
		return copy(p, b.events), nil
	}
	return 0, io.EOF
}

func (b *endBody) Close() error {
	b.closedAtEOF = b.reads > 1
	return nil
}

// Anthropic's events for the tests below: a stream's preamble, a text
// block's start, delta and stop, and the answer's end.
var (
	anStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[]}}\n\n"
	anBlock = func(i int) string {
		return fmt.Sprintf("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", i)
	}
	anDelta = func(i int, text string) string {
		b, _ := json.Marshal(text)
		return fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", i, b)
	}
	anStop = func(i int) string {
		return fmt.Sprintf("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", i)
	}
	anEnd = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

const anthropicStream = `{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"say it"}]}`

// anthropicRead is what a caller read of an Anthropic stream: its text,
// how many of each event, and whether each block's deltas came between
// its start and its stop, as the SDKs' accumulators need.
func anthropicRead(s streamed) (text string, count map[string]int, wellFormed bool) {
	var b strings.Builder
	count = map[string]int{}
	open := map[int]bool{}
	wellFormed = true
	for _, e := range s.events {
		count[e.name]++
		var d struct {
			Index int
			Delta struct{ Text string }
		}
		json.Unmarshal([]byte(e.data), &d)
		switch e.name {
		case "content_block_start":
			wellFormed = wellFormed && !open[d.Index]
			open[d.Index] = true
		case "content_block_delta":
			wellFormed = wellFormed && open[d.Index]
			b.WriteString(d.Delta.Text)
		case "content_block_stop":
			wellFormed = wellFormed && open[d.Index]
			open[d.Index] = false
		}
	}
	return b.String(), count, wellFormed
}

// A continuation that breaks while its first events are still held (its
// text has not yet shown that it continues) gave the caller none of
// them: the next one carries on from the blocks the caller has, so that
// each block the caller reads starts before its deltas.
func TestContinuationAfterHeldBreak(t *testing.T) {
	t.Parallel()
	up := newUpstream(t,
		sseOnce(anStart+anBlock(0)+anDelta(0, "First paragraph.")+anStop(0)),
		sseOnce(anStart+anBlock(0)+anDelta(0, "\n\n")),
		sseOnce(anStart+anBlock(0)+anDelta(0, "Second paragraph.")+anStop(0)+anEnd))
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
	s := postStream(t, base+"/v1/messages", anthropicStream, nil)
	text, count, ok := anthropicRead(s)
	if text != "First paragraph.Second paragraph." || !ok || count["error"] != 0 || count["message_stop"] != 1 {
		t.Errorf("got %q, events %v, well formed %v; want both paragraphs in blocks that start before their deltas, one message_stop", text, count, ok)
	}
	if r := <-records; len(r.Continuations) != 2 || r.Error != "" {
		t.Errorf("recorded continuations %+v, error %q; want two, and no error", r.Continuations, r.Error)
	}
}

// A replay whose answer ends before it has given the whole answer so far
// did not carry the caller's on: it diverged, and the caller gets the
// error event, never an end that calls the truncated answer whole.
func TestReplayEndsShort(t *testing.T) {
	t.Parallel()
	refuse := func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"prefill not supported"}}`, http.StatusBadRequest)
	}
	up := newUpstream(t,
		sseOnce(anStart+anBlock(0)+anDelta(0, "Hello, world. ")+anDelta(0, "This is the first part")),
		refuse,
		sseOnce(anStart+anBlock(0)+anDelta(0, "Hello, world.")+anStop(0)+anEnd))
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
	s := postStream(t, base+"/v1/messages", anthropicStream, nil)
	if _, count, _ := anthropicRead(s); count["message_stop"] != 0 || count["message_delta"] != 0 || count["error"] != 1 {
		t.Errorf("got events %v; want the error event, and neither the replay's stop_reason nor its message_stop", count)
	}
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationDiverged {
		t.Errorf("recorded continuations %+v; want one, diverged", r.Continuations)
	}
}

// An error event after the answer's finish ends an answer that is whole:
// there is nothing to carry on, and the caller gets the error as the
// upstream sent it, as it would without continuation; no second
// generation follows it.
func TestErrorAfterFinishNotContinued(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, path, body, first, next string
	}{
		{"openai", "/v1/chat/completions", openAIStream,
			chunkEvent("Hello, world.", "stop") + "\n\n" + `data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n",
			chunkEvent(" Extra text after the end.", "stop") + "\n\ndata: [DONE]\n\n"},
		{"anthropic", "/v1/messages", anthropicStream,
			anStart + anBlock(0) + anDelta(0, "Hello, world.") + anStop(0) + "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
			anStart + anBlock(0) + anDelta(0, " Extra text after the end.") + anStop(0) + anEnd},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, sseOnce(c.first), sseOnce(c.next))
			base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
			resp, err := http.Post(base+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "Extra") || !strings.Contains(string(b), "boom") && !strings.Contains(string(b), "Overloaded") || up.attempts() != 1 {
				t.Errorf("the upstream got %d requests, the caller %q; want one request, and the upstream's error after the whole answer", up.attempts(), b)
			}
			if r := <-records; len(r.Continuations) != 0 || r.Error != record.ErrorUpstreamError {
				t.Errorf("recorded continuations %+v, error %q; want none, and the upstream's error event", r.Continuations, r.Error)
			}
		})
	}
}

// A continuation is a retry and one more attempt: a request that has no
// retries, or whose attempts are spent, is not carried on, and the
// upstream sees no request past what the request allows.
func TestContinuationWithinAttempts(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{
		{"Outlast-Retry": "off"},
		{"Outlast-Max-Attempts": "1"},
		{"Outlast-Attempt": "1"},
	} {
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			t.Parallel()
			m := mock(t, "reset-after=20,ok")
			base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
			s := postStream(t, base+"/v1/chat/completions", openAIStream, h)
			if _, _, _, done, errs := s.openAIText(); done != 0 || errs != 1 || m.Stats().Total != 1 {
				t.Errorf("the upstream got %d requests, the caller %d [DONE] and %d errors; want 1 request and the error event", m.Stats().Total, done, errs)
			}
			if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationUnsupported || len(r.Attempts) != 1 {
				t.Errorf("recorded %d attempts, continuations %+v; want 1, and the continuation unsupported", len(r.Attempts), r.Continuations)
			}
		})
	}
}

// A model name of any length is quoted in a continuation's reason as the
// record keeps it, cut to its 256 bytes, so that a caller's name cannot
// grow the record, the page's feed or the caller's error event.
func TestContinuationReasonCutsTheModel(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok:refuse-prefill,ok:refuse-prefill,reset-after=20,ok:refuse-prefill")
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", m.URL})
	body := `{"model":"` + strings.Repeat("m", 100_000) + `","stream":true,"messages":[{"role":"user","content":"say it"}]}`
	for range 2 { // the second meets the first's refusal
		postStream(t, base+"/v1/chat/completions", body, nil)
		r := <-records
		if len(r.Continuations) != 1 {
			t.Fatalf("recorded continuations %.300v; want one", r.Continuations)
		}
		for _, c := range r.Continuations {
			if len(c.Reason) > 1000 {
				t.Errorf("a continuation's reason is %d bytes: %.80q…", len(c.Reason), c.Reason)
			}
		}
	}
}

// "tool_calls": [] with a text delta, as some OpenAI-compatible servers
// send it, is no tool call: the stream is carried on.
func TestEmptyToolCallsContinued(t *testing.T) {
	t.Parallel()
	empty := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello","tool_calls":[]},"finish_reason":null}]}` + "\n\n"
	up := newUpstream(t, sseOnce(empty), sseOnce(chunkEvent(" world", "stop")+"\n\ndata: [DONE]\n\n"))
	base, _, _ := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
	s := postStream(t, base+"/v1/chat/completions", openAIStream, nil)
	if text, _, _, done, errs := s.openAIText(); text != "Hello world" || done != 1 || errs != 0 {
		t.Errorf("got %q, %d [DONE], %d errors; want \"Hello world\" continued", text, done, errs)
	}
}

// A continuation that answers in another API's events than the stream it
// carries on is ended before any of them reach the caller. (The answer
// repeats its opening, so the check for a restart does not hold them.)
func TestContinuationOfAnotherAPI(t *testing.T) {
	t.Parallel()
	up := newUpstream(t,
		sseOnce(anStart+anBlock(0)+anDelta(0, strings.Repeat("la ", 40))),
		sseOnce(`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n"))
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", up.URL})
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(anthropicStream))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "chat.completion.chunk") || strings.Contains(string(b), "[DONE]") || !strings.Contains(string(b), "event: error") {
		t.Errorf("the caller got %q; want the error event, and none of the other API's events", b)
	}
	if r := <-records; len(r.Continuations) != 1 || r.Continuations[0].Outcome != record.ContinuationFailed {
		t.Errorf("recorded continuations %+v; want one, failed", r.Continuations)
	}
}

// A stream whose every attempt at the upstream fails with an error event
// before its answer began moves to the fallback, as a 529 would, and
// the caller reads the fallback's answer.
func TestStreamErrorEventMoves(t *testing.T) {
	t.Parallel()
	primary, fallback := mock(t, "overloaded-stream"), mock(t, "ok")
	base, _, records := continuing(t, 2*time.Second, nil, [2]string{"primary", primary.URL}, [2]string{"fallback", fallback.URL})
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(anthropicStream))
	if err != nil {
		t.Fatal(err)
	}
	s := readStream(resp.Body)
	resp.Body.Close()
	if text, count, _ := anthropicRead(s); text == "" || count["error"] != 0 || resp.Header.Get("Outlast-Upstream") != "fallback" {
		t.Errorf("got %q from %q, events %v; want the fallback's answer", text, resp.Header.Get("Outlast-Upstream"), count)
	}
	if r := <-records; len(r.Moves) != 1 || r.Moves[0].To != "fallback" {
		t.Errorf("recorded moves %+v; want one, to the fallback", r.Moves)
	}
}
