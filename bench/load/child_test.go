package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// TestMain lets the test binary be the child writer, as the load program
// is for --journal-child.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestChildStore checks that batches written through the child writer
// reach the database, and that Close stops the child.
func TestChildStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	base, err := journal.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newChildStore(path, base)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for b := range 2 {
		batch := []journal.Record{
			{ID: fmt.Sprintf("r%d-1", b), Start: start, Attempts: []journal.Attempt{{N: 1, Start: start, Status: 200}}},
			{ID: fmt.Sprintf("r%d-2", b), Start: start},
		}
		if err := c.Write(context.Background(), batch); err != nil {
			t.Fatalf("Write batch %d: %v", b, err)
		}
	}
	got, err := c.Get(context.Background(), "r1-1")
	if err != nil || len(got.Attempts) != 1 || got.Attempts[0].Status != 200 {
		t.Errorf("Get r1-1: got %+v, %v; want it with its one attempt", got, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestSmokeJournalInline runs the program at a tiny scale with the journal
// written in-process, and checks that every request succeeded. (TestSmoke
// runs the default, a child writer.)
func TestSmokeJournalInline(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := append(append([]string(nil), tiny...), "--journal-child=false", "--gate-slots", "0", "--max-rates", "")
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v", err)
	}
	for _, row := range rep.Latency {
		for _, ts := range row.Targets {
			if ts.Errors != 0 || ts.N == 0 {
				t.Errorf("%s %s %s: got %d requests, %d errors (first: %q); want some, and no errors",
					row.Phase, row.Metric, ts.Name, ts.N, ts.Errors, ts.FirstError)
			}
		}
	}
}
