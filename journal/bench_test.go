package journal_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/outlast-llm/outlast/journal"
)

// benchmarkWrite measures one Write of a batch of 100 records with two
// attempts each, as a Writer sends them.
func benchmarkWrite(b *testing.B, s journal.Store) {
	batch := make([]journal.Record, 100)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = record(fmt.Sprintf("r%08d", n), "bench", t0, 200, 2)
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
