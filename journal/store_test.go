package journal_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// TestStore is the suite every Store passes: the same cases, run against
// SQLite and (with OUTLAST_TEST_POSTGRES) PostgreSQL.
func TestStore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, c := range storeCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, b)
			})
		}
	})
}

var storeCases = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	// A record with many attempts and every field set comes back exactly,
	// times and durations to the millisecond.
	{"round trip", testRoundTrip},
	// An attempt's wait for its upstream and its probe mark come back
	// as written, in columns of their own.
	{"admission", testAdmission},
	// A request that fell back comes back with each attempt's upstream
	// and, on the first attempt after the move, why it moved.
	{"fallback", testFallback},
	// Writing a record again replaces it, attempts and all, so that a
	// retried batch does no harm.
	{"rewrite replaces", testRewrite},
	// An unknown ID is ErrNotFound, not an empty record.
	{"not found", testNotFound},
	// A record the store cannot keep fails the batch before anything is
	// written: never half a batch.
	{"invalid record", testInvalid},
	// Text PostgreSQL would refuse (NUL, invalid UTF-8) is cleaned, not
	// allowed to fail a batch.
	{"dirty text", testDirtyText},
	// Pages are newest first, with no duplicate and no gap, even among
	// requests that started in the same millisecond.
	{"paging", testPaging},
	// Run, Status and Since select, alone and together, and paging keeps
	// the filter.
	{"filters", testFilters},
	// Limit: zero means DefaultLimit, more than MaxLimit means MaxLimit,
	// negative is an error.
	{"limit bounds", testLimitBounds},
	// A cursor the store did not make is an error that says so.
	{"bad cursor", testBadCursor},
	// Run returns a run oldest first, with attempts.
	{"run", testRun},
	// Prune deletes what ended before, attempts too, and nothing else.
	{"prune", testPrune},
	// Batches written at once from several goroutines all land.
	{"concurrent writes", testConcurrentWrites},
	// Every class is stored as its name and read back as itself.
	{"every class", testClasses},
	// A class this version does not know, as a newer replica may write,
	// reads as other rather than failing the read.
	{"unknown class", testUnknownClass},
	// Opening an up-to-date database again changes nothing.
	{"migrate again", testMigrateAgain},
	// Replicas opening a new database at once migrate it once.
	{"concurrent open", testConcurrentOpen},
}

func write(t *testing.T, s journal.Store, recs ...record.Request) {
	t.Helper()
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func get(t *testing.T, s journal.Store, id string) record.Request {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	return r
}

func testRoundTrip(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	r := record.Request{
		ID: "0195f0e2-0000-7000-8000-000000000001", Run: "run-1", Method: "POST",
		Path: "/v1/messages", Upstream: "anthropic", Slot: "slot-2", Model: "claude-test",
		Header: http.Header{"Content-Type": {"application/json"}, "X-Trace": {"a", "b"}, "Accept": {"text/event-stream"}},
		Start:  t0.In(time.FixedZone("east", 5*3600)), End: t0.Add(93*time.Second + 123456),
		Status: 529, Error: "upstream-exhausted", Stream: true, Committed: false, Held: true, Bytes: 1 << 40,
		Deadline: t0.Add(595 * time.Second), DeadlineSource: record.DeadlineSDK,
		Continuations: []record.Continuation{
			{Upstream: "anthropic", After: 1234, Prefill: 800, Outcome: record.ContinuationOK},
			{Upstream: "bedrock", After: 2345, Outcome: record.ContinuationUnsupported, Reason: "a tool call"},
		},
	}
	for i := 1; i <= 12; i++ {
		start := t0.Add(time.Duration(i) * 7777777 * time.Microsecond)
		r.Attempts = append(r.Attempts, record.Attempt{
			CallID: fmt.Sprintf("call-%02d", i), N: i,
			Start: start, End: start.Add(1234567 * time.Microsecond),
			// The gate key is not kept: stored drops it.
			Key: "slot 2", QueuedAhead: i % 3, GateWait: time.Duration(i) * 1500 * time.Microsecond,
			Status: 529, Class: outlast.ClassOverloaded, Error: "outlast: status 529",
			RetryIn: time.Duration(i) * time.Second, RetryAfter: 2500 * time.Microsecond,
			Bytes:         int64(i),
			AdmissionWait: time.Duration(i) * 2222 * time.Microsecond, Probe: i%4 == 0,
			Upstream: "anthropic", RetryAfterCut: i == 3,
			Continued: i == 5, PrefillBytes: int64(i%6/5) * 800,
		})
	}
	// The last two fell back, the first of them saying why.
	r.Attempts[10].Upstream, r.Attempts[10].Fallback = "bedrock", "spent"
	r.Attempts[11].Upstream = "bedrock"
	last := &r.Attempts[11]
	last.Class, last.Error, last.RetryIn, last.Status = outlast.ClassNone, "", 0, 200
	last.End = time.Time{} // an attempt may lack an end
	write(t, s, r)
	got := get(t, s, r.ID)
	if want := stored(r); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func testAdmission(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	r := request("adm", "", t0, 200, 3)
	// The first waited for a down upstream and probed it; the second
	// waited a fraction of a millisecond, which is cut; the third neither.
	r.Attempts[0].AdmissionWait, r.Attempts[0].Probe = 1500*time.Millisecond, true
	r.Attempts[0].Status, r.Attempts[0].Class = 503, outlast.ClassStatus5xx
	r.Attempts[1].AdmissionWait = 2750 * time.Microsecond
	write(t, s, r)
	got := get(t, s, r.ID)
	if want := stored(r); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got.Attempts, want.Attempts)
	}
	if a := got.Attempts[0]; a.AdmissionWait != 1500*time.Millisecond || !a.Probe {
		t.Errorf("attempt 1: got wait %v, probe %v; want 1.5s, true", a.AdmissionWait, a.Probe)
	}
	if a := got.Attempts[1]; a.AdmissionWait != 2*time.Millisecond || a.Probe {
		t.Errorf("attempt 2: got wait %v, probe %v; want 2ms, false", a.AdmissionWait, a.Probe)
	}
	// The columns hold whole milliseconds, for readers of the database.
	waits, err := queryStrings(context.Background(), b.raw(t, spec), `SELECT CAST(admission_wait_ms AS TEXT) FROM outlast_attempts ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1500", "2", "0"}; !reflect.DeepEqual(waits, want) {
		t.Errorf("admission_wait_ms: got %q, want %q", waits, want)
	}
}

func testFallback(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	r := request("fb", "", t0, 200, 3)
	r.Upstream = "openai"
	// Two tries at the request's own upstream, then one at azure, where
	// the request moved because bedrock, where it had moved from openai,
	// was down.
	r.Attempts[0].Upstream, r.Attempts[0].Status, r.Attempts[0].Class = "openai", 503, outlast.ClassStatus5xx
	r.Attempts[1].Upstream, r.Attempts[1].Status, r.Attempts[1].Class = "openai", 503, outlast.ClassStatus5xx
	r.Attempts[2].Upstream, r.Attempts[2].Fallback = "azure", "down"
	// The move to bedrock is on no attempt: the request's moves keep it.
	r.Moves = []record.Move{{From: "openai", To: "bedrock", Reason: "spent"}, {From: "bedrock", To: "azure", Reason: "down"}}
	write(t, s, r)
	got := get(t, s, r.ID)
	if want := stored(r); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v %+v\nwant %+v %+v", got.Attempts, got.Moves, want.Attempts, want.Moves)
	}
	// Run and List read the attempts the same way as Get.
	p, err := s.List(context.Background(), journal.Query{})
	if err != nil || len(p.Requests) != 1 || !reflect.DeepEqual(p.Requests[0], stored(r)) {
		t.Errorf("List: got %+v, %v; want the one request", p.Requests, err)
	}
	// The columns hold the names as given, for readers of the database.
	cols, err := queryStrings(context.Background(), b.raw(t, spec),
		`SELECT upstream || '/' || fallback FROM outlast_attempts ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"openai/", "openai/", "azure/down"}; !reflect.DeepEqual(cols, want) {
		t.Errorf("upstream/fallback: got %q, want %q", cols, want)
	}
}

func testRewrite(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	first := request("r1", "run", t0, 503, 3)
	write(t, s, first)
	second := request("r1", "run", t0, 200, 1)
	second.Bytes = 7
	write(t, s, second)
	if got, want := get(t, s, "r1"), stored(second); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Twice in one batch: the last wins.
	third := request("r1", "run", t0, 201, 2)
	write(t, s, first, third)
	if got, want := get(t, s, "r1"), stored(third); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func testClasses(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	classes := outlast.Classes()
	r := request("classes", "", t0, 502, len(classes))
	for i, c := range classes {
		r.Attempts[i].Class = c
	}
	write(t, s, r)
	if got, want := get(t, s, r.ID), stored(r); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// The column holds the names, which survive a reordering of the
	// constants, and which the migrations and other readers rely on.
	texts, err := queryStrings(context.Background(), b.raw(t, spec), `SELECT error_class FROM outlast_attempts ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range classes {
		want = append(want, c.String())
	}
	if !reflect.DeepEqual(texts, want) {
		t.Errorf("error_class: got %q, want %q", texts, want)
	}
}

func testUnknownClass(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	r := request("newer", "", t0, 502, 2)
	r.Attempts[0].Class, r.Attempts[1].Class = outlast.ClassRefused, outlast.ClassRefused
	write(t, s, r)
	if _, err := b.raw(t, spec).ExecContext(context.Background(),
		`UPDATE outlast_attempts SET error_class = 'teapot' WHERE n = 1`); err != nil {
		t.Fatal(err)
	}
	want := stored(r)
	want.Attempts[0].Class = outlast.ClassOther
	if got := get(t, s, r.ID); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func testNotFound(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	write(t, s, request("r1", "", t0, 200, 1))
	_, err := s.Get(context.Background(), "r2")
	if !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
	_, err = s.Run(context.Background(), "no-such-run")
	if !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("Run: got %v, want ErrNotFound", err)
	}
}

func testInvalid(t *testing.T, b backend) {
	dup := request("r3", "", t0, 200, 2)
	dup.Attempts[1].N = 1
	noStart := request("r4", "", time.Time{}, 200, 0)
	tests := []struct {
		name string
		bad  record.Request
	}{
		// The ID is the key.
		{"no id", request("", "", t0, 200, 1)},
		// The start orders every list.
		{"no start", noStart},
		// N is the attempt's key within its request.
		{"duplicate n", dup},
		// Fixed-width text times sort only within four-digit years.
		{"year 10000", request("r5", "", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 200, 0)},
	}
	s := open(t, b.fresh(t))
	for _, c := range tests {
		good := request("good-"+c.name, "", t0, 200, 1)
		err := s.Write(context.Background(), []record.Request{good, c.bad})
		if !errors.Is(err, journal.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, err)
		}
		if _, err := s.Get(context.Background(), good.ID); !errors.Is(err, journal.ErrNotFound) {
			t.Errorf("%s: the good record of the failed batch: got %v, want ErrNotFound", c.name, err)
		}
	}
}

func testDirtyText(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	r := request("dirty", "", t0, 400, 1)
	r.Path = "/v1/\x00chat\xff"
	r.Header = http.Header{"X-Odd": {"a\x00b", "\xfe"}}
	r.Attempts[0].Error = "bad \x00 byte \xc3"
	r.Attempts[0].Upstream, r.Attempts[0].Fallback = "az\x00ure\xff", "do\x00wn"
	write(t, s, r)
	got := get(t, s, "dirty")
	want := stored(r)
	want.Path = "/v1/chat\uFFFD"
	want.Header = http.Header{"X-Odd": {"ab", "\uFFFD"}}
	want.Attempts[0].Error = "bad  byte \uFFFD"
	want.Attempts[0].Upstream, want.Attempts[0].Fallback = "azure\uFFFD", "down"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// pageAll lists q page by page and returns the IDs in order.
func pageAll(t *testing.T, s journal.Store, q journal.Query) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("more than 100 pages: the cursor does not advance")
		}
		p, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		for _, r := range p.Requests {
			ids = append(ids, r.ID)
			if len(r.Attempts) == 0 {
				t.Errorf("List: %s has no attempts", r.ID)
			}
		}
		if p.Next == "" {
			return ids
		}
		q.Cursor = p.Next
	}
}

func testPaging(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	// 23 requests, three to a millisecond, so that pages break inside a
	// millisecond and the ID must order them.
	var recs []record.Request
	var want []string
	for i := range 23 {
		id := fmt.Sprintf("r%02d", i)
		recs = append(recs, request(id, "", t0.Add(time.Duration(i/3)*time.Millisecond), 200, 1))
		want = append([]string{id}, want...) // newest first
	}
	write(t, s, recs...)
	for _, limit := range []int{1, 2, 5, 22, 23, 24, 100} {
		got := pageAll(t, s, journal.Query{Limit: limit})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("limit %d: got %v, want %v", limit, got, want)
		}
	}
}

func testFilters(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	write(t, s,
		request("a1", "a", t0, 200, 1),
		request("a2", "a", t0.Add(time.Minute), 503, 2),
		request("a3", "a", t0.Add(2*time.Minute), 200, 1),
		request("b1", "b", t0.Add(30*time.Second), 503, 3),
		request("b2", "b", t0.Add(90*time.Second), 429, 2),
		request("n1", "", t0.Add(3*time.Minute), 200, 1),
	)
	tests := []struct {
		name string
		q    journal.Query
		want []string
	}{
		// No filter: everything, newest first.
		{"all", journal.Query{}, []string{"n1", "a3", "b2", "a2", "b1", "a1"}},
		// One run.
		{"run", journal.Query{Run: "a"}, []string{"a3", "a2", "a1"}},
		// One status, across runs.
		{"status", journal.Query{Status: 503}, []string{"a2", "b1"}},
		// Since is inclusive of a request that started exactly then.
		{"since", journal.Query{Since: t0.Add(90 * time.Second)}, []string{"n1", "a3", "b2"}},
		// Filters combine, and hold across pages.
		{"all three, paged", journal.Query{Run: "b", Status: 503, Since: t0.Add(time.Second), Limit: 1}, []string{"b1"}},
		{"run paged", journal.Query{Run: "a", Limit: 1}, []string{"a3", "a2", "a1"}},
		// A filter nothing matches is an empty page, not an error.
		{"none", journal.Query{Run: "zzz"}, nil},
	}
	for _, c := range tests {
		if got := pageAll(t, s, c.q); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func testLimitBounds(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	recs := make([]record.Request, journal.MaxLimit+1)
	for i := range recs {
		recs[i] = request(fmt.Sprintf("r%04d", i), "", t0.Add(time.Duration(i)*time.Millisecond), 200, 0)
	}
	write(t, s, recs...)
	tests := []struct {
		name     string
		limit    int
		wantLen  int
		wantNext bool
	}{
		{"zero is the default", 0, journal.DefaultLimit, true},
		{"one", 1, 1, true},
		{"max", journal.MaxLimit, journal.MaxLimit, true},
		{"over max is max", journal.MaxLimit * 5, journal.MaxLimit, true},
	}
	for _, c := range tests {
		p, err := s.List(context.Background(), journal.Query{Limit: c.limit})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(p.Requests) != c.wantLen || (p.Next != "") != c.wantNext {
			t.Errorf("%s: got %d records, next %q; want %d, next %v", c.name, len(p.Requests), p.Next, c.wantLen, c.wantNext)
		}
	}
	// The last page of 1001 at the max has one record and no next.
	p, _ := s.List(context.Background(), journal.Query{Limit: journal.MaxLimit})
	p, err := s.List(context.Background(), journal.Query{Limit: journal.MaxLimit, Cursor: p.Next})
	if err != nil || len(p.Requests) != 1 || p.Next != "" || p.Requests[0].ID != "r0000" {
		t.Errorf("last page: got %d records, next %q, err %v; want r0000 alone", len(p.Requests), p.Next, err)
	}
	if _, err := s.List(context.Background(), journal.Query{Limit: -1}); err == nil {
		t.Errorf("limit -1: got no error, want one")
	}
}

func testBadCursor(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	write(t, s, request("r1", "", t0, 200, 1))
	tests := []struct {
		name, cursor string
	}{
		// Not base64url at all.
		{"not base64", "!!!"},
		// base64url of something that is not a cursor.
		{"no separator", "aGVsbG8"},
		// A time that is not a number.
		{"bad time", "eHggcjE"}, // "xx r1"
		// No ID.
		{"no id", "MTIzIA"}, // "123 "
	}
	for _, c := range tests {
		_, err := s.List(context.Background(), journal.Query{Cursor: c.cursor})
		if !errors.Is(err, journal.ErrBadCursor) {
			t.Errorf("%s: got %v, want ErrBadCursor", c.name, err)
		}
	}
}

func testRun(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	// Written out of order, and across batches.
	write(t, s, request("x3", "x", t0.Add(3*time.Second), 200, 1), request("y1", "y", t0, 200, 1))
	write(t, s, request("x1", "x", t0.Add(time.Second), 503, 3), request("x2", "x", t0.Add(2*time.Second), 429, 2))
	recs, err := s.Run(context.Background(), "x")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []record.Request{
		stored(request("x1", "x", t0.Add(time.Second), 503, 3)),
		stored(request("x2", "x", t0.Add(2*time.Second), 429, 2)),
		stored(request("x3", "x", t0.Add(3*time.Second), 200, 1)),
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("got %+v, want %+v", recs, want)
	}
	if _, err := s.Run(context.Background(), ""); err == nil {
		t.Errorf("Run(\"\"): got no error, want one")
	}
	// A run longer than the bound is refused whole, never cut short.
	journal.SetMaxRun(s, 3)
	if recs, err := s.Run(context.Background(), "x"); err != nil || len(recs) != 3 {
		t.Errorf("Run of 3 within a bound of 3: got %d, %v; want them all", len(recs), err)
	}
	write(t, s, request("x4", "x", t0.Add(4*time.Second), 200, 1))
	if recs, err := s.Run(context.Background(), "x"); !errors.Is(err, journal.ErrRunTooLong) || recs != nil {
		t.Errorf("Run of 4 within a bound of 3: got %d, %v; want none and ErrRunTooLong", len(recs), err)
	}
}

func testPrune(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	unended := request("unended", "", t0, 0, 1)
	unended.End = time.Time{}
	var recs []record.Request
	for i := range 2500 { // more than one prune chunk
		recs = append(recs, request(fmt.Sprintf("old%04d", i), "", t0.Add(-time.Hour), 200, 2))
	}
	write(t, s, recs...)
	// old* ended at t0-59m, edge at t0+1s, new at t0+1h+1s.
	// stepped ended before the cut by its clock, which stepped back, but
	// started after it.
	stepped := request("stepped", "", t0.Add(2*time.Second), 200, 1)
	stepped.End = t0.Add(-time.Hour)
	write(t, s, unended, stepped, request("edge", "", t0, 200, 1), request("new", "", t0.Add(time.Hour), 200, 1))
	n, err := s.Prune(context.Background(), t0.Add(time.Second))
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	// unended counts from its start, t0, and goes; edge ended at the
	// cut itself and stays, and so does stepped.
	if n != 2501 {
		t.Errorf("Prune: got %d deleted, want 2501", n)
	}
	if got := pageAll(t, s, journal.Query{}); !reflect.DeepEqual(got, []string{"new", "stepped", "edge"}) {
		t.Errorf("left: got %v, want [new stepped edge]", got)
	}
	if got := count(t, b, spec, "outlast_attempts"); got != 3 {
		t.Errorf("attempt rows left: got %d, want 3", got)
	}
	if n, err := s.Prune(context.Background(), t0.Add(time.Second)); n != 0 || err != nil {
		t.Errorf("Prune again: got %d, %v; want 0, nil", n, err)
	}
}

func testConcurrentWrites(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	const writers, batches, per = 6, 10, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Go(func() {
			for bt := range batches {
				var recs []record.Request
				for i := range per {
					id := fmt.Sprintf("w%d-b%d-%d", w, bt, i)
					recs = append(recs, request(id, "c", t0.Add(time.Duration(w*1000+bt*10+i)*time.Millisecond), 200, 2))
				}
				if err := s.Write(context.Background(), recs); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Write: %v", err)
	}
	recs, err := s.Run(context.Background(), "c")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := len(recs), writers*batches*per; got != want {
		t.Errorf("got %d records, want %d", got, want)
	}
	for _, r := range recs {
		if len(r.Attempts) != 2 {
			t.Errorf("%s: got %d attempts, want 2", r.ID, len(r.Attempts))
		}
	}
}

func testMigrateAgain(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	write(t, s, request("r1", "", t0, 200, 2))
	before := dump(t, b, spec)
	again := open(t, spec)
	if got := dump(t, b, spec); got != before {
		t.Errorf("the second Open changed the database:\ngot  %s\nwant %s", got, before)
	}
	if got, want := get(t, again, "r1"), stored(request("r1", "", t0, 200, 2)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	checkVersions(t, b, spec)
}

func testConcurrentOpen(t *testing.T, b backend) {
	spec := b.fresh(t)
	const replicas = 4
	var wg sync.WaitGroup
	stores := make([]journal.Store, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() { stores[i], errs[i] = journal.Open(context.Background(), spec) })
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Errorf("replica %d: Open: %v", i, errs[i])
			continue
		}
		stores[i].Close()
	}
	checkVersions(t, b, spec)
}

func TestOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    string
		wantNil bool // a nil Store and a nil error
		wantErr bool
	}{
		// off keeps no record, and says so with a nil Store.
		{"off", "off", true, false},
		// An in-memory SQLite database works, for tests and trials.
		{"memory", "sqlite::memory:", false, false},
		// A driver the journal does not know.
		{"unknown scheme", "mysql://h/db", false, true},
		// sqlite: needs its path.
		{"no path", "sqlite:", false, true},
		// The driver would read a ? as its own settings.
		{"query in path", "sqlite:a.db?mode=ro", false, true},
		// A server that is not there fails Open, not the first write.
		{"no server", "postgres://u:pw-secret@127.0.0.1:1/x?connect_timeout=5", false, true},
		// libpq and pgx take the password as a parameter too.
		{"password parameter", "postgres://u@127.0.0.1:1/x?connect_timeout=5&password=pw-secret", false, true},
		{"ssl password parameter", "postgres://u@127.0.0.1:1/x?sslpassword=pw-secret&connect_timeout=5", false, true},
		{"password parameter, bad port", "postgres://u@127.0.0.1:99999/x?password=pw-secret", false, true},
		{"password parameter, unknown scheme", "mysql://u@h/x?password=pw-secret", false, true},
	}
	for _, c := range tests {
		s, err := journal.Open(context.Background(), c.spec)
		if (err != nil) != c.wantErr || (s == nil) != (c.wantNil || c.wantErr) {
			t.Errorf("%s: Open(%q): got %v, %v; want nil store %v, error %v", c.name, c.spec, s, err, c.wantNil || c.wantErr, c.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "pw-secret") {
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
		if s != nil {
			write(t, s, request("m1", "", t0, 200, 1))
			get(t, s, "m1")
			s.Close()
		}
	}
}

// OpenExisting never makes a journal where there is none: a missing
// SQLite file, or a database without the journal's tables, is
// ErrNoJournal, and is left as it was; a journal that Open made opens,
// with what it holds.
func TestOpenExisting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		spec := b.fresh(t)
		if _, err := journal.OpenExisting(t.Context(), spec); !errors.Is(err, journal.ErrNoJournal) {
			t.Fatalf("a fresh database: got %v, want ErrNoJournal", err)
		}
		if b.name == "sqlite" {
			if _, err := os.Stat(strings.TrimPrefix(spec, "sqlite:")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after OpenExisting: the file: got %v, want it still not to exist", err)
			}
		} else if tables := countTables(t, b, spec); tables != 0 {
			t.Errorf("after OpenExisting: got %d tables, want none", tables)
		}
		s := open(t, spec)
		if err := s.Write(t.Context(), []record.Request{request("r1", "", t0, 200, 1)}); err != nil {
			t.Fatal(err)
		}
		r, err := journal.OpenExisting(t.Context(), spec)
		if err != nil {
			t.Fatalf("an existing journal: %v", err)
		}
		defer r.Close()
		if _, err := r.Get(t.Context(), "r1"); err != nil {
			t.Errorf("reading it: %v", err)
		}
	})
	if _, err := journal.OpenExisting(t.Context(), "off"); !errors.Is(err, journal.ErrNoJournal) {
		t.Errorf("off: got %v, want ErrNoJournal", err)
	}
}

// countTables counts the journal's tables in the database of spec.
func countTables(t *testing.T, b backend, spec string) int {
	t.Helper()
	db := b.raw(t, spec)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'outlast_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Ended goes by end, then ID: requests that ended in the same millisecond
// are neither skipped nor repeated from page to page, a request that
// started first but ended last comes last, and one with no end never.
func TestEnded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := open(t, b.fresh(t))
		long := request("a-long", "", t0, 200, 1)
		long.End = t0.Add(time.Hour)
		same1, same2 := request("b", "", t0.Add(time.Second), 200, 1), request("c", "", t0.Add(2*time.Second), 200, 1)
		same1.End, same2.End = t0.Add(time.Minute), t0.Add(time.Minute)
		unfinished := request("d-open", "", t0, 200, 1)
		unfinished.End = time.Time{}
		if err := s.Write(t.Context(), []record.Request{long, same1, same2, unfinished}); err != nil {
			t.Fatal(err)
		}
		var got []string
		end, id := time.Time{}, ""
		for {
			page, err := s.Ended(t.Context(), end, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			got = append(got, page[0].ID)
			end, id = page[0].End, page[0].ID
			if len(got) > 5 {
				t.Fatalf("paging does not end: %v", got)
			}
		}
		if want := []string{"b", "c", "a-long"}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		if _, err := s.Ended(t.Context(), time.Time{}, "", -1); err == nil {
			t.Error("a negative limit: got no error, want one")
		}
	})
}

// A reader of a SQLite journal writes nothing: an empty file stays empty,
// a journal whose file and folder may not be written (a user reading the
// gateway's) is read, and so is one whose path a URI would read
// otherwise. (Root may write any file, so the modes are checked only
// where they bind.)
func TestOpenExistingReadOnly(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.OpenExisting(t.Context(), "sqlite:"+empty); !errors.Is(err, journal.ErrNoJournal) {
		t.Errorf("an empty file: got %v, want ErrNoJournal", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("an empty file after OpenExisting: %v, %d bytes; want it empty still", err, fi.Size())
	}
	sub := filepath.Join(dir, "a b%20c")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sub, "j.db")
	s := open(t, "sqlite:"+path)
	if err := s.Write(t.Context(), []record.Request{request("r1", "", t0, 200, 1)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	os.Chmod(path, 0o444)
	os.Chmod(sub, 0o555)
	t.Cleanup(func() { os.Chmod(sub, 0o755) })
	r, err := journal.OpenExisting(t.Context(), "sqlite:"+path)
	if err != nil {
		t.Fatalf("a journal that may only be read: %v", err)
	}
	defer r.Close()
	if _, err := r.Get(t.Context(), "r1"); err != nil {
		t.Errorf("reading it: %v", err)
	}
}

// A reader of a SQLite journal that another process holds locked hears
// so after one busy timeout, not twenty.
func TestOpenExistingLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	s := open(t, "sqlite:"+path)
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"PRAGMA locking_mode=EXCLUSIVE", "BEGIN EXCLUSIVE", "INSERT INTO outlast_schema_version (version, name, applied_at) VALUES (9999, 'x', 0)"} {
		if _, err := conn.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := journal.OpenExisting(ctx, "sqlite:"+path); err == nil || !strings.Contains(err.Error(), "holds its lock") {
		t.Errorf("a journal locked by another: got %v, want it said at once", err)
	}
}

// A SQLite path that cannot be a file says why, where SQLite would say
// only "unable to open database file": a folder, a folder that does not
// exist, and a ~ that nothing expands.
func TestOpenSQLiteSaysWhy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ spec, want string }{
		{"sqlite:" + dir, "is a folder"},
		{"sqlite:" + filepath.Join(dir, "missing", "outlast.db"), "no such file or directory"},
		{"sqlite:~/outlast.db", "~ is not expanded"},
	} {
		if _, err := journal.Open(t.Context(), c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q): got %v, want it to say %q", c.spec, err, c.want)
		}
	}
}
