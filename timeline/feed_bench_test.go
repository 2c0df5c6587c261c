package timeline

import (
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// BenchmarkObserver is what the feed costs a request that succeeds at
// its first attempt, with no page open: the three calls the gateway
// makes on its way.
func BenchmarkObserver(b *testing.B) {
	f := New(0, 0)
	o := f.Observer()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		succeed(o, &record.Request{ID: outlast.NewCallID(), Method: "POST", Path: "/v1/chat/completions", Upstream: "api", Model: "gpt-4o", Start: start})
	}
}

// succeed tells o of r's one attempt, a success, as the gateway does.
func succeed(o record.Observer, r *record.Request) {
	a := record.Attempt{N: 1, Start: r.Start}
	o.AttemptStart(r, a)
	a.End, a.Status = r.Start, 200
	r.Attempts = append(r.Attempts, a)
	o.AttemptEnd(r, a)
	r.Status, r.End = 200, r.Start
	o.Done(r)
}
