package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// DefaultServiceName is the service.name of the traces FromEnv sets up
// when OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) does
// not name one.
const DefaultServiceName = "outlast"

// scope is the instrumentation scope of the spans.
const scope = "github.com/outlast-llm/outlast/tracing"

// Tracer turns the gateway's requests into spans. It is safe for
// concurrent use. A nil *Tracer is tracing turned off: its Observer does
// nothing and its Shutdown returns nil.
type Tracer struct {
	tracer trace.Tracer
	// shutdown flushes and stops the provider FromEnv made; nil for a
	// provider the Tracer does not own.
	shutdown func(context.Context) error
}

// New returns a Tracer that makes its spans with tp, which stays the
// caller's to flush and shut down. If tp is nil, otel.GetTracerProvider()
// is used.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(scope, trace.WithInstrumentationVersion(outlast.Version))}
}

// FromEnv returns a Tracer that exports OTLP over HTTP as the standard
// OTEL_* environment says: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, their headers, timeout and
// compression, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the
// OTEL_TRACES_SAMPLER and the OTEL_BSP_* batch settings.
//
// It returns nil, and no error, when neither endpoint is set or
// OTEL_SDK_DISABLED is true: tracing is off. It returns an error for an
// OTEL_EXPORTER_OTLP_PROTOCOL other than http/protobuf, which is all it
// speaks, and for resource attributes it cannot parse.
//
// The Tracer owns its provider, which it does not make global: call
// Shutdown to flush the spans still queued.
func FromEnv(ctx context.Context) (*Tracer, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	if err := checkProtocol(); err != nil {
		return nil, err
	}
	// Later options override earlier ones, so the environment's service
	// name wins over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The exporter reads the endpoint, headers, timeout and compression
	// from the environment itself, and connects only when it exports.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
	}
	// The batcher exports from its own goroutine, so a request's Done pays
	// only for queueing its spans (and drops them if the queue is full).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp)
	t.shutdown = tp.Shutdown
	return t, nil
}

// checkProtocol refuses an OTLP protocol that otlptracehttp does not speak;
// exporting http/protobuf to a gRPC port would fail on every batch, far
// from the setting that caused it.
func checkProtocol() error {
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	p := os.Getenv(name)
	if p == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		p = os.Getenv(name)
	}
	if p != "" && p != "http/protobuf" {
		return fmt.Errorf("tracing: %s %q: only http/protobuf is supported", name, p)
	}
	return nil
}

// Shutdown flushes the spans still queued and stops the provider, if the
// Tracer owns one (FromEnv's); for New's it does nothing. ctx bounds the
// flush.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Observer returns the record.Observer that makes each request's spans
// when it is done. A nil Tracer's Observer is the zero Observer.
func (t *Tracer) Observer() record.Observer {
	if t == nil {
		return record.Observer{}
	}
	// The headers are read for a caller's traceparent and tracestate.
	return record.Observer{Done: t.done, Headers: true}
}

// traceContext reads only the W3C traceparent and tracestate headers
// (https://www.w3.org/TR/trace-context/), never a credential.
var traceContext = propagation.TraceContext{}

// done records r as a request span and its attempts as child spans.
func (t *Tracer) done(r *record.Request) {
	ctx := context.Background()
	if r.Header != nil {
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, span := t.tracer.Start(ctx, "outlast.request",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(r.Start),
		trace.WithAttributes(requestAttrs(r)...),
	)
	// An unsampled request costs nothing more.
	if span.IsRecording() {
		for i := range r.Attempts {
			t.attempt(ctx, span, r, &r.Attempts[i])
		}
		setRequestStatus(span, r)
	}
	span.End(trace.WithTimestamp(r.End))
}

// attempt records a as a child of ctx's span, and its wait, if a retry
// followed, as an event on parent.
func (t *Tracer) attempt(ctx context.Context, parent trace.Span, r *record.Request, a *record.Attempt) {
	end := a.End
	if end.IsZero() {
		// The record's attempts are reported at their end, so this is a
		// record made by hand; the request's end is the safe bound.
		end = r.End
	}
	_, span := t.tracer.Start(ctx, "outlast.attempt",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(a.Start),
		trace.WithAttributes(attemptAttrs(r, a)...),
	)
	setAttemptStatus(span, a, end)
	span.End(trace.WithTimestamp(end))
	if a.RetryIn > 0 {
		parent.AddEvent("outlast.retry_wait",
			trace.WithTimestamp(end),
			trace.WithAttributes(
				keyAttemptN.Int(a.N),
				keyRetryInMS.Float64(ms(a.RetryIn)),
				keyRetryAfterMS.Float64(ms(a.RetryAfter)),
			),
		)
	}
}
