package mockllm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

func TestStatusSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script, path string
		status             int
		header             map[string]string // headers and values wanted
		body               string            // the whole body wanted
	}{
		// A bare status gets the API's error object: OpenAI's here.
		{
			name: "openai 503", script: "503", path: chatPath, status: 503,
			header: map[string]string{"Content-Type": "application/json"},
			body:   `{"error":{"code":null,"message":"Service Unavailable","param":null,"type":"server_error"}}`,
		},
		// Anthropic's error object, for the same script on its path.
		{
			name: "anthropic 503", script: "503", path: messagesPath, status: 503,
			body: `{"error":{"message":"Service Unavailable","type":"api_error"},"type":"error"}`,
		},
		// llama.cpp's error object.
		{
			name: "llama.cpp 503", script: "503", path: completionPath, status: 503,
			body: `{"error":{"code":503,"message":"Service Unavailable","type":"unavailable_error"}}`,
		},
		// Any status, with any body and headers.
		{
			name: "body and header", script: `500:body={"error":"x"}:header=X-Foo=bar`, path: chatPath, status: 500,
			header: map[string]string{"X-Foo": "bar", "Content-Type": "application/json"},
			body:   `{"error":"x"}`,
		},
		// A body that is not JSON goes as text; a header may replace the
		// server's own.
		{
			name: "text body", script: `200:body=oops`, path: chatPath, status: 200,
			header: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, body: "oops",
		},
		{
			name: "content type replaced", script: `502:body=<html>:header=Content-Type=text/html`, path: chatPath, status: 502,
			header: map[string]string{"Content-Type": "text/html"}, body: "<html>",
		},
		// The Retry-After forms a host must read.
		{
			name: "retry-after", script: "429:retry-after=1", path: chatPath, status: 429,
			header: map[string]string{"Retry-After": "1"},
			body:   `{"error":{"code":"rate_limit_exceeded","message":"Too Many Requests","param":null,"type":"requests"}}`,
		},
		{
			name: "retry-after-ms", script: "429:retry-after-ms=1500", path: messagesPath, status: 429,
			header: map[string]string{"Retry-After-Ms": "1500", "Retry-After": ""},
			body:   `{"error":{"message":"Too Many Requests","type":"rate_limit_error"},"type":"error"}`,
		},
		// Anthropic's overload, on any path.
		{
			name: "overloaded", script: "overloaded", path: chatPath, status: 529,
			body: `{"error":{"message":"Overloaded","type":"overloaded_error"},"type":"error"}`,
		},
		// llama.cpp while it loads the model, on any path.
		{
			name: "loading", script: "loading", path: messagesPath, status: 503,
			body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.script, nil)
			resp, body := do(t, client(t, 0), s.URL+tc.path, bodies[tc.path])
			if resp.StatusCode != tc.status {
				t.Errorf("status: got %d, want %d", resp.StatusCode, tc.status)
			}
			for k, v := range tc.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: got %q, want %q", k, got, v)
				}
			}
			if body != tc.body {
				t.Errorf("body: got %s, want %s", body, tc.body)
			}
		})
	}
}

// retry-after-date sends an HTTP-date 5 s ahead of the response's Date,
// give or take the rounding of both to the second.
func TestRetryAfterDate(t *testing.T) {
	t.Parallel()
	s := start(t, "429:retry-after-date=5", nil)
	resp, _ := do(t, client(t, 0), s.URL+chatPath, bodies[chatPath])
	at, err := http.ParseTime(resp.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", resp.Header.Get("Retry-After"), err)
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(date); d < 5*time.Second || d > 6*time.Second {
		t.Errorf("Retry-After is %v after Date, want 5s to 6s", d)
	}
}

// overloaded-stream is a 200 event stream whose first event is the
// error, as Anthropic sends when it is overloaded mid-stream.
func TestOverloadedStream(t *testing.T) {
	t.Parallel()
	s := start(t, "overloaded-stream", nil)
	resp, err := post(client(t, 0), s.URL+messagesPath, streamBody(messagesPath))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("got %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs, err := readEvents(resp.Body)
	want := []sse{{"error", `{"error":{"message":"Overloaded","type":"overloaded_error"},"type":"error"}`}}
	if err != nil || !reflect.DeepEqual(evs, want) {
		t.Errorf("got %v, %v; want %v", evs, err, want)
	}
}

// /health reports a loading step without using it; the model endpoints
// use it.
func TestLoadingHealth(t *testing.T) {
	t.Parallel()
	s := start(t, "loading x2,ok", nil)
	c := client(t, 0)
	health := func() (int, string) {
		t.Helper()
		resp, err := c.Get(s.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	loading := `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`
	for i, want := range []int{503, 503, 200} {
		if code, body := health(); code != want || (want == 503) != (body == loading) {
			t.Errorf("health before request %d: got %d %s, want %d", i+1, code, body, want)
		}
		if resp, _ := do(t, c, s.URL+completionPath, bodies[completionPath]); resp.StatusCode != want {
			t.Errorf("request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if code, body := health(); code != 200 || body != `{"status":"ok"}` {
		t.Errorf("health after: got %d %s, want 200 {\"status\":\"ok\"}", code, body)
	}
	want := map[string]map[string]int{completionPath: {"loading": 2, "ok": 1}}
	if got := s.Stats(); got.Total != 3 || !reflect.DeepEqual(got.Paths, want) {
		t.Errorf("stats: got %+v, want 3 requests, %v", got, want)
	}
}

// refuse closes the socket: a request is refused, then, once the window
// has passed, succeeds on the same URL. Refused connections are not
// counted.
func TestRefuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fromFirst bool
	}{
		// The window starts at Start.
		{"from start", false},
		// A first step that refuses starts at Start even with
		// FromFirstRequest: no request could reach the closed socket to
		// start it.
		{"from the first request", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			s := start(t, "refuse:300ms", &mockllm.Server{FromFirstRequest: tc.fromFirst})
			url := s.URL
			c := client(t, 5*time.Second)
			_, err := post(c, url+chatPath, bodies[chatPath])
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("during the window: got %v, want connection refused", err)
			}
			waitListening(t, s)
			if d := time.Since(begin); d < 300*time.Millisecond {
				t.Errorf("up after %v, want 300ms or more", d)
			}
			if resp, _ := do(t, c, url+chatPath, bodies[chatPath]); resp.StatusCode != 200 {
				t.Errorf("after the window: got %d, want 200", resp.StatusCode)
			}
			if s.URL != url {
				t.Errorf("URL: got %s, want %s", s.URL, url)
			}
			// A script that ends with refuse ends up.
			want := mockllm.Stats{Total: 1, Peak: 1, Paths: map[string]map[string]int{chatPath: {"ok": 1}}}
			if got := s.Stats(); !reflect.DeepEqual(got, want) {
				t.Errorf("stats: got %+v, want %+v", got, want)
			}
		})
	}
}

// waitListening waits until s listens again after a refuse step: the
// reopening is an event to wait for, not a time to guess.
func waitListening(t *testing.T, s *mockllm.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := mockllm.WaitListening(ctx, s); err != nil {
		t.Fatalf("not listening again: %v", err)
	}
}

// A refuse step after a request closes the connection that request kept
// alive: the next request, from the same client, is refused.
func TestRefuseAfterRequest(t *testing.T) {
	t.Parallel()
	s := start(t, "ok,refuse:300ms,ok", nil)
	c := client(t, 5*time.Second)
	resp, _ := do(t, c, s.URL+chatPath, bodies[chatPath])
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("first: got %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := post(c, s.URL+chatPath, bodies[chatPath]); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("second: got %v, want connection refused", err)
	}
	waitListening(t, s)
	if resp, _ := do(t, c, s.URL+chatPath, bodies[chatPath]); resp.StatusCode != 200 {
		t.Errorf("after the window: got %d, want 200", resp.StatusCode)
	}
}

// reset drops the connection with a reset before any response.
func TestReset(t *testing.T) {
	t.Parallel()
	s := start(t, "reset,ok", nil)
	c := client(t, 5*time.Second)
	if _, err := post(c, s.URL+chatPath, bodies[chatPath]); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("got %v, want connection reset", err)
	}
	if resp, _ := do(t, c, s.URL+chatPath, bodies[chatPath]); resp.StatusCode != 200 {
		t.Errorf("after: got %d, want 200", resp.StatusCode)
	}
}

// close-after-headers sends a 200's headers and closes: the body ends
// before its first byte.
func TestCloseAfterHeaders(t *testing.T) {
	t.Parallel()
	for _, body := range []string{bodies[chatPath], streamBody(chatPath)} {
		t.Run(body, func(t *testing.T) {
			t.Parallel()
			s := start(t, "close-after-headers", nil)
			resp, err := post(client(t, 5*time.Second), s.URL+chatPath, body)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(b) != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("got %d, %d bytes, %v; want 200, 0 bytes, unexpected EOF", resp.StatusCode, len(b), err)
			}
		})
	}
}

// stall sends headers and nothing more: a client with a timeout gives up
// with the headers and no byte of body.
func TestStall(t *testing.T) {
	t.Parallel()
	for _, path := range []string{chatPath, messagesPath, completionPath, responsesPath} {
		for _, body := range []string{bodies[path], streamBody(path)} {
			t.Run(body, func(t *testing.T) {
				t.Parallel()
				s := start(t, "stall", nil)
				resp, err := post(client(t, 300*time.Millisecond), s.URL+path, body)
				if err != nil {
					t.Fatalf("got %v, want the headers", err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || len(b) != 0 || !isTimeout(err) {
					t.Errorf("got %d, %d bytes, %v; want 200, 0 bytes, a timeout", resp.StatusCode, len(b), err)
				}
				want := mockllm.Stats{Total: 1, Peak: 1, Paths: map[string]map[string]int{path: {"stall": 1}}}
				got := s.Stats()
				got.Generating = 0 // the stalled handler may not have seen the client go yet
				if !reflect.DeepEqual(got, want) {
					t.Errorf("stats: got %+v, want %+v", got, want)
				}
			})
		}
	}
}

// stall-after=N and reset-after=N send N content chunks, then stall or
// reset; with N past the end, all the content but not the end.
func TestCutShort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		chunks       int // content events wanted
		stall        bool
	}{
		{"stall-after=0", "stall-after=0", 0, true},
		{"stall-after=2", "stall-after=2", 2, true},
		{"stall-after past the end", "stall-after=20", 5, true},
		{"reset-after=0", "reset-after=0", 0, false},
		{"reset-after=3", "reset-after=3", 3, false},
		{"reset-after past the end", "reset-after=9", 5, false},
	} {
		for _, path := range []string{chatPath, messagesPath, completionPath, responsesPath} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				s := start(t, tc.script, &mockllm.Server{Chunks: 5})
				resp, err := post(client(t, 200*time.Millisecond), s.URL+path, streamBody(path))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				evs, err := readEvents(resp.Body)
				if got := contentEvents(path, evs); got != tc.chunks {
					t.Errorf("got %d content events, want %d", got, tc.chunks)
				}
				if tc.stall && !isTimeout(err) || !tc.stall && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("got %v, want a timeout if stalled, else a reset", err)
				}
			})
		}
	}
}

// A non-streaming body cut short goes in Chunks parts: the client gets
// the first N, and never the end.
func TestCutShortWhole(t *testing.T) {
	t.Parallel()
	full, size := wholeBody(t, 4)
	for _, tc := range []struct {
		script string
		n      int // parts wanted
	}{
		{"stall-after=1", 1},
		{"reset-after=3", 3},
		{"stall-after=4", 4}, // all of it, but the body never ends
	} {
		t.Run(tc.script, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.script, &mockllm.Server{Chunks: 4})
			resp, err := post(client(t, 300*time.Millisecond), s.URL+chatPath, bodies[chatPath])
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Only the length can be compared: the other server's body
			// has another "created" time.
			want := min(len(full), tc.n*size)
			if len(b) != want || !strings.HasPrefix(string(b), `{"id":"chatcmpl-mock-1"`) || err == nil {
				t.Errorf("got %q, %v; want %d bytes of %q and an error", b, err, want, full)
			}
		})
	}
}

// slow-headers waits before the headers: a client that does not wait so
// long gets nothing; one that does gets the completion.
func TestSlowHeaders(t *testing.T) {
	t.Parallel()
	s := start(t, "slow-headers=300ms", nil)
	if _, err := post(client(t, 100*time.Millisecond), s.URL+chatPath, bodies[chatPath]); !isTimeout(err) {
		t.Errorf("impatient client: got %v, want a timeout", err)
	}
	begin := time.Now()
	if resp, _ := do(t, client(t, 5*time.Second), s.URL+chatPath, bodies[chatPath]); resp.StatusCode != 200 {
		t.Errorf("patient client: got %d, want 200", resp.StatusCode)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Errorf("patient client: headers after %v, want 300ms or more", d)
	}
}

// delay= holds any answer back.
func TestDelay(t *testing.T) {
	t.Parallel()
	s := start(t, "502:delay=200ms", nil)
	begin := time.Now()
	resp, _ := do(t, client(t, 0), s.URL+chatPath, bodies[chatPath])
	if d := time.Since(begin); resp.StatusCode != 502 || d < 200*time.Millisecond {
		t.Errorf("got %d after %v, want 502 after 200ms or more", resp.StatusCode, d)
	}
}

// Steps apply to requests in order; a count applies to that many, and
// the last step repeats.
func TestSequence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		want         []int
	}{
		// No script: always ok.
		{"none", "", []int{200, 200}},
		// A lone status repeats.
		{"one status", "503", []int{503, 503, 503}},
		// Counts, then the last step for good.
		{"counts", "502x3,429x2,ok", []int{502, 502, 502, 429, 429, 200, 200}},
		// A step without a count is one request.
		{"singles", "502,503,ok", []int{502, 503, 200, 200}},
		// The last step repeats even when it is a failure.
		{"ends failing", "ok,503", []int{200, 503, 503, 503}},
		// A count on the last step does not end it.
		{"count on the last", "ok,503x2", []int{200, 503, 503, 503}},
		// A window applies to every request during it; the rules for
		// when windows start and end are in TestScheduleWindows, in
		// virtual time.
		{"window", "502 for 1h,ok", []int{502, 502, 502}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.script, nil)
			c := client(t, 0)
			var got []int
			for range tc.want {
				resp, _ := do(t, c, s.URL+chatPath, bodies[chatPath])
				got = append(got, resp.StatusCode)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			n := map[string]int{}
			for _, code := range got {
				n[map[int]string{200: "ok", 429: "429", 502: "502", 503: "503"}[code]]++
			}
			if st := s.Stats(); st.Total != len(got) || !reflect.DeepEqual(st.Paths[chatPath], n) {
				t.Errorf("stats: got %+v, want %d requests, %v", st, len(got), n)
			}
		})
	}
}

// Stats count model requests by path and outcome, the same through the
// method and GET /mock/stats; the other endpoints are not counted.
func TestStats(t *testing.T) {
	t.Parallel()
	s := start(t, "502x2,reset,429:retry-after=1,ok", nil)
	c := client(t, 5*time.Second)
	do(t, c, s.URL+chatPath, bodies[chatPath])             // 502
	do(t, c, s.URL+messagesPath, bodies[messagesPath])     // 502
	post(c, s.URL+completionPath, bodies[completionPath])  // reset
	do(t, c, s.URL+completionPath, bodies[completionPath]) // 429
	do(t, c, s.URL+chatPath, bodies[chatPath])             // ok
	do(t, c, s.URL+chatPath, `not json`)                   // 400: ok cannot parse it
	do(t, c, s.URL+messagesPath, streamBody(messagesPath)) // ok
	for _, p := range []string{"/health", "/slots", "/mock/stats", "/nowhere"} {
		resp, err := c.Get(s.URL + p)
		if err == nil {
			resp.Body.Close()
		}
	}
	want := mockllm.Stats{Total: 7, Peak: 1, Paths: map[string]map[string]int{
		chatPath:       {"502": 1, "ok": 1, "400": 1},
		messagesPath:   {"502": 1, "ok": 1},
		completionPath: {"reset": 1, "429": 1},
	}}
	if got := s.Stats(); !reflect.DeepEqual(got, want) {
		t.Errorf("Stats: got %+v, want %+v", got, want)
	}
	if got := stats(t, c, s); !reflect.DeepEqual(got, want) {
		t.Errorf("GET /mock/stats: got %+v, want %+v", got, want)
	}
	resp, err := c.Get(s.URL + "/mock/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]json.RawMessage
	json.NewDecoder(resp.Body).Decode(&raw)
	if string(raw["total"]) != "7" || raw["paths"] == nil {
		t.Errorf("GET /mock/stats: got %v, want total and paths", raw)
	}
}

// Close ends stalled responses and returns; Start after Close fails.
func TestClose(t *testing.T) {
	t.Parallel()
	s := &mockllm.Server{Script: mockllm.MustParseScript("stall")}
	if err := s.Start(""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+chatPath, strings.NewReader(bodies[chatPath]))
	c := client(t, 0)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Close()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a response stalled")
	}
	s.Close()
	if err := s.Start(""); err == nil {
		t.Error("Start after Close: got nil, want an error")
	}
}

// first-token-delay sends the headers at once and then nothing, not even
// the events before the content, until the model would begin: then the
// answer as the fault says.
func TestFirstTokenDelay(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	for _, tc := range []struct {
		name, script string
		stream       bool
		chunks       int  // content events wanted
		whole        bool // a whole answer, ended as the API ends it
	}{
		// The whole answer, late, in a stream and in a body.
		{"ok stream", "ok:first-token-delay=300ms", true, 5, true},
		{"ok body", "ok:first-token-delay=300ms", false, 0, true},
		// A cut fault after the wait: its chunks, then its reset.
		{"reset-after", "reset-after=2:first-token-delay=300ms", true, 2, false},
		// A stream without its last event, late.
		{"no-done", "no-done:first-token-delay=300ms", true, 5, false},
	} {
		for _, path := range []string{chatPath, messagesPath, completionPath, responsesPath} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				s := start(t, tc.script, &mockllm.Server{Chunks: 5})
				body := bodies[path]
				if tc.stream {
					body = streamBody(path)
				}
				begin := time.Now()
				resp, err := post(client(t, 5*time.Second), s.URL+path, body)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if d := time.Since(begin); resp.StatusCode != 200 || d >= delay {
					t.Errorf("headers: got %d after %v, want 200 before %v", resp.StatusCode, d, delay)
				}
				br := bufio.NewReader(resp.Body)
				if _, err := br.Peek(1); err != nil {
					t.Fatalf("first byte: %v", err)
				}
				if d := time.Since(begin); d < delay {
					t.Errorf("first byte after %v, want %v or more", d, delay)
				}
				if !tc.stream {
					b, err := io.ReadAll(br)
					if err != nil || !json.Valid(b) || int64(len(b)) != resp.ContentLength {
						t.Errorf("got %q, %v; want a whole JSON body of Content-Length %d", b, err, resp.ContentLength)
					}
					return
				}
				evs, err := readEvents(br)
				if got := contentEvents(path, evs); got != tc.chunks {
					t.Errorf("got %d content events, want %d", got, tc.chunks)
				}
				if ended(path, evs) != tc.whole {
					t.Errorf("ended: got %v, want %v", !tc.whole, tc.whole)
				}
				if reset := errors.Is(err, syscall.ECONNRESET); err != nil && !reset || reset != (tc.name == "reset-after") {
					t.Errorf("got %v, want a reset for reset-after only, else a clean end", err)
				}
			})
		}
	}
}

// stall-after=N:resume=D pauses after N content chunks for D, then sends
// the rest and ends as a whole answer does.
func TestStallResume(t *testing.T) {
	t.Parallel()
	const pause = 300 * time.Millisecond
	for _, tc := range []struct {
		name, script string
	}{
		// A pause in the middle.
		{"middle", "stall-after=2:resume=300ms"},
		// A pause after all the content, before the end.
		{"past the end", "stall-after=9:resume=300ms"},
	} {
		for _, path := range []string{chatPath, messagesPath, completionPath, responsesPath} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				s := start(t, tc.script, &mockllm.Server{Chunks: 5})
				begin := time.Now()
				resp, err := post(client(t, 5*time.Second), s.URL+path, streamBody(path))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				evs, err := readEvents(resp.Body)
				if d := time.Since(begin); d < pause {
					t.Errorf("done after %v, want %v or more", d, pause)
				}
				if got := contentEvents(path, evs); err != nil || got != 5 || !ended(path, evs) {
					t.Errorf("got %d content events, ended %v, %v; want 5, ended, a clean end", got, ended(path, evs), err)
				}
			})
		}
	}
	// A body pauses after N of its parts, then ends whole.
	t.Run("body", func(t *testing.T) {
		t.Parallel()
		s := start(t, "stall-after=1:resume=300ms", &mockllm.Server{Chunks: 4})
		begin := time.Now()
		resp, b := do(t, client(t, 5*time.Second), s.URL+chatPath, bodies[chatPath])
		if d := time.Since(begin); resp.StatusCode != 200 || !json.Valid([]byte(b)) || d < pause {
			t.Errorf("got %d %q after %v, want 200 and a whole JSON body after %v or more", resp.StatusCode, b, d, pause)
		}
	})
}

// malformed-after=N sends N content chunks, then one event cut short
// inside its text, then the rest of the stream and its end.
func TestMalformedAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		before       int // content events before the malformed one
	}{
		// In the middle of the content.
		{"middle", "malformed-after=2", 2},
		// First of all, before any content.
		{"first", "malformed-after=0", 0},
		// After all the content, before the events that end the stream.
		{"past the end", "malformed-after=9", 5},
	} {
		for _, tp := range []struct{ path, suffix string }{
			{chatPath, `"delta":{"content":"`},
			{messagesPath, `{"delta":{"text":"`},
			{completionPath, `{"index":0,"content":"`},
		} {
			t.Run(tc.name+tp.path, func(t *testing.T) {
				t.Parallel()
				s := start(t, tc.script, &mockllm.Server{Chunks: 5})
				resp, err := post(client(t, 5*time.Second), s.URL+tp.path, streamBody(tp.path))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				evs, err := readEvents(resp.Body)
				if err != nil || !ended(tp.path, evs) || textOf(tp.path, evs) != "The quick brown fox jumps" {
					t.Errorf("got %q, ended %v, %v; want the whole text, ended cleanly", textOf(tp.path, evs), ended(tp.path, evs), err)
				}
				bad, before := malformed(tp.path, evs)
				if len(bad) != 1 || before != tc.before || !strings.HasSuffix(bad[0].data, tp.suffix) {
					t.Errorf("got malformed events %q after %d content events, want one ending in %s after %d", bad, before, tp.suffix, tc.before)
				}
				if tp.path == messagesPath && len(bad) == 1 && bad[0].name != "content_block_delta" {
					t.Errorf("event name: got %q, want content_block_delta", bad[0].name)
				}
			})
		}
	}
}

// A body under malformed-after=N is cut after N of its Chunks parts and
// ends cleanly, its Content-Length saying so: never whole, even past the
// end.
func TestMalformedAfterWhole(t *testing.T) {
	t.Parallel()
	full, size := wholeBody(t, 4)
	for _, tc := range []struct {
		script string
		n      int // bytes wanted
	}{
		{"malformed-after=1", size},
		{"malformed-after=0", 0},
		{"malformed-after=4", len(full) - 1}, // all but the last byte
	} {
		t.Run(tc.script, func(t *testing.T) {
			t.Parallel()
			s := start(t, tc.script, &mockllm.Server{Chunks: 4})
			resp, b := do(t, client(t, 5*time.Second), s.URL+chatPath, bodies[chatPath])
			if resp.StatusCode != 200 || len(b) != tc.n || resp.ContentLength != int64(tc.n) || json.Valid([]byte(b)) {
				t.Errorf("got %d, %d bytes (Content-Length %d): %q; want 200 and %d bytes of %q", resp.StatusCode, len(b), resp.ContentLength, b, tc.n, full)
			}
		})
	}
}

// no-done sends the whole stream, finish_reason and usage included, but
// not the event that ends it, and then ends the body cleanly.
func TestNoDone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, body string
		last       func(sse) bool // whether it is the last event wanted
	}{
		// OpenAI: the usage chunk, asked for, then no [DONE].
		{chatPath, strings.Replace(streamBody(chatPath), "{", `{"stream_options":{"include_usage":true},`, 1), func(e sse) bool {
			return strings.Contains(e.data, `"usage":{"prompt_tokens":2,"completion_tokens":5,"total_tokens":7}`)
		}},
		// Anthropic: message_delta with its stop_reason, then no
		// message_stop.
		{messagesPath, streamBody(messagesPath), func(e sse) bool {
			return e.name == "message_delta" && strings.Contains(e.data, `"stop_reason":"end_turn"`)
		}},
		// llama.cpp: the last content chunk, and no result with "stop".
		{completionPath, streamBody(completionPath), func(e sse) bool {
			c, ok := contentOf(completionPath, e)
			return ok && c == " jumps"
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			s := start(t, "no-done", &mockllm.Server{Chunks: 5})
			resp, err := post(client(t, 5*time.Second), s.URL+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			evs, err := readEvents(resp.Body)
			if err != nil || len(evs) == 0 || ended(tc.path, evs) || !tc.last(evs[len(evs)-1]) {
				t.Fatalf("got %v, %v; want a clean end after the last event but the one that ends the stream", evs, err)
			}
			if got := textOf(tc.path, evs); got != "The quick brown fox jumps" {
				t.Errorf("text: got %q, want the whole text", got)
			}
			if tc.path == chatPath && !strings.Contains(evs[len(evs)-2].data, `"finish_reason":"stop"`) {
				t.Errorf("got %s before the usage, want finish_reason stop", evs[len(evs)-2].data)
			}
		})
	}
	// A body has no event to leave out: it is whole.
	t.Run("body", func(t *testing.T) {
		t.Parallel()
		s := start(t, "no-done", nil)
		resp, b := do(t, client(t, 5*time.Second), s.URL+chatPath, bodies[chatPath])
		if resp.StatusCode != 200 || !json.Valid([]byte(b)) {
			t.Errorf("got %d %q, want 200 and a whole JSON body", resp.StatusCode, b)
		}
	})
}
