package tracing_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/tracing"
)

// A host turns tracing on with the standard OTEL_EXPORTER_OTLP_ENDPOINT;
// without it, FromEnv returns nil and the Observer does nothing.
func ExampleFromEnv() {
	ctx := context.Background()
	tr, err := tracing.FromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Shutdown flushes the spans still queued; it is nil-safe.
	defer tr.Shutdown(context.WithoutCancel(ctx))

	u, _ := url.Parse("http://127.0.0.1:8080")
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "llama", URL: u}},
		Observer:  tr.Observer(),
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = http.ListenAndServe("127.0.0.1:4000", g)
}

// A host with a TracerProvider of its own passes it to New. Each request
// becomes a server span, each attempt a client span under it, and each
// wait before a retry an event on the request.
func ExampleNew() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	tr := tracing.New(tp)

	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return start.Add(time.Duration(n) * time.Millisecond) }
	tr.Observer().Done(&record.Request{
		Method: "POST", Path: "/v1/chat/completions", Upstream: "llm",
		Start: ms(0), End: ms(1200), Status: 200,
		Attempts: []record.Attempt{
			{N: 1, Start: ms(1), End: ms(100), Status: 429, Class: outlast.ClassRateLimited, Error: "outlast: status 429 Too Many Requests", RetryIn: time.Second},
			{N: 2, Start: ms(1100), End: ms(1190), Status: 200},
		},
	})

	for _, s := range sr.Ended() {
		fmt.Printf("%s %v %v", s.Name(), s.SpanKind(), s.EndTime().Sub(s.StartTime()))
		for _, e := range s.Events() {
			fmt.Printf(" [%s at +%v]", e.Name, e.Time.Sub(start))
		}
		fmt.Println()
	}
	// Output:
	// outlast.attempt client 99ms [exception at +100ms]
	// outlast.attempt client 90ms
	// outlast.request server 1.2s [outlast.retry_wait at +100ms]
}
