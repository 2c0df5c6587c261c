package tracing_test

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/tracing"
)

// newRecorded returns a Tracer whose spans, once ended, are in the
// recorder, with every span sampled.
func newRecorded(t *testing.T) (*tracing.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return tracing.New(tp), sr
}

// t0 is the synthetic requests' epoch; at(n) is n ms after it.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// attempt returns the record of a as the gateway makes it: classified by
// outlast.Classify, as the Transport classifies an attempt at its end,
// and its message sanitized by record.NewAttempt.
func attempt(a outlast.Attempt) record.Attempt {
	a.Class = outlast.Classify(a.Err)
	return record.NewAttempt(a)
}

// attrs maps a span's or event's attributes to their plain Go values:
// int64, float64, bool or string.
func attrs(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// label names a recorded span for the tests: "request", or "attempt N".
func label(s sdktrace.ReadOnlySpan) string {
	if s.Name() != "outlast.attempt" {
		return strings.TrimPrefix(s.Name(), "outlast.")
	}
	return fmt.Sprintf("attempt %v", attrs(s.Attributes())["outlast.attempt.n"])
}

// byLabel indexes spans by label, failing on a label seen twice.
func byLabel(t *testing.T, spans []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	m := make(map[string]sdktrace.ReadOnlySpan, len(spans))
	for _, s := range spans {
		l := label(s)
		if _, dup := m[l]; dup {
			t.Fatalf("got two spans labeled %q, want one", l)
		}
		m[l] = s
	}
	return m
}

// labels returns the keys of m, sorted.
func labels[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diffAttrs fails t for each difference between got and want.
func diffAttrs(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for _, k := range labels(want) {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: attribute %s missing, want %#v", what, k, want[k])
		} else if !reflect.DeepEqual(g, want[k]) {
			t.Errorf("%s: attribute %s: got %#v, want %#v", what, k, g, want[k])
		}
	}
	for _, k := range labels(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: got extra attribute %s=%#v", what, k, got[k])
		}
	}
}

// replaceURL puts u in place of "{url}" in v.
func replaceURL(v, u string) string { return strings.ReplaceAll(v, "{url}", u) }

// service returns the service.name among kvs.
func service(kvs []*commonpb.KeyValue) string {
	for _, kv := range kvs {
		if kv.GetKey() == "service.name" {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
