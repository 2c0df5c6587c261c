package tracing_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/tracing"
)

// wantSpan is a span a request should produce, keyed by its label.
type wantSpan struct {
	name   string
	kind   trace.SpanKind
	parent string // the parent's label, or "" for a root span
	start  time.Time
	end    time.Time
	attrs  map[string]any
	status codes.Code
	events []wantEvent
}

type wantEvent struct {
	name  string
	at    time.Time
	attrs map[string]any
}

// retried is a streaming request whose first attempt got a 503 and waited
// 1.5 s, and whose second got a 200.
func retried() record.Request {
	return record.Request{
		ID: "req-1", Run: "run-1", Method: "POST", Path: "/v1/chat/completions",
		Upstream: "llm", Slot: "slot 0", Model: "m-1",
		Start: at(0), End: at(2000), Status: 200,
		Stream: true, Committed: true, Bytes: 42,
		Attempts: []record.Attempt{
			attempt(outlast.Attempt{
				CallID: "call-1", N: 1, Key: "slot 0", Ahead: 2, GateWait: 5 * time.Millisecond,
				Start: at(10), End: at(250), Status: 503,
				Err:        &outlast.StatusError{StatusCode: 503, RetryAfter: time.Second},
				RetryAfter: time.Second, RetryIn: 1500 * time.Millisecond,
			}),
			attempt(outlast.Attempt{CallID: "call-2", N: 2, Key: "slot 0", Start: at(1750), End: at(1900), Status: 200}),
		},
	}
}

func TestSpans(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  record.Request
		want map[string]wantSpan
	}{
		// The case: one request span, a child per attempt, each at
		// its own times, and the wait as an event at the 503's end.
		{"retried 503 into 200", retried(), map[string]wantSpan{
			"request": {
				name: "outlast.request", kind: trace.SpanKindServer,
				start: at(0), end: at(2000), status: codes.Unset,
				attrs: map[string]any{
					"http.request.method": "POST", "url.path": "/v1/chat/completions",
					"outlast.request.id": "req-1", "outlast.run": "run-1",
					"outlast.upstream": "llm", "outlast.slot": "slot 0",
					"gen_ai.request.model": "m-1", "http.response.status_code": int64(200),
					"http.response.body.size": int64(42), "outlast.attempts": int64(2),
					"outlast.stream": true, "outlast.committed": true,
				},
				events: []wantEvent{{"outlast.retry_wait", at(250), map[string]any{
					"outlast.attempt.n": int64(1), "outlast.retry_in_ms": 1500.0, "outlast.retry_after_ms": 1000.0,
				}}},
			},
			"attempt 1": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(10), end: at(250), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "POST", "outlast.attempt.n": int64(1), "outlast.call_id": "call-1",
					"http.response.status_code": int64(503),
					"outlast.attempt.class":     "status_5xx", "error.type": "503",
					"outlast.gate.key": "slot 0", "outlast.gate.ahead": int64(2), "outlast.gate.wait_ms": 5.0,
				},
				events: []wantEvent{{"exception", at(250), map[string]any{
					"exception.type":    "status_5xx",
					"exception.message": "outlast: status 503 Service Unavailable (retry after 1s)",
				}}},
			},
			"attempt 2": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(1750), end: at(1900), status: codes.Unset,
				attrs: map[string]any{
					"http.request.method": "POST", "outlast.attempt.n": int64(2), "outlast.call_id": "call-2",
					"http.response.status_code": int64(200),
					"outlast.gate.key":          "slot 0", "outlast.gate.ahead": int64(0), "outlast.gate.wait_ms": 0.0,
				},
			},
		}},
		// A gate that refused the request: no attempt was sent, so there is
		// no child, and the gateway's own 503 marks the span failed.
		{"busy", record.Request{
			ID: "req-2", Method: "POST", Path: "/v1/completions", Upstream: "llama",
			Start: at(0), End: at(1), Status: 503, Error: "busy",
		}, map[string]wantSpan{
			"request": {
				name: "outlast.request", kind: trace.SpanKindServer,
				start: at(0), end: at(1), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "POST", "url.path": "/v1/completions",
					"outlast.request.id": "req-2", "outlast.upstream": "llama",
					"http.response.status_code": int64(503), "outlast.error": "busy", "error.type": "busy",
					"http.response.body.size": int64(0), "outlast.attempts": int64(0),
					"outlast.stream": false, "outlast.committed": false,
				},
			},
		}},
		// An upstream 500 passed through after the retries ran out: the
		// gateway made no response, but the caller got a server error.
		{"upstream 500 returned", record.Request{
			ID: "req-3", Method: "GET", Path: "/v1/models", Upstream: "llm",
			Start: at(0), End: at(30), Status: 500,
			Attempts: []record.Attempt{attempt(outlast.Attempt{N: 1, Start: at(1), End: at(29), Status: 500, Err: &outlast.StatusError{StatusCode: 500}})},
		}, map[string]wantSpan{
			"request": {
				name: "outlast.request", kind: trace.SpanKindServer,
				start: at(0), end: at(30), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "GET", "url.path": "/v1/models",
					"outlast.request.id": "req-3", "outlast.upstream": "llm",
					"http.response.status_code": int64(500), "error.type": "500",
					"http.response.body.size": int64(0), "outlast.attempts": int64(1),
					"outlast.stream": false, "outlast.committed": false,
				},
			},
			"attempt 1": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(1), end: at(29), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "GET", "outlast.attempt.n": int64(1),
					"http.response.status_code": int64(500),
					"outlast.attempt.class":     "status_5xx", "error.type": "500",
					"outlast.gate.ahead": int64(0), "outlast.gate.wait_ms": 0.0,
				},
				events: []wantEvent{{"exception", at(29), map[string]any{
					"exception.type":    "status_5xx",
					"exception.message": "outlast: status 500 Internal Server Error",
				}}},
			},
		}},
		// A 404 is the caller's mistake: its attempt failed, as a client
		// span's 4xx does, but the server span did not.
		{"upstream 404", record.Request{
			ID: "req-4", Method: "GET", Path: "/v1/nope", Upstream: "llm",
			Start: at(0), End: at(3), Status: 404,
			Attempts: []record.Attempt{attempt(outlast.Attempt{N: 1, Start: at(1), End: at(2), Status: 404})},
		}, map[string]wantSpan{
			"request": {
				name: "outlast.request", kind: trace.SpanKindServer,
				start: at(0), end: at(3), status: codes.Unset,
				attrs: map[string]any{
					"http.request.method": "GET", "url.path": "/v1/nope",
					"outlast.request.id": "req-4", "outlast.upstream": "llm",
					"http.response.status_code": int64(404),
					"http.response.body.size":   int64(0), "outlast.attempts": int64(1),
					"outlast.stream": false, "outlast.committed": false,
				},
			},
			"attempt 1": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(1), end: at(2), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "GET", "outlast.attempt.n": int64(1),
					"http.response.status_code": int64(404), "error.type": "404",
					"outlast.gate.ahead": int64(0), "outlast.gate.wait_ms": 0.0,
				},
			},
		}},
		// An attempt that waited for its upstream, down, and was its
		// probe: the wait and the mark; an attempt that met neither has
		// neither attribute.
		{"admission probe", record.Request{
			ID: "req-5", Method: "POST", Path: "/v1/messages", Upstream: "llm",
			Start: at(0), End: at(2000), Status: 200,
			Attempts: []record.Attempt{
				attempt(outlast.Attempt{N: 1, Start: at(1), End: at(2), Status: 503, Err: &outlast.StatusError{StatusCode: 503}, RetryIn: 10 * time.Millisecond}),
				attempt(outlast.Attempt{N: 2, Start: at(1512), End: at(1900), Status: 200, AdmissionWait: 1500 * time.Millisecond, Probe: true}),
			},
		}, map[string]wantSpan{
			"request": {
				name: "outlast.request", kind: trace.SpanKindServer,
				start: at(0), end: at(2000), status: codes.Unset,
				attrs: map[string]any{
					"http.request.method": "POST", "url.path": "/v1/messages",
					"outlast.request.id": "req-5", "outlast.upstream": "llm",
					"http.response.status_code": int64(200),
					"http.response.body.size":   int64(0), "outlast.attempts": int64(2),
					"outlast.stream": false, "outlast.committed": false,
				},
				events: []wantEvent{{"outlast.retry_wait", at(2), map[string]any{
					"outlast.attempt.n": int64(1), "outlast.retry_in_ms": 10.0, "outlast.retry_after_ms": 0.0,
				}}},
			},
			"attempt 1": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(1), end: at(2), status: codes.Error,
				attrs: map[string]any{
					"http.request.method": "POST", "outlast.attempt.n": int64(1),
					"http.response.status_code": int64(503),
					"outlast.attempt.class":     "status_5xx", "error.type": "503",
					"outlast.gate.ahead": int64(0), "outlast.gate.wait_ms": 0.0,
				},
				events: []wantEvent{{"exception", at(2), map[string]any{
					"exception.type":    "status_5xx",
					"exception.message": "outlast: status 503 Service Unavailable",
				}}},
			},
			"attempt 2": {
				name: "outlast.attempt", kind: trace.SpanKindClient, parent: "request",
				start: at(1512), end: at(1900), status: codes.Unset,
				attrs: map[string]any{
					"http.request.method": "POST", "outlast.attempt.n": int64(2),
					"http.response.status_code": int64(200),
					"outlast.admission.wait_ms": 1500.0, "outlast.attempt.probe": true,
					"outlast.gate.ahead": int64(0), "outlast.gate.wait_ms": 0.0,
				},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, sr := newRecorded(t)
			tr.Observer().Done(&tt.req)
			got := byLabel(t, sr.Ended())
			if g, w := labels(got), labels(tt.want); fmt.Sprint(g) != fmt.Sprint(w) {
				t.Fatalf("got spans %q, want %q", g, w)
			}
			for l, w := range tt.want {
				checkSpan(t, l, got, w)
			}
		})
	}
}

// checkSpan compares the span labeled l in got with want.
func checkSpan(t *testing.T, l string, got map[string]sdktrace.ReadOnlySpan, want wantSpan) {
	t.Helper()
	s := got[l]
	if s.Name() != want.name || s.SpanKind() != want.kind {
		t.Errorf("%s: got %s (%v), want %s (%v)", l, s.Name(), s.SpanKind(), want.name, want.kind)
	}
	if !s.StartTime().Equal(want.start) || !s.EndTime().Equal(want.end) {
		t.Errorf("%s: got times %v–%v, want %v–%v", l, s.StartTime(), s.EndTime(), want.start, want.end)
	}
	if s.Status().Code != want.status {
		t.Errorf("%s: got status %v (%q), want %v", l, s.Status().Code, s.Status().Description, want.status)
	}
	checkParent(t, l, s, got, want.parent)
	diffAttrs(t, l, attrs(s.Attributes()), want.attrs)
	evs := s.Events()
	if len(evs) != len(want.events) {
		t.Fatalf("%s: got %d events, want %d: %v", l, len(evs), len(want.events), evs)
	}
	for i, w := range want.events {
		what := fmt.Sprintf("%s: event %d", l, i)
		if evs[i].Name != w.name || !evs[i].Time.Equal(w.at) {
			t.Errorf("%s: got %s at %v, want %s at %v", what, evs[i].Name, evs[i].Time, w.name, w.at)
		}
		diffAttrs(t, what, attrs(evs[i].Attributes), w.attrs)
	}
}

func checkParent(t *testing.T, l string, s sdktrace.ReadOnlySpan, got map[string]sdktrace.ReadOnlySpan, parent string) {
	t.Helper()
	if parent == "" {
		if s.Parent().IsValid() {
			t.Errorf("%s: got parent %v, want a root span", l, s.Parent().SpanID())
		}
		return
	}
	p := got[parent].SpanContext()
	if s.Parent().SpanID() != p.SpanID() || s.SpanContext().TraceID() != p.TraceID() {
		t.Errorf("%s: got parent %v in trace %v, want %s's %v in trace %v",
			l, s.Parent().SpanID(), s.SpanContext().TraceID(), parent, p.SpanID(), p.TraceID())
	}
}

// TestErrorType checks an attempt span's class and error.type: both are
// the record's class, which the tracer never judges again, except that
// error.type names a failed status by its code, as OpenTelemetry's HTTP
// conventions ask, and other by OpenTelemetry's fallback. Which error is
// which class is outlast.Classify's to say.
func TestErrorType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		class     outlast.Class
		status    int
		want      string // "" for no error.type at all
		wantClass string // "" for no outlast.attempt.class at all
	}{
		// A success has no error.type and no class.
		{"ok", outlast.ClassNone, 200, "", ""},
		// A failed status the policy returned unjudged is named by its
		// code, as OpenTelemetry's HTTP conventions ask.
		{"status without error", outlast.ClassNone, 404, "404", ""},
		// The four status classes are named by their codes.
		{"rate limited", outlast.ClassRateLimited, 429, "429", "rate_limited"},
		{"overloaded", outlast.ClassOverloaded, 529, "529", "overloaded"},
		{"status 4xx", outlast.ClassStatus4xx, 404, "404", "status_4xx"},
		{"status 5xx", outlast.ClassStatus5xx, 503, "503", "status_5xx"},
		// An error event comes with a status; it must not read as one.
		{"error event", outlast.ClassErrorEvent, 200, "error_event", "error_event"},
		{"error event on a 529", outlast.ClassErrorEvent, 529, "error_event", "error_event"},
		// Every other class is named by itself.
		{"busy", outlast.ClassBusy, 0, "busy", "busy"},
		{"stalled", outlast.ClassStalled, 0, "stalled", "stalled"},
		{"closed early", outlast.ClassClosedEarly, 0, "closed_early", "closed_early"},
		{"canceled", outlast.ClassCanceled, 0, "canceled", "canceled"},
		{"refused", outlast.ClassRefused, 0, "refused", "refused"},
		{"reset", outlast.ClassReset, 0, "reset", "reset"},
		{"timeout", outlast.ClassTimeout, 0, "timeout", "timeout"},
		// Anything else takes OpenTelemetry's fallback value.
		{"other", outlast.ClassOther, 0, "_OTHER", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, sr := newRecorded(t)
			tr.Observer().Done(&record.Request{
				Method: "POST", Start: at(0), End: at(10), Status: 502,
				Attempts: []record.Attempt{{N: 1, Start: at(1), End: at(9), Status: tt.status, Class: tt.class, Error: "boom"}},
			})
			a, ok := byLabel(t, sr.Ended())["attempt 1"]
			if !ok {
				t.Fatal("got no attempt span, want one")
			}
			for _, c := range []struct{ key, want string }{{"error.type", tt.want}, {"outlast.attempt.class", tt.wantClass}} {
				got, has := attrs(a.Attributes())[c.key]
				switch {
				case c.want == "" && has:
					t.Errorf("got %s %q, want none", c.key, got)
				case c.want != "" && got != c.want:
					t.Errorf("got %s %v, want %q", c.key, got, c.want)
				}
			}
			// A failure's exception is typed by its class and carries the
			// record's message as it is.
			var exc map[string]any
			for _, e := range a.Events() {
				if e.Name == "exception" {
					exc = attrs(e.Attributes)
				}
			}
			switch {
			case tt.class == outlast.ClassNone && exc != nil:
				t.Errorf("got exception %v, want none", exc)
			case tt.class != outlast.ClassNone && (exc["exception.type"] != tt.class.String() || exc["exception.message"] != "boom"):
				t.Errorf("got exception %v, want type %q and message boom", exc, tt.class)
			}
		})
	}
}

func TestTraceparent(t *testing.T) {
	t.Parallel()
	// A caller that sent a W3C traceparent finds the request in its own
	// trace, under its own span.
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tr, sr := newRecorded(t)
	r := retried()
	r.Header = http.Header{"Traceparent": {"00-" + traceID + "-" + spanID + "-01"}}
	tr.Observer().Done(&r)
	req := byLabel(t, sr.Ended())["request"]
	if got := req.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("got trace %s, want %s", got, traceID)
	}
	if got := req.Parent(); got.SpanID().String() != spanID || !got.IsRemote() {
		t.Errorf("got parent %v (remote %v), want the caller's %s", got.SpanID(), got.IsRemote(), spanID)
	}
}

func TestNilTracer(t *testing.T) {
	t.Parallel()
	// FromEnv's nil, tracing off, must be safe to wire in unchecked.
	var tr *tracing.Tracer
	if o := tr.Observer(); o.Done != nil || o.AttemptEnd != nil || o.AttemptStart != nil || o.Queued != nil {
		t.Errorf("got a nil Tracer's Observer with hooks, want the zero Observer")
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Errorf("got Shutdown error %v, want nil", err)
	}
}

func TestShutdownNotOwned(t *testing.T) {
	t.Parallel()
	// New's provider is the caller's: Shutdown must leave it running.
	tr, sr := newRecorded(t)
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatalf("got Shutdown error %v, want nil", err)
	}
	r := retried()
	tr.Observer().Done(&r)
	if got := len(sr.Ended()); got != 3 {
		t.Errorf("got %d spans after Shutdown, want 3: the provider is not the Tracer's to stop", got)
	}
}
