package timeline_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the start of the made-up requests.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// request makes a gateway record, as the gateway would hand it to an
// Observer.
func request(id, run string) *record.Request {
	return &record.Request{ID: id, Run: run, Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Model: "m", Start: t0}
}

// attempt makes attempt n of a request, started at t0+start and over
// after took, or in flight if took is 0, as the gateway records it: its
// class is outlast.Classify's, as the Transport sets it at the attempt's
// end.
func attempt(n int, start, took time.Duration, status int, err error) record.Attempt {
	a := outlast.Attempt{CallID: "call", N: n, Start: t0.Add(start), Status: status, Err: err}
	if took > 0 {
		a.End = a.Start.Add(took)
		a.Class = outlast.Classify(err)
	}
	return record.NewAttempt(a)
}

// serve starts an httptest server for the feed's endpoints behind a
// gateway whose upstream is up, and returns its URL and a channel that
// hears of each request's end after the feed does: a caller may read
// the last byte of a response before the gateway records it.
func serve(t *testing.T, feed *timeline.Feed, up string) (string, <-chan struct{}) {
	t.Helper()
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	done := make(chan struct{}, 100)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name:   "mock",
			URL:    u,
			Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}},
		}},
		Transport: tr,
		Logger:    slog.New(slog.DiscardHandler),
		Observer: record.Observers(feed.Observer(), record.Observer{
			Done: func(*record.Request) { done <- struct{}{} },
		}),
		Endpoints: feed.Endpoints(),
	})
	if err != nil {
		t.Fatal(err)
	}
	feed.SetLoads(g.Loads)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Cleanup(feed.Close) // before srv.Close: it ends the event streams
	return srv.URL, done
}

// await waits for n requests to end, for up to 10 seconds.
func await(t *testing.T, done <-chan struct{}, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("%d requests did not end in 10s", n)
		}
	}
}

// client returns an HTTP client whose idle connections are closed when
// the test ends, for goleak.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, target string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", target, err)
	}
	return resp, string(b)
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
}

// sseReader reads events, skipping comments and retry lines.
type sseReader struct{ r *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{bufio.NewReaderSize(r, 1<<16)} }

func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// nextNamed returns the next event named other than "upstreams", which
// comes whenever the slots change.
func (s *sseReader) nextNamed(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		if ev.name != "upstreams" {
			return ev
		}
	}
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %.200s: %v", s, err)
	}
	return v
}
