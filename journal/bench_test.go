package journal_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// benchmarkWrite measures one Write of a batch of 256 records, as the
// gateway makes them on its success path: UUIDv7 IDs in time order, no
// headers, one attempt each.
func benchmarkWrite(b *testing.B, s journal.Store) {
	batch := make([]record.Request, 256)
	start := time.Now()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range batch {
			at := start.Add(time.Duration(n) * 500 * time.Microsecond)
			batch[i] = record.Request{
				ID: outlast.NewCallID(), Method: "POST", Path: "/v1/chat/completions",
				Upstream: "openai", Model: "gpt-test", Start: at, End: at.Add(300 * time.Millisecond),
				Status: 200, Committed: true, Bytes: 1200,
				Attempts: []record.Attempt{{
					N: 1, CallID: outlast.NewCallID(), Start: at, End: at.Add(300 * time.Millisecond),
					Status: 200, Bytes: 1200,
				}},
			}
			n++
		}
		if err := s.Write(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}

func BenchmarkSQLiteWrite(b *testing.B) {
	s, err := journal.Open(context.Background(), "sqlite:"+b.TempDir()+"/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchmarkWrite(b, s)
}

func BenchmarkPostgresWrite(b *testing.B) {
	if os.Getenv(postgresEnv) == "" {
		b.Skip(postgresEnv + " is unset")
	}
	s, err := journal.Open(context.Background(), freshPostgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchmarkWrite(b, s)
}
