package gateway_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// The observers hear of the answered attempt's end once the answer's
// first bytes have been flushed to the caller (its status line alone, for
// an empty one), so that what they do does not delay it; the calls still
// come in order, and a failed attempt's end is told at once.
func TestAnswerEndToldOnceSent(t *testing.T) {
	const stream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	for _, c := range []struct {
		name   string
		answer func() *http.Response
		body   bool // the answer has a body, whose first bytes go before its end is told
	}{
		{"a whole answer", answer(200, "application/json", `{"choices":[]}`), true},
		{"a stream", answer(200, "text/event-stream", stream), true},
		{"an empty answer", answer(204, "application/json", ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := httptest.NewRecorder()
				var events []string
				obs := record.Observer{
					AttemptStart: func(_ *record.Request, a record.Attempt) {
						events = append(events, fmt.Sprintf("start %d", a.N))
					},
					AttemptEnd: func(_ *record.Request, a record.Attempt) {
						// The observer runs in the goroutine that serves
						// the request, which alone writes to w.
						events = append(events, fmt.Sprintf("end %d %d flushed=%v body=%v", a.N, a.Status, w.Flushed, w.Body.Len() > 0))
					},
					Done: func(r *record.Request) { events = append(events, fmt.Sprintf("done %d", r.Status)) },
				}
				f := &fakeUpstream{delay: time.Second, script: []func() *http.Response{
					answer(503, "application/json", `{"error":"down"}`), c.answer,
				}}
				g := observedGateway(t, f, &outlast.Policy{Waits: []time.Duration{time.Second}}, obs)
				g.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat)))
				code := c.answer().StatusCode
				want := []string{
					"start 1",
					"end 1 503 flushed=false body=false", // a failure: told at once
					"start 2",
					fmt.Sprintf("end 2 %d flushed=true body=%v", code, c.body),
					fmt.Sprintf("done %d", code),
				}
				if !slices.Equal(events, want) {
					t.Errorf("observers were told\n%s\nwant\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
				}
			})
		})
	}
}

// A stream's continuation, which answers in place of the stream that
// broke, is told of as the first answer was: with its first bytes, not
// at the request's end.
func TestContinuationEndToldOnceSent(t *testing.T) {
	t.Parallel()
	m := mock(t, "reset-after=20,ok")
	target, _ := url.Parse(m.URL)
	var mu sync.Mutex
	var ends []string
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			URL: target, FirstByteTimeout: 10 * time.Second, Continuation: gateway.ContinuePrefill,
			Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}, MaxAttempts: 3},
		}},
		Logger: slog.New(slog.DiscardHandler),
		Observer: record.Observer{AttemptEnd: func(r *record.Request, a record.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			// r.End is set only once the request is done.
			ends = append(ends, fmt.Sprintf("%d %d continued=%v done=%v", a.N, a.Status, a.Continued, !r.End.IsZero()))
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	s := postStream(t, srv.URL+"/v1/chat/completions", openAIStream, nil)
	if text, _, _, _, _ := s.openAIText(); text != whole {
		t.Fatalf("got %q, want the whole answer", text)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"1 200 continued=false done=false", "2 200 continued=true done=false"}
	if !slices.Equal(ends, want) {
		t.Errorf("attempt ends told: %q, want %q", ends, want)
	}
}
