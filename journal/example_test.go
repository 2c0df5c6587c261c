package journal_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// A journal keeps each request with its attempts, and a run reads back
// oldest first: here, a 503 retried after 15 s, then the answer.
func ExampleOpen() {
	ctx := context.Background()
	s, err := journal.Open(ctx, "sqlite::memory:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	err = s.Write(ctx, []record.Request{{
		ID: "r1", Run: "run-1", Method: "POST", Path: "/v1/chat/completions",
		Start: t0, End: t0.Add(16 * time.Second), Status: 200,
		Attempts: []record.Attempt{
			{CallID: "c1", N: 1, Start: t0, End: t0.Add(time.Second), Status: 503, Class: outlast.ClassStatus5xx, RetryIn: 15 * time.Second},
			{CallID: "c2", N: 2, Start: t0.Add(16 * time.Second), End: t0.Add(16 * time.Second), Status: 200},
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	recs, err := s.Run(ctx, "run-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range recs[0].Attempts {
		fmt.Println(a.N, a.Status, a.Class, a.RetryIn)
	}
	// Output:
	// 1 503 status_5xx 15s
	// 2 200  0s
}
