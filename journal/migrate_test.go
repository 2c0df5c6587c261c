package journal_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// TestMigrateSplitsStatus opens a database at schema version 1, whose
// failed statuses an older replica stored as the one class "status", and
// checks that Open's migration names each by its status, as
// outlast.StatusClass does, and leaves every other class alone.
func TestMigrateSplitsStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		attempts := []struct {
			status    int
			class     string // as version 1 stored it
			wantText  string // as the migration leaves it
			wantClass outlast.Class
		}{
			// 429 and 529 ask the client to slow down: classes of their own.
			{429, "status", "rate_limited", outlast.ClassRateLimited},
			{529, "status", "overloaded", outlast.ClassOverloaded},
			// Any other failed status, split by its hundred.
			{404, "status", "status_4xx", outlast.ClassStatus4xx},
			{503, "status", "status_5xx", outlast.ClassStatus5xx},
			// A status outside 400–599, as a custom attempt may give.
			{302, "status", "other", outlast.ClassOther},
			// Classes that were never "status" keep their names, whatever
			// the status: an error event comes with one.
			{0, "refused", "refused", outlast.ClassRefused},
			{529, "error_event", "error_event", outlast.ClassErrorEvent},
			// A success had no class, and still has none.
			{200, "", "", outlast.ClassNone},
		}
		const start = "'2025-03-14T15:09:26.535Z'"
		stmts := []string{`INSERT INTO outlast_requests (` + requestColumns + `) VALUES
			('old', '', 'POST', '/v1/messages', 'anthropic', '', '', '{}', ` + start + `, NULL, 200, '', 8, FALSE, FALSE, 0)`}
		for i, a := range attempts {
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO outlast_attempts (`+attemptColumns+`) VALUES
				('old', %d, 'call-%d', %s, NULL, 0, 0, %d, '%s', '', 0, 0, 0)`, i+1, i+1, start, a.status, a.class))
		}
		spec := oldDatabase(t, b, 1, stmts...)

		s := open(t, spec)
		texts, err := queryStrings(ctx, b.raw(t, spec), `SELECT error_class FROM outlast_attempts ORDER BY n`)
		if err != nil {
			t.Fatal(err)
		}
		r := get(t, s, "old")
		if len(texts) != len(attempts) || len(r.Attempts) != len(attempts) {
			t.Fatalf("got %d rows and %d attempts, want %d", len(texts), len(r.Attempts), len(attempts))
		}
		for i, a := range attempts {
			if texts[i] != a.wantText {
				t.Errorf("status %d, class %q: got error_class %q, want %q", a.status, a.class, texts[i], a.wantText)
			}
			if got := r.Attempts[i].Class; got != a.wantClass {
				t.Errorf("status %d, class %q: got Class %v, want %v", a.status, a.class, got, a.wantClass)
			}
		}
		checkVersions(t, b, spec)
	})
}

// TestMigrateAdmission opens a database at schema version 3, with a
// request that an older replica wrote, and checks that Open's migration
// keeps it whole, its attempts with no admission wait and no probe; that
// the migrated database takes the new fields and state changes; and that
// an older replica's insert, which names neither new column, still works.
func TestMigrateAdmission(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const start, end = "'2025-03-14T15:09:26.535Z'", "'2025-03-14T15:09:28.000Z'"
		stmts := []string{
			`INSERT INTO outlast_requests (` + requestColumns + `) VALUES
				('old', 'run', 'POST', '/v1/messages', 'anthropic', '', 'm', '{}', ` + start + `, ` + end + `, 200, '', 2, FALSE, TRUE, 7)`,
			`INSERT INTO outlast_attempts (` + attemptColumns + `) VALUES
				('old', 1, 'call-1', ` + start + `, ` + start + `, 2, 30, 503, 'status_5xx', 'outlast: status 503', 1000, 0, 0)`,
			`INSERT INTO outlast_attempts (` + attemptColumns + `) VALUES
				('old', 2, 'call-2', ` + end + `, ` + end + `, 0, 0, 200, '', '', 0, 0, 7)`,
		}
		spec := oldDatabase(t, b, 3, stmts...)

		s := open(t, spec)
		got := get(t, s, "old")
		at := time.Date(2025, 3, 14, 15, 9, 26, 535e6, time.UTC)
		want := record.Request{
			ID: "old", Run: "run", Method: "POST", Path: "/v1/messages", Upstream: "anthropic", Model: "m",
			Header: http.Header{}, Start: at, End: at.Add(1465 * time.Millisecond), Status: 200, Committed: true, Bytes: 7,
			Attempts: []record.Attempt{
				{CallID: "call-1", N: 1, Start: at, End: at, QueuedAhead: 2, GateWait: 30 * time.Millisecond, Status: 503,
					Class: outlast.ClassStatus5xx, Error: "outlast: status 503", RetryIn: time.Second},
				{CallID: "call-2", N: 2, Start: at.Add(1465 * time.Millisecond), End: at.Add(1465 * time.Millisecond), Status: 200, Bytes: 7},
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the old request: got  %+v\nwant %+v", got, want)
		}
		if cs := states(t, s, journal.StateQuery{}); len(cs) != 0 {
			t.Errorf("state changes: got %v, want none yet", cs)
		}

		// The migrated database keeps what the new version writes...
		r := request("new", "run", t0, 200, 1)
		r.Attempts[0].AdmissionWait, r.Attempts[0].Probe = 1500*time.Millisecond, true
		write(t, s, r)
		if got := get(t, s, "new"); !reflect.DeepEqual(got, stored(r)) {
			t.Errorf("a new request: got %+v, want %+v", got, stored(r))
		}
		c := change("anthropic", t0, outlast.Healthy, outlast.Down)
		writeStates(t, s, c)
		if got := states(t, s, journal.StateQuery{}); !reflect.DeepEqual(got, []record.StateChange{storedChange(c)}) {
			t.Errorf("state changes: got %v, want %v", got, c)
		}
		// ...and what an older replica, sharing it, writes.
		old := `INSERT INTO outlast_attempts (` + attemptColumns + `) VALUES ('old', 3, 'call-3', NULL, NULL, 0, 0, 200, '', '', 0, 0, 0)`
		if _, err := b.raw(t, spec).ExecContext(ctx, old); err != nil {
			t.Fatalf("an older replica's insert: %v", err)
		}
		if a := get(t, s, "old").Attempts; len(a) != 3 || a[2].AdmissionWait != 0 || a[2].Probe {
			t.Errorf("the older replica's attempt: got %+v, want a third with no wait and no probe", a)
		}
		checkVersions(t, b, spec)
	})
}

// TestMigrateFallback opens a database at schema version 4, with a
// request that an older replica wrote, and checks that Open's migration
// 5 keeps it whole, its attempts with no upstream of their own and no
// fallback; that the migrated database keeps what the new version
// writes; and that an older replica's insert, which names neither new
// column, still works.
func TestMigrateFallback(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const start, end = "'2025-03-14T15:09:26.535Z'", "'2025-03-14T15:09:28.000Z'"
		const v4 = attemptColumns + ", admission_wait_ms, probe"
		stmts := []string{
			`INSERT INTO outlast_requests (` + requestColumns + `) VALUES
				('old', 'run', 'POST', '/v1/messages', 'anthropic', '', 'm', '{}', ` + start + `, ` + end + `, 200, '', 2, FALSE, TRUE, 7)`,
			`INSERT INTO outlast_attempts (` + v4 + `) VALUES
				('old', 1, 'call-1', ` + start + `, ` + start + `, 0, 0, 503, 'status_5xx', 'outlast: status 503', 1000, 0, 0, 250, TRUE)`,
			`INSERT INTO outlast_attempts (` + v4 + `) VALUES
				('old', 2, 'call-2', ` + end + `, ` + end + `, 0, 0, 200, '', '', 0, 0, 7, 0, FALSE)`,
		}
		spec := oldDatabase(t, b, 4, stmts...)

		s := open(t, spec)
		got := get(t, s, "old")
		at := time.Date(2025, 3, 14, 15, 9, 26, 535e6, time.UTC)
		want := record.Request{
			ID: "old", Run: "run", Method: "POST", Path: "/v1/messages", Upstream: "anthropic", Model: "m",
			Header: http.Header{}, Start: at, End: at.Add(1465 * time.Millisecond), Status: 200, Committed: true, Bytes: 7,
			Attempts: []record.Attempt{
				{CallID: "call-1", N: 1, Start: at, End: at, Status: 503, Class: outlast.ClassStatus5xx,
					Error: "outlast: status 503", RetryIn: time.Second, AdmissionWait: 250 * time.Millisecond, Probe: true},
				{CallID: "call-2", N: 2, Start: at.Add(1465 * time.Millisecond), End: at.Add(1465 * time.Millisecond), Status: 200, Bytes: 7},
			},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the old request: got  %+v\nwant %+v", got, want)
		}

		// The migrated database keeps what the new version writes...
		r := request("new", "run", t0, 200, 2)
		r.Attempts[0].Upstream = "openai"
		r.Attempts[1].Upstream, r.Attempts[1].Fallback = "azure", "down"
		write(t, s, r)
		if got := get(t, s, "new"); !reflect.DeepEqual(got, stored(r)) {
			t.Errorf("a new request: got %+v, want %+v", got, stored(r))
		}
		// ...and what an older replica, sharing it, writes.
		old := `INSERT INTO outlast_attempts (` + v4 + `) VALUES ('old', 3, 'call-3', NULL, NULL, 0, 0, 200, '', '', 0, 0, 0, 0, FALSE)`
		if _, err := b.raw(t, spec).ExecContext(ctx, old); err != nil {
			t.Fatalf("an older replica's insert: %v", err)
		}
		if a := get(t, s, "old").Attempts; len(a) != 3 || a[2].Upstream != "" || a[2].Fallback != "" {
			t.Errorf("the older replica's attempt: got %+v, want a third with no upstream and no fallback", a)
		}
		checkVersions(t, b, spec)
	})
}

// TestMigrateMoves opens a database at schema version 5, with a request
// that an older replica wrote, and checks that Open's migration 6 keeps
// it whole, with no moves; that the migrated database keeps what the new
// version writes; and that an older replica's insert, which names no
// moves, still works.
func TestMigrateMoves(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const start = "'2025-03-14T15:09:26.535Z'"
		const v5 = attemptColumns + ", admission_wait_ms, probe, upstream, fallback"
		insert := func(id string) []string {
			return []string{
				`INSERT INTO outlast_requests (` + requestColumns + `) VALUES
					('` + id + `', '', 'POST', '/v1/messages', 'a', '', 'm', '{}', ` + start + `, ` + start + `, 200, '', 1, FALSE, TRUE, 7)`,
				`INSERT INTO outlast_attempts (` + v5 + `) VALUES
					('` + id + `', 1, 'call-1', ` + start + `, ` + start + `, 0, 0, 200, '', '', 0, 0, 7, 0, FALSE, 'b', 'spent')`,
			}
		}
		spec := oldDatabase(t, b, 5, insert("old")...)

		s := open(t, spec)
		at := time.Date(2025, 3, 14, 15, 9, 26, 535e6, time.UTC)
		want := record.Request{
			ID: "old", Method: "POST", Path: "/v1/messages", Upstream: "a", Model: "m",
			Header: http.Header{}, Start: at, End: at, Status: 200, Committed: true, Bytes: 7,
			Attempts: []record.Attempt{{CallID: "call-1", N: 1, Start: at, End: at, Status: 200, Bytes: 7,
				Upstream: "b", Fallback: "spent"}},
		}
		if got := get(t, s, "old"); !reflect.DeepEqual(got, want) {
			t.Errorf("the old request: got  %+v\nwant %+v", got, want)
		}

		// The migrated database keeps what the new version writes...
		r := request("new", "run", t0, 503, 1)
		r.Attempts[0].Upstream = "a"
		r.Moves = []record.Move{{From: "a", To: "b", Reason: "spent"}}
		write(t, s, r)
		if got := get(t, s, "new"); !reflect.DeepEqual(got, stored(r)) {
			t.Errorf("a new request: got %+v, want %+v", got, stored(r))
		}
		// ...and what an older replica, sharing it, writes.
		for _, stmt := range insert("older") {
			if _, err := b.raw(t, spec).ExecContext(ctx, stmt); err != nil {
				t.Fatalf("an older replica's insert: %v", err)
			}
		}
		if got := get(t, s, "older"); got.Moves != nil || len(got.Attempts) != 1 {
			t.Errorf("the older replica's request: got moves %+v and %d attempts, want no moves and 1", got.Moves, len(got.Attempts))
		}
		checkVersions(t, b, spec)
	})
}

// TestMigrateHeld opens a database at schema version 8, with a request
// that an older replica wrote, and checks that Open's migration 9 reads
// it as not held; that the migrated database keeps a held answer; and
// that an older replica's insert, which names no held column, still
// works.
func TestMigrateHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		const start = "'2025-03-14T15:09:26.535Z'"
		insert := func(id string) string {
			return `INSERT INTO outlast_requests (` + requestColumns + `) VALUES
				('` + id + `', '', 'POST', '/v1/messages', 'a', '', 'm', '{}', ` + start + `, ` + start + `, 200, '', 0, FALSE, TRUE, 7)`
		}
		spec := oldDatabase(t, b, 8, insert("old"))

		s := open(t, spec)
		if got := get(t, s, "old"); got.Held || got.Bytes != 7 {
			t.Errorf("the old request: got held %v, %d bytes; want not held, 7 bytes", got.Held, got.Bytes)
		}
		// The migrated database keeps what the new version writes...
		r := request("new", "run", t0, 200, 1)
		r.Held = true
		write(t, s, r)
		if got := get(t, s, "new"); !reflect.DeepEqual(got, stored(r)) {
			t.Errorf("a new request: got %+v, want %+v", got, stored(r))
		}
		// ...and what an older replica, sharing it, writes.
		if _, err := b.raw(t, spec).ExecContext(ctx, insert("older")); err != nil {
			t.Fatalf("an older replica's insert: %v", err)
		}
		if got := get(t, s, "older"); got.Held {
			t.Errorf("the older replica's request: got held, want not held")
		}
		checkVersions(t, b, spec)
	})
}

// The columns of the version 1 tables, for rows written by hand.
const (
	requestColumns = "id, run, method, path, upstream, slot, model, headers, started_at, ended_at, status, error, attempt_count, stream, committed, bytes"
	attemptColumns = "request_id, n, call_id, started_at, ended_at, queued_ahead, gate_wait_ms, status, error_class, error, retry_in_ms, retry_after_ms, bytes"
)

// checkVersions checks that spec's database has had every migration
// applied, each once.
func checkVersions(t *testing.T, b backend, spec string) {
	t.Helper()
	got, err := queryStrings(context.Background(), b.raw(t, spec), `SELECT version FROM outlast_schema_version ORDER BY version`)
	if err != nil {
		t.Fatalf("schema versions: %v", err)
	}
	var want []string
	for v := 1; v <= journal.LatestVersion; v++ {
		want = append(want, fmt.Sprint(v))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema versions: got %v, want %v", got, want)
	}
}

// A read-only open of a journal that an older outlast made, and did not
// migrate, says so, with the versions, where its reads would fail on a
// missing column.
func TestOpenExistingOld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		spec := oldDatabase(t, b, 5)
		s, err := journal.OpenExisting(context.Background(), spec)
		if err == nil {
			s.Close()
			t.Fatal("opened a version 5 journal to read, want an error")
		}
		if msg := err.Error(); !strings.Contains(msg, "schema version 5") || !strings.Contains(msg, "outlast serve") {
			t.Errorf("got %q, want the version it is at and how to migrate it", msg)
		}
	})
}

// oldDatabase returns a fresh database of b at schema version, with
// stmts, an older replica's writes, run in it, and closed: SQLite's WAL
// mode, which Open sets, wants the file to itself.
func oldDatabase(t *testing.T, b backend, version int, stmts ...string) string {
	t.Helper()
	ctx := context.Background()
	spec := b.fresh(t)
	db := b.raw(t, spec)
	if err := journal.MigrateTo(ctx, db, b.name, version); err != nil {
		t.Fatalf("MigrateTo %d: %v", version, err)
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	db.Close()
	return spec
}
