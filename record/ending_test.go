package record_test

import (
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// TestEnding checks what the table and the page say of each attempt: a
// plain status for a failure with one, its class for one without, and
// for an answer that reached the caller, how it ended.
func TestEnding(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ok := record.Attempt{Status: 200, Start: t0, End: t0.Add(time.Second)}
	overloaded := record.Attempt{Status: 529, Class: outlast.ClassOverloaded, Start: t0, End: t0.Add(time.Second)}
	timeout := record.Attempt{Class: outlast.ClassTimeout, Start: t0, End: t0.Add(time.Second)}
	hedged := record.Attempt{Class: outlast.ClassCanceled, Error: record.HedgedError, Start: t0, End: t0.Add(time.Second)}
	emptyStream := record.Attempt{Status: 200, Class: outlast.ClassErrorEvent, Start: t0, End: t0.Add(time.Second)}
	inFlight := record.Attempt{Start: t0}
	continued := ok
	continued.Continued, continued.PrefillBytes = true, 80
	tests := []struct {
		name string
		r    record.Request
		want []string
	}{
		{"whole", record.Request{Status: 200, End: t0, Attempts: []record.Attempt{overloaded, timeout, ok}},
			[]string{"529", "timeout", "200"}},
		{"whole stream", record.Request{Status: 200, End: t0, Stream: true, Attempts: []record.Attempt{ok}},
			[]string{"200, stream whole"}},
		{"broke", record.Request{Status: 200, End: t0, Stream: true, Bytes: 1234, Error: record.ErrorUpstreamBroke, Attempts: []record.Attempt{ok}},
			[]string{"200, broke after 1234 bytes"}},
		{"continued", record.Request{Status: 200, End: t0, Stream: true, Bytes: 900,
			Continuations: []record.Continuation{{After: 300, Prefill: 80, Outcome: record.ContinuationOK}},
			Attempts:      []record.Attempt{ok, overloaded, continued}},
			[]string{"200, broke after 300 bytes, continued", "529", "200, stream whole"}},
		{"not continued", record.Request{Status: 200, End: t0, Stream: true, Bytes: 300, Error: record.ErrorUpstreamBroke,
			Continuations: []record.Continuation{{After: 300, Outcome: record.ContinuationRefused, Reason: "400"}},
			Attempts:      []record.Attempt{ok, overloaded}},
			[]string{"200, broke after 300 bytes, not continued: refused (400)", "529"}},
		{"caller left", record.Request{Status: 200, End: t0, Bytes: 1, Error: record.ErrorClientClosed, Attempts: []record.Attempt{ok}},
			[]string{"200, the caller left after 1 byte"}},
		{"error event", record.Request{Status: 529, End: t0, Stream: true, Error: record.ErrorUpstreamError, Attempts: []record.Attempt{emptyStream, ok}},
			[]string{"200 error_event", "200, an error event"}},
		{"hedged", record.Request{Status: 200, End: t0, Stream: true, Attempts: []record.Attempt{hedged, ok}},
			[]string{"hedged: the other attempt answered first", "200, stream whole"}},
		{"in flight", record.Request{Attempts: []record.Attempt{overloaded, inFlight}},
			[]string{"529", "in flight"}},
		{"answering", record.Request{Stream: true, Attempts: []record.Attempt{ok}},
			[]string{"200, answering"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				if got := tt.r.Ending(i); got != want {
					t.Errorf("attempt %d: got %q, want %q", i+1, got, want)
				}
			}
		})
	}
}
