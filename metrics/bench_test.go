package metrics_test

import (
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
)

// BenchmarkObserver is the observer's cost per request: a 503 retried
// into a 200, each attempt through a gate, so every series a request can
// move moves. An op is one whole request.
func BenchmarkObserver(b *testing.B) {
	req := record.Request{Upstream: "api", Status: 200, Attempts: []record.Attempt{
		attempt(outlast.Attempt{N: 1, GateWait: time.Millisecond, Start: at(0), End: at(250), Status: 503, Err: status(503), RetryIn: time.Second}),
		attempt(outlast.Attempt{N: 2, GateWait: time.Millisecond, Start: at(1250), End: at(1500), Status: 200}),
	}}
	b.Run("serial", func(b *testing.B) {
		o := metrics.New([]string{"api", "llama"}).Observer()
		b.ReportAllocs()
		for b.Loop() {
			observe(o, &req)
		}
	})
	// Every goroutine on one upstream: the counters' contention.
	b.Run("parallel", func(b *testing.B) {
		o := metrics.New([]string{"api", "llama"}).Observer()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := req // each goroutine its own, as the gateway's are
			for pb.Next() {
				observe(o, &r)
			}
		})
	})
}

// observe tells o of r's attempts and end, with no allocation of its own.
func observe(o record.Observer, r *record.Request) {
	for _, a := range r.Attempts {
		o.AttemptEnd(r, a)
	}
	o.Done(r)
}
