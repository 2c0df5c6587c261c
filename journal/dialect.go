package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite" // registers the driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// A dialect is what differs between the two databases; the SQL itself is
// shared.
type dialect struct {
	// types maps the schema's placeholders {time}, {json}, {bool} and
	// {serial} (a primary key that numbers rows as they are inserted) to
	// the database's types.
	types *strings.Replacer
	// numbered says bind parameters are numbered ($1); otherwise they
	// are anonymous (?), and a query must use each once, in order.
	numbered bool
	// rowsPerInsert bounds the rows of one INSERT.
	rowsPerInsert int
	// prepared says the store prepares its write statements once: the
	// driver would parse each anew (pgx caches them itself).
	prepared bool
	// lock, if set, is the first statement of the migration's
	// transaction, so that replicas starting together take turns.
	lock string
	// readTx are the options of the transactions that read a record and
	// its attempts, so that the two queries see one state.
	readTx sql.TxOptions
	// hasJournal is a query that says whether the database holds a
	// journal: its version table.
	hasJournal string
	// timeArg is a time as the database takes it; nil for the zero time.
	timeArg func(time.Time) any
}

var sqliteDialect = &dialect{
	// {serial}: an INTEGER PRIMARY KEY is the rowid, which an insert that
	// leaves it out sets to one more than the largest.
	types: strings.NewReplacer("{time}", "TEXT", "{json}", "TEXT", "{bool}", "INTEGER", "{serial}", "INTEGER PRIMARY KEY"),
	// Anonymous parameters, because the driver looks a numbered one's
	// name up in a list for each argument: quadratic in a batch's
	// thousands of arguments.
	numbered: false,
	// Statements of 128 rows, prepared once: a full batch of 1,024
	// records is eight statements a table. (32 rows, 8 and 1 measured 7,
	// 10 and 60 % slower per record.)
	rowsPerInsert: 128,
	prepared:      true,
	readTx:        sql.TxOptions{ReadOnly: true},
	hasJournal:    `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outlast_schema_version')`,
	timeArg: func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		// Fixed-width text in UTC sorts as the times do, and reads well
		// in the sqlite3 shell.
		var b [len(timeLayout)]byte
		return string(appendTime(b[:0], t))
	},
}

var postgresDialect = &dialect{
	types: strings.NewReplacer("{time}", "TIMESTAMPTZ", "{json}", "JSONB", "{bool}", "BOOLEAN",
		"{serial}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
	numbered: true,
	// Multi-row statements: each statement is a round trip.
	rowsPerInsert: 500,
	// The lock is per schema (current_schema), so that replicas sharing a
	// schema take turns while unrelated schemas, such as parallel test
	// runs', do not wait on each other. The first key is "outl".
	lock: "SELECT pg_advisory_xact_lock(1869968492, hashtext(current_schema()))",
	// Read committed would let a Prune or a rewrite land between the
	// request's query and its attempts'.
	readTx:     sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
	hasJournal: `SELECT to_regclass('outlast_schema_version') IS NOT NULL`,
	timeArg: func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		// timestamptz keeps microseconds; the record keeps milliseconds
		// in both stores.
		return t.UTC().Truncate(time.Millisecond)
	},
}

// ph returns the n-th bind parameter, counting from 1.
func (d *dialect) ph(n int) string {
	if !d.numbered {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// checkSQLitePath reports whether path can name a SQLite journal.
func checkSQLitePath(path string) error {
	switch {
	case path == "":
		return errors.New("journal: spec sqlite: needs a path, as in sqlite:outlast.db")
	case strings.ContainsAny(path, "?#"):
		// The driver reads its settings from a query after the path.
		return fmt.Errorf("journal: sqlite path %q: ? and # are not allowed", path)
	case strings.HasPrefix(path, "~"):
		return fmt.Errorf("journal: sqlite path %q: ~ is not expanded here; write the folder out, such as $HOME/outlast.db", path)
	}
	return nil
}

// checkSQLiteFolder says why path cannot be a SQLite file, if SQLite
// would say only "unable to open database file": a folder, or a file in
// a folder that does not exist.
func checkSQLiteFolder(path string) error {
	if path == ":memory:" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("journal: sqlite path %q is a folder: name a file in it, such as %s", path, filepath.Join(path, "outlast.db"))
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("journal: sqlite path %q: its folder %s: %w", path, dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("journal: sqlite path %q: %s is not a folder", path, dir)
	}
	return nil
}

// openSQLite opens the SQLite database at path, creating and migrating it
// when create is set, and otherwise only if it is a journal already.
func openSQLite(ctx context.Context, path string, create bool) (Store, error) {
	if err := checkSQLiteFolder(path); err != nil {
		return nil, err
	}
	if !create {
		if path == ":memory:" {
			return nil, fmt.Errorf("%w: sqlite::memory: is a new database, and empty", ErrNoJournal)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: sqlite:%s: the file does not exist", ErrNoJournal, path)
		}
	}
	// busy_timeout: another process may hold the write lock for a batch.
	// WAL: readers do not wait for the writer, nor the writer for them.
	// synchronous=NORMAL: in WAL mode a commit survives the process
	// crashing; only a power loss may lose the last ones.
	// temp_store=MEMORY: each statement's rollback journal (SQLite keeps
	// one per statement of a multi-statement transaction) stays in memory
	// rather than in a temporary file: a write's syscalls were a fifth of
	// its CPU.
	// wal_autocheckpoint(8000): checkpoint at 32 MB of WAL rather than
	// 4 MB, so that the pages every batch rewrites (the ends of the
	// tables and indexes) are copied back once per checkpoint, 8 times
	// less often. The WAL file stays at that size on disk.
	// _txlock=immediate: a write transaction takes the write lock when
	// it begins, so two that read first cannot deadlock upgrading.
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)&_pragma=wal_autocheckpoint(8000)&_txlock=immediate"
	if !create {
		// A reader writes nothing, not even the header a mode change
		// would: a user who may only read the file reads it, and an
		// empty file stays empty. It waits for a writer's lock 2 s at
		// most, not the writer's 10.
		uri := "file:" + (&url.URL{Path: filepath.Clean(path)}).EscapedPath() + "?mode=ro&_pragma=busy_timeout(2000)"
		s, err := openSQLiteDSN(ctx, path, uri, false)
		if isReadOnly(err) {
			// A journal in WAL mode whose folder the reader may not
			// write, with no gateway writing it (which would have made
			// its shared-memory file): nothing changes it while it is
			// read, which SQLite may then read without that file.
			s, err = openSQLiteDSN(ctx, path, uri+"&immutable=1", false)
		}
		return s, err
	}
	return openSQLiteDSN(ctx, path, dsn, create)
}

// isReadOnly reports whether err is SQLite's refusal to open a file for
// want of writing something beside it: SQLITE_READONLY or
// SQLITE_CANTOPEN, or one of their extended codes.
func isReadOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_READONLY || se.Code()&0xff == sqlite3.SQLITE_CANTOPEN)
}

// openSQLiteDSN opens the SQLite database at path through dsn, as
// openSQLite says.
func openSQLiteDSN(ctx context.Context, path, dsn string, create bool) (Store, error) {
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("journal: sqlite %q: %w", path, err)
	}
	// One writing connection: batches queue here, in Go, rather than in
	// SQLite's busy loop.
	w.SetMaxOpenConns(1)
	r := w
	if path == ":memory:" {
		// Every connection to :memory: is a database of its own: keep the
		// one forever.
		w.SetConnMaxIdleTime(0)
		w.SetConnMaxLifetime(0)
	} else if r, err = sql.Open("sqlite", dsn); err != nil {
		w.Close()
		return nil, fmt.Errorf("journal: sqlite %q: %w", path, err)
	}
	s := &sqlStore{d: sqliteDialect, w: w, r: r}
	// Replicas opening a new file at once race to make it WAL, which
	// SQLite answers with SQLITE_BUSY at once rather than after the busy
	// timeout: the loser tries again, 20 times in all, waiting 10 ms
	// longer each time (1.9 s at most), unless ctx is done first. A
	// SQLITE_BUSY that came after the busy timeout is a lock another
	// process holds: it is not waited for again.
open:
	for try := 1; ; try++ {
		began := time.Now()
		if err = w.PingContext(ctx); err == nil {
			err = s.prepareSchema(ctx, create)
		}
		if isBusy(err) && time.Since(began) >= time.Second {
			err = fmt.Errorf("another process holds its lock (a writer in the middle of something, or a tool with the file open): %w", err)
			break
		}
		if err == nil || try == 20 || !isBusy(err) {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w while waiting to try again after: %w", ctx.Err(), err)
			break open
		case <-time.After(time.Duration(try) * 10 * time.Millisecond):
		}
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("journal: sqlite %q: %w", path, err)
	}
	return s, nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY, or one of its
// extended codes (SQLITE_BUSY_RECOVERY and the like).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// openPostgres opens the PostgreSQL database at the connection string
// spec, through a pgx pool, creating and migrating the journal's tables
// when create is set, and otherwise only if they are there already.
func openPostgres(ctx context.Context, spec string, create bool) (Store, error) {
	cfg, err := pgxpool.ParseConfig(spec)
	if err != nil {
		// pgx's parse errors hide the user info's password, not a
		// parameter's (CheckSpec, which Open calls first, hides both).
		return nil, fmt.Errorf("journal: %s", hideParams(err.Error()))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("journal: postgres %s: %w", redactSpec(spec), err)
	}
	// database/sql over the pool lets both stores share their SQL.
	db := stdlib.OpenDBFromPool(pool)
	s := &sqlStore{d: postgresDialect, w: db, r: db, pool: pool}
	if err := db.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("journal: postgres %s: %w", redactSpec(spec), err)
	}
	if err := s.prepareSchema(ctx, create); err != nil {
		s.Close()
		return nil, fmt.Errorf("journal: postgres %s: %w", redactSpec(spec), err)
	}
	return s, nil
}
