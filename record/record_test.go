package record_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/recordtest"
	"github.com/outlast-llm/outlast/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// t0 is the tests' reference time, with sub-millisecond digits that the
// JSON form must cut.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// TestNewAttempt checks the fields' mapping: the class as the attempt
// carries it, never judged again, and the message sanitized.
func TestNewAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a    outlast.Attempt
		want record.Attempt
	}{
		// Every field, and the query cut from the quoted URL.
		{"every field", outlast.Attempt{
			CallID: "c", N: 2, Key: "k", Ahead: 3, GateWait: 5, Start: t0, End: t0.Add(1),
			Status: 429, Class: outlast.ClassRateLimited, RetryAfter: 7, RetryIn: 9,
			Err: fmt.Errorf("Post %q: %w", "https://h/p?key=k1", &outlast.StatusError{StatusCode: 429}),
		}, record.Attempt{
			CallID: "c", N: 2, Key: "k", QueuedAhead: 3, GateWait: 5, Start: t0, End: t0.Add(1),
			Status: 429, Class: outlast.ClassRateLimited, RetryAfter: 7, RetryIn: 9,
			Error: `Post "https://h/p": outlast: status 429 Too Many Requests`,
		}},
		// The user info goes too: a password is a credential.
		{"user info", outlast.Attempt{
			N: 1, Class: outlast.ClassRefused,
			Err: &url.Error{Op: "Post", URL: "https://user:pw@api.example.com/v1/chat?key=s", Err: syscall.ECONNREFUSED},
		}, record.Attempt{
			N: 1, Class: outlast.ClassRefused,
			Error: `Post "https://api.example.com/v1/chat": connection refused`,
		}},
		// The class is the attempt's, not the error's: NewAttempt does not
		// classify, so what the Transport decided is what every observer
		// shows.
		{"class as given", outlast.Attempt{
			N: 1, Class: outlast.ClassTimeout, Err: errors.New("something else"),
		}, record.Attempt{
			N: 1, Class: outlast.ClassTimeout, Error: "something else",
		}},
		// An attempt's start, as the Transport reports it: no class, no
		// error yet.
		{"start", outlast.Attempt{CallID: "c", N: 1, Start: t0},
			record.Attempt{CallID: "c", N: 1, Start: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := record.NewAttempt(tt.a); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestObservers checks that Observers calls every observer's hook in
// the order given, with the same arguments, and skips the observers that
// lack it.
func TestObservers(t *testing.T) {
	t.Parallel()
	var log []string
	// logger returns an observer, named name, with every hook.
	logger := func(name string) record.Observer {
		return record.Observer{
			Queued: func(r *record.Request, key string, ahead int) {
				log = append(log, fmt.Sprintf("%s queued %s %s %d", name, r.ID, key, ahead))
			},
			AttemptStart: func(r *record.Request, a record.Attempt) {
				log = append(log, fmt.Sprintf("%s start %s %d", name, r.ID, a.N))
			},
			AttemptEnd: func(r *record.Request, a record.Attempt) {
				log = append(log, fmt.Sprintf("%s end %s %d %v", name, r.ID, a.N, a.Class))
			},
			Done: func(r *record.Request) { log = append(log, fmt.Sprintf("%s done %s", name, r.ID)) },
		}
	}
	doneOnly := record.Observer{Done: func(r *record.Request) { log = append(log, "c done "+r.ID) }}
	o := record.Observers(logger("a"), record.Observer{}, doneOnly, logger("b"))
	r := &record.Request{ID: "r1"}
	o.Queued(r, "slot 3", 2)
	o.AttemptStart(r, record.Attempt{N: 1})
	o.AttemptEnd(r, record.Attempt{N: 1, Class: outlast.ClassStalled})
	o.Done(r)
	want := []string{
		"a queued r1 slot 3 2", "b queued r1 slot 3 2",
		"a start r1 1", "b start r1 1",
		"a end r1 1 stalled", "b end r1 1 stalled",
		"a done r1", "c done r1", "b done r1",
	}
	if !reflect.DeepEqual(log, want) {
		t.Errorf("got calls\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
}

// TestObserversNil checks that a hook no observer has stays nil, so that
// the gateway can skip the work of reporting it.
func TestObserversNil(t *testing.T) {
	t.Parallel()
	done := func(*record.Request) {}
	tests := []struct {
		name string
		o    record.Observer
		want [4]bool // Queued, AttemptStart, AttemptEnd and Done set
	}{
		// None at all is the zero Observer.
		{"none", record.Observers(), [4]bool{}},
		// Zero Observers add nothing.
		{"zeros", record.Observers(record.Observer{}, record.Observer{}), [4]bool{}},
		// One hook among several observers leaves the others nil.
		{"done only", record.Observers(record.Observer{}, record.Observer{Done: done}, record.Observer{}), [4]bool{false, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := [4]bool{tt.o.Queued != nil, tt.o.AttemptStart != nil, tt.o.AttemptEnd != nil, tt.o.Done != nil}
			if got != tt.want {
				t.Errorf("got hooks set %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRequestJSON checks the record's JSON shape against a golden file,
// and that it reads back as it was written.
func TestRequestJSON(t *testing.T) {
	t.Parallel()
	r := record.Request{
		ID: "0195f0e2-8c1a-7000-8000-000000000001", Run: "run-7", Method: "POST",
		Path: "/v1/chat/completions", Upstream: "openai", Model: "gpt-4o",
		Header: http.Header{"Content-Type": {"application/json"}},
		Start:  t0, End: t0.Add(3200 * time.Millisecond),
		Deadline: t0.Add(114 * time.Second), DeadlineSource: record.DeadlineSDK,
		Status: 200, Committed: true, Held: true, Bytes: 1234,
		Attempts: []record.Attempt{
			{
				CallID: "0195f0e2-8c1b-7000-8000-000000000002", N: 1,
				Start: t0.Add(2 * time.Millisecond), End: t0.Add(180 * time.Millisecond),
				Key: "slot 0", QueuedAhead: 2, GateWait: 1500 * time.Microsecond,
				Status: 503, Class: outlast.ClassStatus5xx, Error: "outlast: status 503 Service Unavailable (retry after 2s)",
				RetryIn: 2 * time.Second, RetryAfter: 2 * time.Second, RetryAfterCut: true,
			},
			{
				CallID: "0195f0e2-9412-7000-8000-000000000003", N: 2, Upstream: "azure", Fallback: "spent",
				Start: t0.Add(2181 * time.Millisecond), End: t0.Add(3100 * time.Millisecond),
				Status: 200, Bytes: 1234,
			},
		},
		Moves:         []record.Move{{From: "openai", To: "azure", Reason: "spent"}},
		Continuations: []record.Continuation{{Upstream: "azure", After: 1234, Prefill: 800, Outcome: record.ContinuationOK}},
	}
	r.Attempts = append(r.Attempts, record.Attempt{CallID: "0195f0e2-9412-7000-8000-000000000004", N: 3, Upstream: "azure",
		Start: t0.Add(3150 * time.Millisecond), End: t0.Add(3180 * time.Millisecond), Status: 200, Continued: true, PrefillBytes: 800})
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	golden := filepath.Join("testdata", "request.json")
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
	var back record.Request
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if want := recordtest.Kept(r); !reflect.DeepEqual(back, want) {
		t.Errorf("read back: got %+v, want %+v", back, want)
	}
}

// TestRequestJSONEmpty checks that an empty record has [] and {} where a
// reader looks for a list and a map, and null for times it lacks.
func TestRequestJSONEmpty(t *testing.T) {
	t.Parallel()
	got, err := json.Marshal(record.Request{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"x","run":"","method":"","path":"","upstream":"","slot":"","model":"","headers":{},"started_at":null,"ended_at":null,"deadline":null,"status":0,"error":"","stream":false,"committed":false,"bytes":0,"attempts":[]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var back record.Request
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if want := (record.Request{ID: "x", Header: http.Header{}, Attempts: []record.Attempt{}}); !reflect.DeepEqual(back, want) {
		t.Errorf("read back: got %+v, want %+v", back, want)
	}
}

// TestAttemptJSON checks the attempt's form field by field: times in UTC
// to the millisecond, cut rather than rounded, null when zero, durations
// in whole milliseconds, and the class by its name.
func TestAttemptJSON(t *testing.T) {
	t.Parallel()
	east := time.FixedZone("east", 5*3600)
	tests := []struct {
		name string
		a    record.Attempt
		want map[string]any // the fields to check, as encoding/json decodes them
	}{
		// A time in another zone is written in UTC; its nanoseconds are
		// cut, not rounded: .535897932 is .535.
		{"zone and digits", record.Attempt{Start: t0.In(east)},
			map[string]any{"started_at": "2025-03-14T15:09:26.535Z", "ended_at": nil}},
		// Durations are whole milliseconds, cut.
		{"durations", record.Attempt{GateWait: 1999 * time.Microsecond, RetryIn: 1500 * time.Millisecond, RetryAfter: 999 * time.Microsecond},
			map[string]any{"gate_wait_ms": 1.0, "retry_in_ms": 1500.0, "retry_after_ms": 0.0}},
		// No class is the empty name, not "none" or a number.
		{"no class", record.Attempt{}, map[string]any{"error_class": ""}},
		// A failed status is named by its split class.
		{"rate limited", record.Attempt{Status: 429, Class: outlast.ClassRateLimited}, map[string]any{"status": 429.0, "error_class": "rate_limited"}},
		{"status 5xx", record.Attempt{Status: 502, Class: outlast.ClassStatus5xx}, map[string]any{"error_class": "status_5xx"}},
		// The gate key is not in the form: the journal does not keep it.
		{"no key", record.Attempt{Key: "slot 1"}, map[string]any{"key": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, w := range tt.want {
				if g := got[k]; !reflect.DeepEqual(g, w) {
					t.Errorf("%s: got %#v, want %#v in %s", k, g, w, b)
				}
			}
		})
	}
}

// TestClassesJSON checks that every class reads back from the JSON form
// as itself.
func TestClassesJSON(t *testing.T) {
	t.Parallel()
	for _, c := range outlast.Classes() {
		b, err := json.Marshal(record.Attempt{N: 1, Class: c})
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if want := fmt.Sprintf(`"error_class":%q`, c.String()); !bytes.Contains(b, []byte(want)) {
			t.Errorf("%v: got %s, want %s in it", c, b, want)
		}
		var back record.Attempt
		if err := json.Unmarshal(b, &back); err != nil || back.Class != c {
			t.Errorf("%s read back as %v (%v), want %v", b, back.Class, err, c)
		}
	}
}

// A record's attempt shows the class the Transport gave it, and its error
// without the key the URL carried.
func ExampleNewAttempt() {
	err := &url.Error{Op: "Post", URL: "https://api.example.com/v1/chat?key=sk-123", Err: syscall.ECONNREFUSED}
	a := record.NewAttempt(outlast.Attempt{N: 1, Err: err, Class: outlast.Classify(err)})
	fmt.Println(a.Class)
	fmt.Println(a.Error)
	// Output:
	// refused
	// Post "https://api.example.com/v1/chat": connection refused
}

// Observers read the headers if any of them does, so that the gateway
// copies them only then.
func TestObserversHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    record.Observer
		want bool
	}{
		{"none", record.Observers(), false},
		{"none reads them", record.Observers(record.Observer{}, record.Observer{Done: func(*record.Request) {}}), false},
		{"one reads them", record.Observers(record.Observer{}, record.Observer{Headers: true}, record.Observer{}), true},
	} {
		if c.o.Headers != c.want {
			t.Errorf("%s: got Headers %v, want %v", c.name, c.o.Headers, c.want)
		}
	}
}

// TestAnswered checks that the upstream that answered is the one the
// request's last move went to, whether or not it made an attempt.
func TestAnswered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		moves []record.Move
		want  string
	}{
		// A request that never moved was answered by its own upstream.
		{"no move", nil, "a"},
		// b passed the request on without an attempt: c answered.
		{"two moves", []record.Move{{From: "a", To: "b", Reason: "spent"}, {From: "b", To: "c", Reason: "busy"}}, "c"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := record.Request{Upstream: "a", Moves: c.moves}
			if got := r.Answered(); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
