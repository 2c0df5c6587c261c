package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// testRecord makes a request of run that failed once with a 503 and then
// succeeded, started at start.
func testRecord(id, run string, start time.Time) record.Request {
	return record.Request{
		ID: id, Run: run, Method: "POST", Path: "/v1/chat/completions", Upstream: "up",
		Start: start, End: start.Add(16 * time.Second), Status: 200,
		Attempts: []record.Attempt{
			{CallID: id + "-1", N: 1, Start: start, End: start.Add(time.Second), Status: 503, Class: outlast.ClassStatus5xx, RetryIn: 15 * time.Second},
			{CallID: id + "-2", N: 2, Start: start.Add(16 * time.Second), End: start.Add(16 * time.Second), Status: 200},
		},
	}
}

func testJournal(t *testing.T, recs ...record.Request) string {
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
	// d's second attempt fell back from up, which was down, to azure.
	d := testRecord("d", "run-3", t0.Add(3*time.Minute))
	d.Attempts[0].Upstream = "up"
	d.Attempts[1].Upstream, d.Attempts[1].Fallback = "azure", "down"
	d.Moves = []record.Move{{From: "up", To: "azure", Reason: "down"}}
	// e moved past azure, busy, to bedrock; f last to azure, busy: no
	// attempt at azure in either.
	e := testRecord("e", "run-4", t0.Add(4*time.Minute))
	e.Attempts[1].Upstream, e.Attempts[1].Fallback = "bedrock", "busy"
	e.Moves = []record.Move{{From: "up", To: "azure", Reason: "spent"}, {From: "azure", To: "bedrock", Reason: "busy"}}
	f := testRecord("f", "run-5", t0.Add(5*time.Minute))
	f.Status, f.Error, f.Attempts, f.Moves = 503, "busy", f.Attempts[:1], []record.Move{{From: "up", To: "azure", Reason: "spent"}}
	// g's deadline came from its SDK, and its 429's delay was cut.
	g := testRecord("g", "run-6", t0.Add(6*time.Minute))
	g.Deadline, g.DeadlineSource = g.Start.Add(595*time.Second), record.DeadlineSDK
	g.Attempts[0].Status, g.Attempts[0].Class, g.Attempts[0].RetryAfter, g.Attempts[0].RetryAfterCut = 429, outlast.ClassRateLimited, 5*time.Minute, true
	// ... and its stream, answered by the second, broke twice: continued
	// once, by the third, then not.
	g.Attempts = append(g.Attempts, g.Attempts[1])
	g.Attempts[2].N, g.Attempts[2].Continued, g.Attempts[2].PrefillBytes = 3, true, 321
	g.Continuations = []record.Continuation{{Upstream: "up", After: 400, Prefill: 321, Outcome: record.ContinuationOK},
		{Upstream: "up", After: 900, Outcome: record.ContinuationUnsupported, Reason: "a tool call"}}
	// h's stream, of the Responses API, broke and was resumed.
	h := testRecord("h", "run-7", t0.Add(-time.Minute))
	h.Attempts = append(h.Attempts, h.Attempts[1])
	h.Attempts[2].N, h.Attempts[2].Continued = 3, true
	h.Continuations = []record.Continuation{{Upstream: "up", After: 700, Outcome: record.ContinuationResumed}}
	spec := testJournal(t, testRecord("a", "run-1", t0), testRecord("b", "run-2", t0.Add(time.Minute)), testRecord("c", "run-1", t0.Add(2*time.Minute)), d, e, f, g, h)
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
			if !strings.Contains(out, "16s of a 9m55s deadline (sdk)") || !strings.Contains(out, "429, Retry-After 5m0s (cut: the server asked for more)") {
				t.Errorf("want g's deadline and its source, and its cut delay:\n%s", out)
			}
			if !strings.Contains(out, "200, broke after 400 bytes, continued\n") ||
				!strings.Contains(out, "continuation, 321 bytes of the answer as its prefill: 200, broke after 900 bytes, not continued: unsupported (a tool call)") {
				t.Errorf("want g's continuations:\n%s", out)
			}
			if !strings.Contains(out, "200, broke after 700 bytes, resumed\n") || !strings.Contains(out, "continuation: 200\n") {
				t.Errorf("want h's resumption, as an attempt that carried the stream on:\n%s", out)
			}
		}},
		{"limit", []string{"--limit", "1"}, func(t *testing.T, out string) {
			if strings.Contains(out, " f ") || !strings.Contains(out, " g ") {
				t.Errorf("want only the newest, g:\n%s", out)
			}
		}},
		{"a fallback", []string{"--run", "run-3"}, func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || strings.Contains(lines[1], "→") || !strings.HasSuffix(lines[2], "  →azure (down) 200") {
				t.Errorf("want the second attempt alone marked as moved to azure, up being down:\n%s", out)
			}
		}},
		{"a move past an upstream with no attempt", []string{"--run", "run-4"}, func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.HasSuffix(lines[2], "  →azure (spent, no attempt) →bedrock (busy) 200") {
				t.Errorf("want the second attempt marked as moved past azure to bedrock:\n%s", out)
			}
		}},
		{"a last move with no attempt", []string{"--run", "run-5"}, func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.HasSuffix(lines[2], "  →azure (spent, no attempt)") {
				t.Errorf("want a last line for the move to azure:\n%s", out)
			}
		}},
		{"a fallback, as JSON", []string{"--json", "--run", "run-3"}, func(t *testing.T, out string) {
			if !strings.Contains(out, `"upstream":"azure","fallback":"down"`) {
				t.Errorf("want the second attempt's upstream and fallback:\n%s", out)
			}
		}},
		{"a run", []string{"--run", "run-1"}, func(t *testing.T, out string) {
			if strings.Contains(out, " b ") || strings.Index(out, " a ") > strings.Index(out, " c ") {
				t.Errorf("want run-1's a then c only:\n%s", out)
			}
		}},
		{"json", []string{"--json", "--run", "run-2"}, func(t *testing.T, out string) {
			var rec record.Request
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
	for _, args := range [][]string{{"--journal", "off"}, {"--journal", "mysql://x"}, {"--limit", "0"}, {"--limit", "5000"}} {
		if err := runRequests(context.Background(), args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

// Reading never creates a journal: a path where there is none is an error
// that says so, and leaves nothing behind.
func TestRequestsNoJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outlast.db")
	var out strings.Builder
	err := runRequests(context.Background(), []string{"--journal", "sqlite:" + path}, &out, io.Discard)
	if err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "no journal found at sqlite:"+path) {
		t.Errorf("got %v, want an error (not a usage error) saying no journal was found there", err)
	}
	if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("after reading, %s: got %v, want it still not to exist", path, serr)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q, want nothing", out.String())
	}
}

// An empty journal, or a run with no requests, is said so on stderr, in
// one line naming the journal, and stdout stays empty, a valid JSON
// stream with --json.
func TestRequestsNone(t *testing.T) {
	t.Parallel()
	empty := testJournal(t)
	full := testJournal(t, testRecord("a", "run-1", time.Now()))
	for _, tc := range []struct {
		name       string
		args       []string
		wantStderr string // "" for nothing
	}{
		// A journal serve created before any request.
		{"empty", []string{"--journal", empty}, "outlast: no requests recorded yet in " + empty + "\n"},
		// --json's stdout is for a program: the note goes to stderr.
		{"empty, as JSON", []string{"--journal", empty, "--json"}, "outlast: no requests recorded yet in " + empty + "\n"},
		// A run not in the journal, though others are.
		{"no such run", []string{"--journal", full, "--run", "run-2"}, `outlast: no requests of run "run-2" recorded yet in ` + full + "\n"},
		// Requests to show: no note.
		{"some", []string{"--journal", full, "--json"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			if err := runRequests(t.Context(), tc.args, &stdout, &stderr); err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr: got %q, want %q", stderr.String(), tc.wantStderr)
			}
			if tc.wantStderr != "" && stdout.Len() != 0 {
				t.Errorf("stdout: got %q, want nothing", stdout.String())
			}
		})
	}
}

// --follow goes by end: a request that started before one it printed, and
// ended after it, is printed too, and each request once.
func TestRequestsFollowByEnd(t *testing.T) {
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	long := testRecord("long", "r", t0) // ends at t0+16s
	long.End = t0.Add(30 * time.Second)
	short := testRecord("short", "r", t0.Add(time.Second)) // ends at t0+17s
	spec := testJournal(t, testRecord("old", "r", t0.Add(-time.Hour)), short)
	s, err := journal.OpenExisting(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out strings.Builder
	p := &printer{out: &out, json: true, seen: map[string]time.Time{}, last: t0}
	if err := p.ended(context.Background(), s, ""); err != nil {
		t.Fatal(err)
	}
	// The long request ends after short was printed, written as serve
	// writes, beside the reader.
	w, err := journal.Open(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write(context.Background(), []record.Request{long}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.ended(context.Background(), s, ""); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]int{"short": 1, "long": 1, "old": 0} {
		if n := strings.Count(out.String(), `"id":"`+id+`"`); n != want {
			t.Errorf("%s printed %d times, want %d:\n%s", id, n, want, out.String())
		}
	}
	if strings.Index(out.String(), `"id":"short"`) > strings.Index(out.String(), `"id":"long"`) {
		t.Errorf("want short, then long, in the order they ended:\n%s", out.String())
	}
}

// --follow with --run prints only that run's requests, and ends cleanly
// when its context does.
func TestRequestsFollowRun(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	a, b := testRecord("a", "r1", t0), testRecord("b", "r2", t0)
	spec := testJournal(t, a, b)
	s, err := journal.OpenExisting(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out strings.Builder
	p := &printer{out: &out, json: true, seen: map[string]time.Time{}, last: t0}
	if err := p.ended(context.Background(), s, "r1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"id":"a"`) || strings.Contains(out.String(), `"id":"b"`) {
		t.Errorf("got %q, want a only", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.follow(ctx, s, "r1"); err != nil {
		t.Errorf("follow after its context ended: got %v, want nil", err)
	}
}

// A stream's answer says how it ended: whole, or broke after so many
// bytes, and whether it was continued; the request's line says it was a
// stream.
func TestRequestsTableSaysHowEachAttemptEnded(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ok := record.Attempt{Status: 200, Start: t0, End: t0.Add(time.Second)}
	cont := ok
	cont.N, cont.Continued, cont.PrefillBytes = 2, true, 40
	ok.N = 1
	r := record.Request{ID: "s", Method: "POST", Path: "/v1/chat/completions", Stream: true, Status: 200, Start: t0, End: t0.Add(3 * time.Second),
		Bytes:         700,
		Continuations: []record.Continuation{{After: 300, Prefill: 40, Outcome: record.ContinuationOK}},
		Attempts:      []record.Attempt{ok, cont}}
	var out strings.Builder
	(&printer{out: &out}).table(r)
	for _, want := range []string{"/v1/chat/completions (stream)", "#1", "200, broke after 300 bytes, continued", "#2", "continuation, 40 bytes of the answer as its prefill: 200, stream whole"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// An attempt says what it waited for, in the order it waited: its
// upstream, while that was down, and then a slot; and whether it was the
// upstream's probe.
func TestDescribeAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		a        record.Attempt
		upstream string // the request's
		want     string
	}{
		// Nothing waited for: the status alone.
		{"plain", record.Attempt{Status: 200}, "", "200"},
		// The probe that ended an outage, after its wait.
		{"probe", record.Attempt{Status: 200, AdmissionWait: 1500 * time.Millisecond, Probe: true}, "", "200, waited 1.5s for the upstream, probe"},
		// A request let go while the upstream recovered, then queued for a
		// slot: both waits, the upstream's first.
		{"both waits", record.Attempt{Status: 503, Class: outlast.ClassStatus5xx, AdmissionWait: 250 * time.Millisecond,
			QueuedAhead: 2, GateWait: 40 * time.Millisecond, RetryIn: time.Second},
			"", "503, waited 250ms for the upstream, queued behind 2 for 40ms, retry in 1s"},
		// A probe that failed, with no wait: it was first in line.
		{"failed probe", record.Attempt{Class: outlast.ClassRefused, Probe: true, Error: "connection refused"}, "", "refused, probe: connection refused"},
		// At the request's own upstream: nothing said of it.
		{"own upstream", record.Attempt{Upstream: "openai", Status: 200}, "openai", "200"},
		// The first attempt after the request moved: where, and why.
		{"fell back", record.Attempt{Upstream: "azure", Fallback: "down", Status: 200}, "openai", "→azure (down) 200"},
		// A later attempt there: where only.
		{"still moved", record.Attempt{Upstream: "azure", Status: 503, Class: outlast.ClassStatus5xx, RetryIn: time.Second},
			"openai", "→azure 503, retry in 1s"},
		// A move with a wait and a failure that got no status.
		{"moved and refused", record.Attempt{Upstream: "azure", Fallback: "busy", Class: outlast.ClassRefused,
			QueuedAhead: 1, GateWait: 5 * time.Millisecond, Error: "connection refused"},
			"openai", "→azure (busy) refused, queued behind 1 for 5ms: connection refused"},
		// The loser of a hedge: hedged, without the error's text again.
		{"hedged", record.Attempt{Upstream: "openai", Class: outlast.ClassCanceled, Error: record.HedgedError},
			"openai", "hedged: the other attempt answered first"},
	} {
		r := record.Request{Upstream: c.upstream, End: time.Now(), Attempts: []record.Attempt{c.a}}
		if got := describeAttempt(&r, 0); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
