package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/server"
	"github.com/outlast-llm/outlast/tracing"
)

// failure is one way an attempt fails, through a real gateway: an
// upstream that fails so, and the class that every observer must show.
type failure struct {
	name      string
	handler   http.HandlerFunc // the upstream's; nil for one not on the network
	host      string           // for those: a host the test's transport fails
	header    map[string]string
	firstByte time.Duration
	stream    bool
	want      outlast.Class
}

// Each failure is classified once, where the attempt ends, and the
// journal's row, the metrics' outcome, the trace's attribute and the
// page's event all carry that one class.
func TestOneClassForEveryObserver(t *testing.T) {
	closed := closedAddr(t)
	failures := []failure{
		// The caller's own deadline, not the upstream's failure.
		{name: "caller-deadline", handler: hang, header: map[string]string{"Outlast-Timeout": "100ms"}, firstByte: time.Minute, want: outlast.ClassCanceled},
		{name: "refused", host: closed, want: outlast.ClassRefused},
		{name: "aborted", host: "aborted.test", want: outlast.ClassReset},
		{name: "reset", handler: reset, want: outlast.ClassReset},
		// Headers, then nothing: the first byte of the body never comes.
		{name: "stall", handler: headersOnly, firstByte: 100 * time.Millisecond, want: outlast.ClassStalled},
		// Nothing at all before the first-byte timeout.
		{name: "first-byte-timeout", handler: hang, firstByte: 100 * time.Millisecond, want: outlast.ClassStalled},
		// The transport's own header timeout is the server's failure.
		{name: "header-timeout", host: "slow-headers.test", want: outlast.ClassTimeout},
		{name: "error-event", handler: errorEvent, firstByte: time.Minute, stream: true, want: outlast.ClassErrorEvent},
		{name: "rate-limited", handler: status(429), want: outlast.ClassRateLimited},
		{name: "overloaded", handler: status(529), want: outlast.ClassOverloaded},
		{name: "server-error", handler: status(503), want: outlast.ClassStatus5xx},
		{name: "not-found", handler: status(404), want: outlast.ClassStatus4xx},
	}
	slow := httptest.NewServer(http.HandlerFunc(hang))
	t.Cleanup(slow.Close)
	var ups []gateway.Upstream
	for _, f := range failures {
		host := f.host
		if f.handler != nil {
			s := httptest.NewServer(f.handler)
			t.Cleanup(s.Close)
			host = strings.TrimPrefix(s.URL, "http://")
		}
		if host == "slow-headers.test" {
			host = strings.TrimPrefix(slow.URL, "http://")
		}
		ups = append(ups, gateway.Upstream{
			Name: f.name, Prefix: "/" + f.name, URL: &url.URL{Scheme: "http", Host: host},
			Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}, FirstByteTimeout: f.firstByte,
		})
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	var mu sync.Mutex
	done := map[string]chan struct{}{}
	doneOf := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if done[id] == nil {
			done[id] = make(chan struct{})
		}
		return done[id]
	}
	srv, err := server.New(t.Context(), server.Config{
		Gateway:       gateway.Config{Upstreams: ups, Transport: failingTransport(t, slow.URL)},
		Journal:       "sqlite:" + filepath.Join(t.TempDir(), "j.db"),
		JournalWriter: server.WriterInline,
		Tracer:        tracing.New(tp),
		Observer:      record.Observer{Done: func(r *record.Request) { close(doneOf(r.ID)) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	front := httptest.NewServer(srv)
	t.Cleanup(front.Close)

	ids := map[string]string{}
	for _, f := range failures {
		body := `{"model":"m"}`
		if f.stream {
			body = `{"model":"m","stream":true}`
		}
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/"+f.name+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Outlast-Retry", "off") // one attempt, one class
		for k, v := range f.header {
			req.Header.Set(k, v)
		}
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ids[f.name] = resp.Header.Get("Outlast-Request-Id")
		select {
		case <-doneOf(ids[f.name]):
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: request %q not done 10s after its answer", f.name, ids[f.name])
		}
	}
	if err := srv.Writer.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	outcomes := scrapeOutcomes(t, srv)
	page := map[string]string{}
	for _, r := range srv.Feed.Snapshot().Requests {
		if len(r.Attempts) == 1 {
			page[r.ID] = r.Attempts[0].Error
		}
	}
	traced := attemptClasses(spans)
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			id := ids[f.name]
			rec, err := srv.Store.Get(t.Context(), id)
			if err != nil || len(rec.Attempts) != 1 {
				t.Fatalf("the journal's row: %+v, %v; want one attempt", rec, err)
			}
			want := f.want.String()
			got := map[string]string{
				"journal": rec.Attempts[0].Class.String(),
				"metrics": outcomes[f.name],
				"trace":   traced[id],
				"page":    page[id],
			}
			for observer, class := range got {
				if class != want {
					t.Errorf("%s: got class %q, want %q (all: %v)", observer, class, want, got)
				}
			}
		})
	}
}

// failingTransport sends to the network, but for aborted.test, whose
// connection the kernel aborts (ECONNABORTED, which a real upstream cannot
// be made to cause), and for the slow upstream, whose headers it waits
// for only 100 ms.
func failingTransport(t *testing.T, slow string) http.RoundTripper {
	base := &http.Transport{}
	slowHeaders := &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}
	t.Cleanup(base.CloseIdleConnections)
	t.Cleanup(slowHeaders.CloseIdleConnections)
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		switch {
		case r.URL.Host == "aborted.test":
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNABORTED)}
		case "http://"+r.URL.Host == slow:
			return slowHeaders.RoundTrip(r)
		}
		return base.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// scrapeOutcomes returns, per upstream, the outcome label of the one
// attempt that outlast_attempts_total counted.
func scrapeOutcomes(t *testing.T, srv *server.Server) map[string]string {
	t.Helper()
	w := httptest.NewRecorder()
	srv.Metrics.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/outlast/metrics", nil))
	out := map[string]string{}
	lines := bufio.NewScanner(strings.NewReader(w.Body.String()))
	for lines.Scan() {
		var outcome, upstream string
		var n float64
		line := strings.NewReplacer(`{outcome="`, " ", `",upstream="`, " ", `"} `, " ").Replace(lines.Text())
		if _, err := fmt.Sscanf(line, "outlast_attempts_total %s %s %g", &outcome, &upstream, &n); err != nil || n == 0 {
			continue
		}
		if n != 1 || out[upstream] != "" {
			t.Errorf("upstream %s: %v attempts counted as %s, and %q before; want one attempt", upstream, n, outcome, out[upstream])
		}
		out[upstream] = outcome
	}
	return out
}

// attemptClasses returns the outlast.attempt.class of each request's
// attempt span, by request ID.
func attemptClasses(spans *tracetest.SpanRecorder) map[string]string {
	requests := map[string]string{} // span ID → request ID
	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "outlast.request.id" {
				requests[s.SpanContext().SpanID().String()] = kv.Value.AsString()
			}
		}
	}
	out := map[string]string{}
	for _, s := range spans.Ended() {
		if s.Name() != "outlast.attempt" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "outlast.attempt.class" {
				out[requests[s.Parent().SpanID().String()]] = kv.Value.AsString()
			}
		}
	}
	return out
}

// closedAddr returns an address that refuses connections: nothing
// listens on port 1, and no listener on port 0 is given it. A port just
// closed would not do: a parallel test's listener can be given it.
func closedAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:1"
}

// hang answers nothing until the request ends. It reads the body first:
// the HTTP/1 server notices a client gone only once the body is read.
func hang(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

// headersOnly sends its headers, and then nothing.
func headersOnly(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// reset closes the connection with a TCP reset before answering.
func reset(w http.ResponseWriter, r *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// errorEvent opens a 200 event stream with Anthropic's overload.
func errorEvent(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
}

func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, `{"error":{"message":"failed"}}`)
	}
}
