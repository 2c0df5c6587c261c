package journal_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the driver "pgx", to look under the Store
	"go.uber.org/goleak"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/recordtest"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// postgresEnv names the variable with the URL of a PostgreSQL database
// the tests may create schemas in. Without it the PostgreSQL runs skip.
const postgresEnv = "OUTLAST_TEST_POSTGRES"

// A backend is one kind of Store the shared tests run against.
type backend struct {
	name string
	// fresh returns the spec of a new, empty database that is removed
	// when t ends.
	fresh func(t testing.TB) string
	// raw opens the database of spec directly, to look under the Store.
	raw func(t *testing.T, spec string) *sql.DB
	// tables lists the database's tables, for raw.
	tables string
}

var sqliteBackend = backend{
	name: "sqlite",
	fresh: func(t testing.TB) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "journal.db")
	},
	raw: func(t *testing.T, spec string) *sql.DB {
		return rawDB(t, "sqlite", strings.TrimPrefix(spec, "sqlite:"))
	},
	tables: `SELECT name FROM sqlite_master WHERE type = 'table'`,
}

var postgresBackend = backend{
	name:  "postgres",
	fresh: freshPostgres,
	raw: func(t *testing.T, spec string) *sql.DB {
		return rawDB(t, "pgx", spec)
	},
	tables: `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
}

// backends returns the backends to run: SQLite always, PostgreSQL when
// postgresEnv is set.
func backends() []backend {
	bs := []backend{sqliteBackend}
	if os.Getenv(postgresEnv) != "" {
		bs = append(bs, postgresBackend)
	}
	return bs
}

// forEachBackend runs f as a parallel subtest per backend, and notes the
// PostgreSQL run it skips.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
	if os.Getenv(postgresEnv) == "" {
		t.Run("postgres", func(t *testing.T) { t.Skip(postgresEnv + " is unset") })
	}
}

// freshPostgres creates a schema of its own in the database at
// postgresEnv and returns a spec whose search_path is that schema, so
// that runs in parallel never meet.
func freshPostgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	schema := "t_" + strings.ToLower(rand.Text()[:12])
	admin := rawDB(t, "pgx", base)
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		// The admin connection closes in an earlier-registered cleanup's
		// turn, after this one.
		if _, err := admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", postgresEnv, err)
	}
	q := u.Query()
	// pgx sends a parameter it does not know as a run-time setting.
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func rawDB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// open opens spec as a Store that closes when t ends.
func open(t *testing.T, spec string) journal.Store {
	t.Helper()
	s, err := journal.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// dump returns every column of every row of every table of spec's
// database, as text.
func dump(t *testing.T, b backend, spec string) string {
	t.Helper()
	db := b.raw(t, spec)
	ctx := context.Background()
	tables, err := queryStrings(ctx, db, b.tables)
	if err != nil {
		t.Fatalf("tables: %v", err)
	}
	var out strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, "SELECT * FROM "+table)
		if err != nil {
			t.Fatalf("select %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("scan %s: %v", table, err)
			}
			fmt.Fprintf(&out, "%s:", table)
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				fmt.Fprintf(&out, " %s=%v", cols[i], v)
			}
			out.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("rows %s: %v", table, err)
		}
		rows.Close()
	}
	return out.String()
}

func queryStrings(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// count returns the rows of a table in spec's database.
func count(t *testing.T, b backend, spec, table string) int {
	t.Helper()
	var n int
	if err := b.raw(t, spec).QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// t0 is the tests' reference time, with sub-millisecond digits that the
// store must cut.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// request returns a request record started at start, ended a second later,
// with n attempts.
func request(id, run string, start time.Time, status, n int) record.Request {
	r := record.Request{
		ID: id, Run: run, Method: "POST", Path: "/v1/chat/completions",
		Upstream: "openai", Model: "gpt-test",
		Header: http.Header{"Content-Type": {"application/json"}},
		Start:  start, End: start.Add(time.Second),
		Status: status, Committed: status == 200, Bytes: 42,
	}
	for i := 1; i <= n; i++ {
		r.Attempts = append(r.Attempts, record.Attempt{
			CallID: fmt.Sprintf("%s-call-%d", id, i), N: i,
			Start: start.Add(time.Duration(i) * 100 * time.Millisecond),
			End:   start.Add(time.Duration(i)*100*time.Millisecond + 50*time.Millisecond),
		})
	}
	if n > 0 {
		r.Attempts[n-1].Status = status
	}
	return r
}

// stored returns r as a Store gives it back: as kept, with no attempts
// nil rather than empty.
func stored(r record.Request) record.Request {
	r = recordtest.Kept(r)
	if len(r.Attempts) == 0 {
		r.Attempts = nil
	}
	return r
}

// change returns an upstream's state change at at.
func change(upstream string, at time.Time, from, to outlast.UpstreamState) record.StateChange {
	return record.StateChange{Upstream: upstream, At: at, From: from, To: to}
}

// storedChange returns c as a Store gives it back: its time cut to the
// millisecond, in UTC.
func storedChange(c record.StateChange) record.StateChange {
	c.At = c.At.UTC().Truncate(time.Millisecond)
	return c
}
