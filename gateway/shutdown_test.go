package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// served is a gateway run by Serve, as outlast serve runs it, whose
// shutdown the test starts by calling stop.
type served struct {
	base    string
	stop    context.CancelFunc
	done    chan error // Serve's result
	records chan record.Request
	sent    chan record.Attempt // each attempt's start
	ended   chan record.Attempt // each attempt's end

	once sync.Once
	err  error
}

func serveFor(t *testing.T, up *upstream, grace time.Duration, change func(*gateway.Upstream)) *served {
	t.Helper()
	s := &served{done: make(chan error, 1), records: make(chan record.Request, 16), sent: make(chan record.Attempt, 16), ended: make(chan record.Attempt, 16)}
	u, _ := url.Parse(up.URL)
	cfg := gateway.Upstream{URL: u}
	if change != nil {
		change(&cfg)
	}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{cfg},
		Logger:    slog.New(slog.DiscardHandler),
		Observer: record.Observer{
			AttemptStart: func(_ *record.Request, a record.Attempt) { s.sent <- a },
			AttemptEnd:   func(_ *record.Request, a record.Attempt) { s.ended <- a },
			Done:         func(r *record.Request) { s.records <- *r },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.base = "http://" + l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- gateway.Serve(ctx, l, g, gateway.ServerConfig{Grace: grace}) }()
	t.Cleanup(func() {
		cancel()
		if err := s.served(t); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// served waits for Serve to return, failing the test after 30 s.
func (s *served) served(t *testing.T) error {
	t.Helper()
	s.once.Do(func() { s.err = wait(t, s.done, "Serve's return") })
	return s.err
}

// record waits for the request's record, failing the test after 30 s.
func (s *served) record(t *testing.T) record.Request {
	t.Helper()
	select {
	case r := <-s.records:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no record in 30s")
		return record.Request{}
	}
}

// callAnswer is what a caller got.
type callAnswer struct {
	resp *http.Response
	body string
	err  error // sending, or reading the body
}

// call sends a chat request in the background, and returns where its
// answer comes.
func call(t *testing.T, target, body string) chan callAnswer {
	t.Helper()
	answers := make(chan callAnswer, 1)
	go func() {
		resp, err := http.Post(target, "application/json", strings.NewReader(body))
		if err != nil {
			answers <- callAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answers <- callAnswer{resp, string(b), err}
	}()
	return answers
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s in 30s", what)
		var zero T
		return zero
	}
}

// A request waiting between attempts when the shutdown starts gets its
// last attempt's error at once, as a JSON 503 with Outlast-Error:
// shutdown, and not after the wait or the grace period: both are an hour
// here, so that the test would hang without it.
func TestShutdownEndsWaitAtOnce(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503, `{"error":"overloaded"}`))
	s := serveFor(t, up, time.Hour, func(u *gateway.Upstream) {
		u.Policy = &outlast.Policy{Waits: []time.Duration{time.Hour}, MaxAttempts: 3}
	})
	answers := call(t, s.base+"/v1/chat/completions", chat)
	if a := wait(t, s.ended, "first attempt"); a.RetryIn != time.Hour {
		t.Fatalf("the first attempt ended with retry in %v, want the hour's wait", a.RetryIn)
	}
	s.stop()
	a := wait(t, answers, "answer")
	if a.err != nil {
		t.Fatal(a.err)
	}
	var e errorShape
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("the body %q is not the error shape: %v", a.body, err)
	}
	if a.resp.StatusCode != 503 || a.resp.Header.Get("Outlast-Error") != "shutdown" || !strings.Contains(e.Error.Message, "503") {
		t.Errorf("got %d, Outlast-Error %q, %q; want 503 shutdown naming the last attempt's 503", a.resp.StatusCode, a.resp.Header.Get("Outlast-Error"), a.body)
	}
	r := s.record(t)
	if r.Status != 503 || r.Error != "shutdown" || len(r.Attempts) != 1 || up.attempts() != 1 {
		t.Errorf("recorded %d %q with %d attempts, the upstream saw %d; want 503 shutdown after the one attempt", r.Status, r.Error, len(r.Attempts), up.attempts())
	}
	if err := s.served(t); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// At the end of the grace period, a request still in flight gets one
// final, well-formed error, recorded as shutdown and not as the caller's
// 499: a JSON 503 when nothing was sent yet, an error event when a stream
// was under way. A body that is not a stream is held until it is whole,
// so one under way gets the JSON 503 too.
func TestShutdownAtGraceEnd(t *testing.T) {
	t.Parallel()
	// partial sends the start of an answer, and then nothing until the
	// request ends.
	wrote := make(chan struct{}, 1)
	partial := func(contentType, start string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			io.WriteString(w, start)
			w.(http.Flusher).Flush()
			wrote <- struct{}{}
			<-r.Context().Done()
		}
	}
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		body    string
		started bool // the upstream has begun its answer before the shutdown
		check   func(t *testing.T, a callAnswer)
	}{
		{"nothing sent yet", hang, chat, false, func(t *testing.T, a callAnswer) {
			if a.err != nil {
				t.Fatalf("got %v, want a JSON 503 shutdown", a.err)
			}
			if a.resp.StatusCode != 503 || a.resp.Header.Get("Outlast-Error") != "shutdown" || !strings.Contains(a.body, `"outlast_shutdown"`) || !strings.Contains(a.body, "stopped before it answered") {
				t.Errorf("got %v %q, error %v; want a JSON 503 shutdown", a.resp.Status, a.body, a.err)
			}
		}},
		{"a stream under way", partial("text/event-stream", "data: {\"n\":1}\n\n"), `{"model":"m","stream":true}`, true, func(t *testing.T, a callAnswer) {
			if a.err != nil || a.resp.StatusCode != 200 {
				t.Fatalf("got %v, error %v; want the stream's 200, whole", a.resp, a.err)
			}
			sc := bufio.NewScanner(strings.NewReader(a.body))
			var events []string
			for sc.Scan() {
				if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					events = append(events, e)
				}
			}
			if !strings.HasPrefix(a.body, "data: {\"n\":1}\n\n") || strings.Join(events, ",") != "error" || !strings.Contains(a.body, "shutting down") || !strings.HasSuffix(a.body, "\n\n") {
				t.Errorf("got %q; want the first event, then one error event saying the gateway is shutting down", a.body)
			}
		}},
		{"a body under way", partial("application/json", `{"choices":[`), chat, true, func(t *testing.T, a callAnswer) {
			// Nothing of it reached the caller, which gets the shutdown's
			// answer, never a part of the body.
			if a.err != nil || a.resp.StatusCode != 503 || a.resp.Header.Get("Outlast-Error") != "shutdown" || strings.Contains(a.body, "choices") {
				t.Errorf("got %v %q, error %v; want a JSON 503 shutdown and none of the body", a.resp, a.body, a.err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { // in turn: they share wrote
			up := newUpstream(t, c.handler)
			s := serveFor(t, up, 100*time.Millisecond, nil)
			answers := call(t, s.base+"/v1/chat/completions", c.body)
			if c.started {
				wait(t, wrote, "the upstream's first bytes")
			} else {
				wait(t, s.sent, "the attempt's start")
			}
			s.stop()
			c.check(t, wait(t, answers, "answer"))
			r := s.record(t)
			if r.Status != 503 || r.Error != "shutdown" {
				t.Errorf("recorded %d %q, want 503 shutdown", r.Status, r.Error)
			}
		})
	}
}
