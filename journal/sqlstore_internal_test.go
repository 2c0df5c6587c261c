package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// TestWritesArePrepared checks that every statement a write or a prune
// runs is one that prepare prepared, whatever the batch's size: one that
// is not is parsed anew each time, which costs SQLite about as much as
// running it.
func TestWritesArePrepared(t *testing.T) {
	s := testSQLite(t)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id := 0
	for size := 1; size <= 70; size++ {
		batch := make([]record.Request, size)
		for i := range batch {
			batch[i] = record.Request{ID: fmt.Sprintf("r%05d", id), Start: start, End: start.Add(time.Second)}
			for n := range id % 4 {
				batch[i].Attempts = append(batch[i].Attempts, record.Attempt{N: n + 1, Start: start})
			}
			id++
		}
		if err := s.Write(context.Background(), batch); err != nil {
			t.Fatalf("Write of %d: %v", size, err)
		}
	}
	if n, err := s.Prune(context.Background(), start.Add(time.Hour)); err != nil || n != int64(id) {
		t.Fatalf("Prune: got %d, %v; want %d, nil", n, err, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unprepared != 0 {
		t.Errorf("%d statements ran unprepared, want 0", s.unprepared)
	}
}

// TestSQLiteSettings checks the settings the writer's cost depends on
// reach the connection: a DSN typo would drop them silently.
func TestSQLiteSettings(t *testing.T) {
	s := testSQLite(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal", "synchronous": "1", "temp_store": "2", "wal_autocheckpoint": "8000",
	} {
		var got string
		if err := s.w.QueryRowContext(context.Background(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s: got %s, want %s", pragma, got, want)
		}
	}
}

// testSQLite opens a SQLite store in a temporary folder, closed when the
// test ends.
func testSQLite(t *testing.T) *sqlStore {
	t.Helper()
	st, err := Open(context.Background(), "sqlite:"+t.TempDir()+"/j.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(*sqlStore)
}

// TestIsBusy checks that open's retry recognises SQLite's own
// SQLITE_BUSY, wrapped as prepareSchema wraps it, by its code, and
// nothing else: a retry on any other error would only delay it.
func TestIsBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	dsn := path + "?_pragma=busy_timeout(0)&_txlock=immediate"
	a, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	_, busy := b.BeginTx(ctx, nil)
	if busy == nil {
		t.Fatal("a second writer began while the first held the lock")
	}
	if !isBusy(fmt.Errorf("migrate: %w", busy)) {
		t.Errorf("isBusy(%v) = false, want true", busy)
	}
	_, other := a.ExecContext(ctx, "SELECT * FROM no_such_table")
	for _, err := range []error{other, errors.New("database is locked (SQLITE_BUSY)"), context.Canceled} {
		if isBusy(err) {
			t.Errorf("isBusy(%v) = true, want false", err)
		}
	}
}
