package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/outlast-llm/outlast/server"
)

// TestMain lets the test binary be the child writer, as the load program
// is for --journal-child.
func TestMain(m *testing.M) {
	server.RunJournalWriter()
	os.Exit(m.Run())
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
