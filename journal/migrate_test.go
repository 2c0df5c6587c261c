package journal_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
)

// TestMigrateSplitsStatus opens a database at schema version 1, whose
// failed statuses an older replica stored as the one class "status", and
// checks that Open's migration names each by its status, as
// outlast.StatusClass does, and leaves every other class alone.
func TestMigrateSplitsStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		spec := b.fresh(t)
		db := b.raw(t, spec)
		if err := journal.MigrateTo(ctx, db, b.name, 1); err != nil {
			t.Fatalf("MigrateTo 1: %v", err)
		}
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
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		db.Close() // SQLite's WAL mode, which Open sets, wants the file to itself

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
