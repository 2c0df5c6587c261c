package journal_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestRecordJSON checks the record's JSON shape against a golden file,
// and that it reads back as it was written.
func TestRecordJSON(t *testing.T) {
	t.Parallel()
	r := journal.Record{
		ID: "0195f0e2-8c1a-7000-8000-000000000001", Run: "run-7", Method: "POST",
		Path: "/v1/chat/completions", Upstream: "openai", Model: "gpt-4o",
		Header: map[string][]string{"Content-Type": {"application/json"}},
		Start:  t0, End: t0.Add(3200 * time.Millisecond),
		Status: 200, Committed: true, Bytes: 1234,
		Attempts: []journal.Attempt{
			{
				CallID: "0195f0e2-8c1b-7000-8000-000000000002", N: 1,
				Start: t0.Add(2 * time.Millisecond), End: t0.Add(180 * time.Millisecond),
				QueuedAhead: 2, GateWait: 1500 * time.Microsecond,
				Status: 503, ErrorClass: journal.ClassStatus, Error: "outlast: status 503 Service Unavailable (retry after 2s)",
				RetryIn: 2 * time.Second, RetryAfter: 2 * time.Second,
			},
			{
				CallID: "0195f0e2-9412-7000-8000-000000000003", N: 2,
				Start: t0.Add(2181 * time.Millisecond), End: t0.Add(3100 * time.Millisecond),
				Status: 200, Bytes: 1234,
			},
		},
	}
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	golden := filepath.Join("testdata", "record.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(append(got, '\n'), want) {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var back journal.Record
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if want := stored(r); !reflect.DeepEqual(back, want) {
		t.Errorf("read back: got %+v, want %+v", back, want)
	}
}

// TestRecordJSONEmpty checks that an empty record has [] and {} where a
// reader looks for a list and a map, and null for times it lacks.
func TestRecordJSONEmpty(t *testing.T) {
	t.Parallel()
	got, err := json.Marshal(journal.Record{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"x","run":"","method":"","path":"","upstream":"","slot":"","model":"","headers":{},"started_at":null,"ended_at":null,"status":0,"error":"","stream":false,"committed":false,"bytes":0,"attempts":[]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
