package tracing_test

import (
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
	"github.com/outlast-llm/outlast/record"
)

// flaky is an upstream that answers its first request with a 503 and
// every later one with a 200.
func flaky() http.Handler {
	var n atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"choices":[]}`)
	})
}

func TestGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		upstream     http.Handler
		wantStatus   int
		wantAttempts int
	}{
		// The case, end to end: a 503 retried into a 200 is one
		// request span over two attempt spans.
		{"fails once", flaky(), 200, 2},
		// A request that needs no retry has one attempt span.
		{"first try", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }), 200, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, sr := newRecorded(t)
			up := httptest.NewServer(tt.upstream)
			t.Cleanup(up.Close)
			u, err := url.Parse(up.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The gateway may answer before Done runs; done says the
			// tracer has seen the request, since Observers calls in order.
			done := make(chan struct{}, 1)
			g, err := gateway.New(gateway.Config{
				Upstreams: []gateway.Upstream{{Name: "llm", URL: u, Policy: &outlast.Policy{Waits: []time.Duration{5 * time.Millisecond}}}},
				Logger:    slog.New(slog.DiscardHandler),
				Observer:  record.Observers(tr.Observer(), record.Observer{Done: func(*record.Request) { done <- struct{}{} }}),
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g)
			t.Cleanup(srv.Close)

			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m-1"}`))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			<-done

			spans := byLabel(t, sr.Ended())
			req, ok := spans["request"]
			if !ok {
				t.Fatalf("got spans %q, want a request span", labels(spans))
			}
			if got := len(spans) - 1; got != tt.wantAttempts {
				t.Errorf("got %d attempt spans (%q), want %d", got, labels(spans), tt.wantAttempts)
			}
			for l, s := range spans {
				if l != "request" && s.Parent().SpanID() != req.SpanContext().SpanID() {
					t.Errorf("%s: got parent %v, want the request span %v", l, s.Parent().SpanID(), req.SpanContext().SpanID())
				}
			}
			a := attrs(req.Attributes())
			if a["outlast.request.id"] != resp.Header.Get("Outlast-Request-Id") || a["gen_ai.request.model"] != "m-1" {
				t.Errorf("got request id %v, model %v, want %s, m-1", a["outlast.request.id"], a["gen_ai.request.model"], resp.Header.Get("Outlast-Request-Id"))
			}
			if got := len(req.Events()); got != tt.wantAttempts-1 {
				t.Errorf("got %d wait events, want %d", got, tt.wantAttempts-1)
			}
		})
	}
}
