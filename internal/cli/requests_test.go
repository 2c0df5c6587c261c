package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// record makes a request of run that failed once with a 503 and then
// succeeded, started at start.
func testRecord(id, run string, start time.Time) journal.Record {
	return journal.Record{
		ID: id, Run: run, Method: "POST", Path: "/v1/chat/completions", Upstream: "up",
		Start: start, End: start.Add(16 * time.Second), Status: 200,
		Attempts: []journal.Attempt{
			{CallID: id + "-1", N: 1, Start: start, End: start.Add(time.Second), Status: 503, ErrorClass: journal.ClassStatus, RetryIn: 15 * time.Second},
			{CallID: id + "-2", N: 2, Start: start.Add(16 * time.Second), End: start.Add(16 * time.Second), Status: 200},
		},
	}
}

func testJournal(t *testing.T, recs ...journal.Record) string {
	t.Helper()
	spec := "sqlite:" + filepath.Join(t.TempDir(), "j.db")
	s, err := journal.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	return spec
}

// The table shows each request with its attempts and waits; --run shows a
// run oldest first; --json prints one object a line with the attempts.
func TestRequestsCommand(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	spec := testJournal(t, testRecord("a", "run-1", t0), testRecord("b", "run-2", t0.Add(time.Minute)), testRecord("c", "run-1", t0.Add(2*time.Minute)))
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, out string)
	}{
		{"newest, as a table", nil, func(t *testing.T, out string) {
			if !(strings.Index(out, " a ") < strings.Index(out, " b ") && strings.Index(out, " b ") < strings.Index(out, " c ")) {
				t.Errorf("want a, b, c in time order:\n%s", out)
			}
			if !strings.Contains(out, "#1") || !strings.Contains(out, "503, retry in 15s") || !strings.Contains(out, "2 attempts") {
				t.Errorf("want the attempts and the wait:\n%s", out)
			}
		}},
		{"limit", []string{"--limit", "1"}, func(t *testing.T, out string) {
			if strings.Contains(out, " a ") || !strings.Contains(out, " c ") {
				t.Errorf("want only the newest, c:\n%s", out)
			}
		}},
		{"a run", []string{"--run", "run-1"}, func(t *testing.T, out string) {
			if strings.Contains(out, " b ") || strings.Index(out, " a ") > strings.Index(out, " c ") {
				t.Errorf("want run-1's a then c only:\n%s", out)
			}
		}},
		{"json", []string{"--json", "--run", "run-2"}, func(t *testing.T, out string) {
			var rec journal.Record
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.ID != "b" || len(rec.Attempts) != 2 || rec.Attempts[0].RetryIn != 15*time.Second {
				t.Errorf("got %q, want b's record with its attempts", out)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if err := runRequests(context.Background(), append([]string{"--journal", spec}, c.args...), &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			c.check(t, out.String())
		})
	}
}

// Bad usage is refused as such.
func TestRequestsUsage(t *testing.T) {
	for _, args := range [][]string{{"--journal", "off"}, {"--limit", "0"}, {"--limit", "5000"}} {
		if err := runRequests(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

// --follow prints requests recorded after it started, once each.
func TestRequestsFollow(t *testing.T) {
	followEvery = 5 * time.Millisecond
	t0 := time.Now().Add(-time.Minute).UTC()
	spec := testJournal(t, testRecord("a", "r", t0))
	ctx, cancel := context.WithCancel(context.Background())
	out := new(lockedBuffer)
	done := make(chan error, 1)
	go func() { done <- runRequests(ctx, []string{"--journal", spec, "--follow", "--json"}, out, io.Discard) }()
	s, err := journal.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(context.Background(), []journal.Record{testRecord("b", "r", t0.Add(time.Second))}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"id":"b"`) {
		if time.Now().After(deadline) {
			t.Fatalf("--follow never printed b:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond) // the command polls; there is no event to wait on
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), `"id":"a"`); n != 1 {
		t.Errorf("a printed %d times, want once", n)
	}
}
