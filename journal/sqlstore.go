package journal

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/record"
)

// sqlStore is the Store of both databases, through database/sql.
type sqlStore struct {
	maxRun int // Run's bound, if not MaxRun: for a test
	d      *dialect
	w      *sql.DB       // for writes
	r      *sql.DB       // for reads; w itself on PostgreSQL
	pool   *pgxpool.Pool // under w and r on PostgreSQL, else nil

	// stmts are the write statements, prepared on w once, before the
	// first write's transaction takes SQLite's one connection, because
	// SQLite parses a batch's statements for about as long as it runs
	// them. mu guards the fields below.
	mu         sync.Mutex
	stmts      map[stmtKey]*sql.Stmt
	unprepared int  // statements exec ran without one of stmts, for a test
	closed     bool // by Close: prepare no more
}

// chunkRows bounds the IDs of one IN list that reads, well under SQLite's
// 32766 bind parameters.
const chunkRows = 500

// deleteChunk bounds the IDs of one DELETE's IN list. It is a power of
// two, because deleteIn pads a list to one.
const deleteChunk = 512

// The tables' columns, and how many each has, as requestArgs and
// attemptArgs give them.
const (
	requestCols  = "id, run, method, path, upstream, slot, model, headers, started_at, ended_at, status, error, attempt_count, stream, committed, bytes, moves, deadline, deadline_source, continuations, held"
	requestNCols = 21
	attemptCols  = "request_id, n, call_id, started_at, ended_at, queued_ahead, gate_wait_ms, status, error_class, error, retry_in_ms, retry_after_ms, bytes, admission_wait_ms, probe, upstream, fallback, retry_after_cut, continued, prefill_bytes"
	attemptNCols = 20
)

const (
	// requestUpsert makes writing a record again replace it.
	requestUpsert = ` ON CONFLICT (id) DO UPDATE SET run = excluded.run, method = excluded.method,
		path = excluded.path, upstream = excluded.upstream, slot = excluded.slot, model = excluded.model,
		headers = excluded.headers, started_at = excluded.started_at, ended_at = excluded.ended_at,
		status = excluded.status, error = excluded.error, attempt_count = excluded.attempt_count,
		stream = excluded.stream, committed = excluded.committed, bytes = excluded.bytes,
		moves = excluded.moves, deadline = excluded.deadline, deadline_source = excluded.deadline_source,
		continuations = excluded.continuations, held = excluded.held`
)

// A stmtKey names a write statement: an insert of rows rows into table,
// or a delete of rows IDs from it (for the state changes' table, of up to
// rows changes from before a time).
type stmtKey struct {
	delete bool
	table  string
	rows   int
}

// text returns k's SQL.
func (s *sqlStore) text(k stmtKey) string {
	switch {
	case k.delete && k.table == stateTable:
		return pruneStatesSQL(s.d, k.rows)
	case k.delete && k.table == "outlast_requests":
		return "DELETE FROM outlast_requests WHERE " + s.in("id", 1, k.rows)
	case k.delete:
		return "DELETE FROM " + k.table + " WHERE " + s.in("request_id", 1, k.rows)
	case k.table == "outlast_requests":
		return s.insert(k.table, requestCols, requestNCols, k.rows) + requestUpsert
	}
	return s.insert(k.table, attemptCols, attemptNCols, k.rows)
}

// nextSize returns the rows of the insert statement after one of n rows,
// in the order prepare goes: per, then the powers of two below it, down
// to 0 after 1.
func nextSize(n, per int) int {
	if n == per && per > 1 {
		return 1 << (bits.Len(uint(per-1)) - 1)
	}
	return n / 2
}

// prepare prepares the write statements, if the dialect keeps them and
// they are not yet.
func (s *sqlStore) prepare(ctx context.Context) error {
	if !s.d.prepared {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("prepare: the store is closed")
	case s.stmts != nil:
		return nil
	}
	var keys []stmtKey
	per := max(s.d.rowsPerInsert, 1)
	for n := per; n > 0; n = nextSize(n, per) {
		keys = append(keys, stmtKey{false, "outlast_requests", n}, stmtKey{false, "outlast_attempts", n})
	}
	for n := deleteChunk; n > 0; n /= 2 {
		keys = append(keys, stmtKey{true, "outlast_requests", n}, stmtKey{true, "outlast_attempts", n})
	}
	keys = append(keys, stmtKey{true, stateTable, pruneChunk})
	stmts := make(map[stmtKey]*sql.Stmt, len(keys))
	for _, k := range keys {
		st, err := s.w.PrepareContext(ctx, s.text(k))
		if err != nil {
			for _, st := range stmts {
				st.Close()
			}
			return fmt.Errorf("prepare: %w", err)
		}
		stmts[k] = st
	}
	s.stmts = stmts
	return nil
}

// exec runs the statement k in tx: the one prepare prepared, if there is
// one, or else k's text.
func (s *sqlStore) exec(ctx context.Context, tx *sql.Tx, k stmtKey, args []any) (sql.Result, error) {
	s.mu.Lock()
	st := s.stmts[k]
	if st == nil && s.d.prepared {
		s.unprepared++
	}
	s.mu.Unlock()
	if st == nil {
		return tx.ExecContext(ctx, s.text(k), args...)
	}
	// The transaction's statement is closed with the transaction; st
	// stays, prepared on the connection.
	return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

func (s *sqlStore) Close() error {
	var err error
	s.mu.Lock()
	for _, st := range s.stmts {
		err = errors.Join(err, st.Close())
	}
	s.stmts = nil
	s.closed = true
	s.mu.Unlock()
	err = errors.Join(err, s.w.Close())
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	if s.pool != nil {
		s.pool.Close()
	}
	return err
}

// Write stores recs in one transaction; see [Store.Write].
func (s *sqlStore) Write(ctx context.Context, recs []record.Request) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if err := validate(&recs[i]); err != nil {
			return err
		}
	}
	recs = lastOfEach(recs)
	if err := s.prepare(ctx); err != nil {
		return fmt.Errorf("journal: write: %w", err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("journal: write: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	buf := argsPool.Get().(*[]any)
	defer func() {
		clear((*buf)[:cap(*buf)]) // let the batch's strings go
		argsPool.Put(buf)
	}()
	if err := s.writeRequests(ctx, tx, recs, buf); err != nil {
		return fmt.Errorf("journal: write requests: %w", err)
	}
	if err := s.writeAttempts(ctx, tx, recs, buf); err != nil {
		return fmt.Errorf("journal: write attempts: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("journal: write: commit: %w", err)
	}
	return nil
}

// lastOfEach returns recs with only the last record of each ID, because a
// statement may not insert and update one row twice.
func lastOfEach(recs []record.Request) []record.Request {
	last := make(map[string]int, len(recs))
	for i := range recs {
		last[recs[i].ID] = i
	}
	if len(last) == len(recs) {
		return recs
	}
	out := make([]record.Request, 0, len(last))
	for i := range recs {
		if last[recs[i].ID] == i {
			out = append(out, recs[i])
		}
	}
	return out
}

// argsPool holds the argument slices of writes, a few thousand values each
// and otherwise garbage after every batch.
var argsPool = sync.Pool{New: func() any { return new([]any) }}

func (s *sqlStore) writeRequests(ctx context.Context, tx *sql.Tx, recs []record.Request, buf *[]any) error {
	args := (*buf)[:0]
	for i := range recs {
		args = s.requestArgs(args, &recs[i])
	}
	*buf = args
	return s.insertRows(ctx, tx, "outlast_requests", requestNCols, args)
}

func (s *sqlStore) requestArgs(args []any, r *record.Request) []any {
	headers := "{}" // most records keep no headers: see ObserverConfig
	if h := cleanHeader(r.Header); len(h) > 0 {
		b, _ := json.Marshal(h) // a map of strings always marshals
		headers = string(b)
	}
	return append(args,
		clean(r.ID), clean(r.Run), clean(r.Method), clean(r.Path), clean(r.Upstream),
		clean(r.Slot), clean(r.Model), headers,
		s.d.timeArg(r.Start), s.d.timeArg(r.End),
		r.Status, redact.Text(clean(r.Error)), len(r.Attempts), r.Stream, r.Committed, r.Bytes, movesArg(r.Moves),
		s.d.timeArg(r.Deadline), clean(r.DeadlineSource), continuationsArg(r.Continuations), r.Held)
}

// continuationsArg returns continuations as their column keeps them, as
// movesArg does moves.
func continuationsArg(cs []record.Continuation) string {
	if len(cs) == 0 {
		return "[]"
	}
	kept := make([]record.Continuation, len(cs))
	for i, c := range cs {
		c.Upstream, c.Outcome, c.Reason = clean(c.Upstream), clean(c.Outcome), redact.Text(clean(c.Reason))
		kept[i] = c
	}
	b, _ := json.Marshal(kept) // strings and numbers always marshal
	return string(b)
}

// movesArg returns moves as the moves column keeps them: a JSON list, as
// in the record's JSON, its strings cleaned (PostgreSQL's jsonb refuses
// the \u0000 that JSON would write for a NUL).
func movesArg(moves []record.Move) string {
	if len(moves) == 0 {
		return "[]" // most requests never move
	}
	kept := make([]record.Move, len(moves))
	for i, m := range moves {
		kept[i] = record.Move{From: clean(m.From), To: clean(m.To), Reason: clean(m.Reason)}
	}
	b, _ := json.Marshal(kept) // strings always marshal
	return string(b)
}

// writeAttempts replaces the attempts of recs: those of a record written
// before go, whatever their numbers.
func (s *sqlStore) writeAttempts(ctx context.Context, tx *sql.Tx, recs []record.Request, buf *[]any) error {
	ids := make([]string, len(recs))
	for i := range recs {
		ids[i] = clean(recs[i].ID)
	}
	if err := s.deleteIn(ctx, tx, "outlast_attempts", ids); err != nil {
		return err
	}
	args := (*buf)[:0]
	for i := range recs {
		for j := range recs[i].Attempts {
			args = s.attemptArgs(args, ids[i], &recs[i].Attempts[j])
		}
	}
	*buf = args
	return s.insertRows(ctx, tx, "outlast_attempts", attemptNCols, args)
}

// insertRows inserts the rows whose arguments args holds, ncols to a row:
// in statements of the dialect's rowsPerInsert rows and, where the dialect
// keeps prepared statements, then of the powers of two that make up the
// rest, so that a table has a handful of statements to prepare.
func (s *sqlStore) insertRows(ctx context.Context, tx *sql.Tx, table string, ncols int, args []any) error {
	per := max(s.d.rowsPerInsert, 1)
	for len(args) > 0 {
		n := len(args) / ncols
		switch {
		case n >= per:
			n = per
		case s.d.prepared:
			n = 1 << (bits.Len(uint(n)) - 1)
		}
		if _, err := s.exec(ctx, tx, stmtKey{false, table, n}, args[:n*ncols]); err != nil {
			return err
		}
		args = args[n*ncols:]
	}
	return nil
}

func (s *sqlStore) attemptArgs(args []any, id string, a *record.Attempt) []any {
	return append(args,
		id, a.N, clean(a.CallID), s.d.timeArg(a.Start), s.d.timeArg(a.End),
		a.QueuedAhead, a.GateWait.Milliseconds(), a.Status,
		a.Class.String(), redact.Text(clean(a.Error)),
		a.RetryIn.Milliseconds(), a.RetryAfter.Milliseconds(), a.Bytes,
		a.AdmissionWait.Milliseconds(), a.Probe, clean(a.Upstream), clean(a.Fallback), a.RetryAfterCut,
		a.Continued, a.PrefillBytes)
}

// insert returns a multi-row INSERT of rows rows of ncols columns each.
func (s *sqlStore) insert(table, cols string, ncols, rows int) string {
	var b strings.Builder
	b.Grow(len(table) + len(cols) + rows*ncols*6 + 32)
	b.WriteString("INSERT INTO " + table + " (" + cols + ") VALUES ")
	p := 1
	for r := range rows {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range ncols {
			if c > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s.d.ph(p))
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// in returns "col IN (…)" for n parameters numbered from first.
func (s *sqlStore) in(col string, first, n int) string {
	var b strings.Builder
	b.WriteString(col + " IN (")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.d.ph(first + i))
	}
	b.WriteByte(')')
	return b.String()
}

// deleteIn deletes the rows of table whose key column is one of ids.
// Where the dialect keeps prepared statements, each list of IDs is padded
// to a power of two with its last ID, which deletes nothing more, so that
// a table has a handful of statements to prepare.
func (s *sqlStore) deleteIn(ctx context.Context, tx *sql.Tx, table string, ids []string) error {
	args := make([]any, 0, min(len(ids), deleteChunk))
	for len(ids) > 0 {
		n := min(len(ids), deleteChunk)
		size := n
		if s.d.prepared {
			size = 1 << bits.Len(uint(n-1))
		}
		args = args[:0]
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		for len(args) < size {
			args = append(args, ids[n-1])
		}
		if _, err := s.exec(ctx, tx, stmtKey{true, table, size}, args); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// clean makes s storable in both databases: PostgreSQL refuses a NUL
// byte and invalid UTF-8 in text, and a record must never fail a batch.
func clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// cleanHeader returns h without credentials, whatever the caller did, and
// with its strings cleaned. JSON would write a NUL as \u0000, which
// PostgreSQL's jsonb refuses.
func cleanHeader(h http.Header) http.Header {
	out := redact.Header(h, nil)
	if out == nil {
		return http.Header{}
	}
	for k, vs := range out {
		for i, v := range vs {
			vs[i] = clean(v)
		}
		if ck := clean(k); ck != k {
			delete(out, k)
			out[ck] = append(out[ck], vs...)
		}
	}
	return out
}

// Get returns one request; see [Store.Get].
func (s *sqlStore) Get(ctx context.Context, id string) (record.Request, error) {
	var recs []record.Request
	err := s.read(ctx, func(tx *sql.Tx) (err error) {
		recs, err = s.requests(ctx, tx, "WHERE id = "+s.d.ph(1), id)
		if err != nil || len(recs) == 0 {
			return err
		}
		return s.attach(ctx, tx, recs)
	})
	switch {
	case err != nil:
		return record.Request{}, fmt.Errorf("journal: get %q: %w", id, err)
	case len(recs) == 0:
		return record.Request{}, fmt.Errorf("%w: request %q", ErrNotFound, id)
	}
	return recs[0], nil
}

// Run returns a run's requests; see [Store.Run].
func (s *sqlStore) Run(ctx context.Context, run string) ([]record.Request, error) {
	if run == "" {
		return nil, errors.New("journal: run: the run's name is empty")
	}
	limit := s.maxRun
	if limit == 0 {
		limit = MaxRun
	}
	var recs []record.Request
	err := s.read(ctx, func(tx *sql.Tx) (err error) {
		// One more than the bound says whether the run is longer.
		recs, err = s.requests(ctx, tx, "WHERE run = "+s.d.ph(1)+" ORDER BY started_at, id LIMIT "+s.d.ph(2), run, limit+1)
		if err != nil || len(recs) > limit {
			return err
		}
		return s.attach(ctx, tx, recs)
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("journal: run %q: %w", run, err)
	case len(recs) == 0:
		return nil, fmt.Errorf("%w: run %q", ErrNotFound, run)
	case len(recs) > limit:
		return nil, fmt.Errorf("%w: run %q has more than %d requests: page through them with a list of the run's (GET /outlast/requests?run=…)", ErrRunTooLong, run, limit)
	}
	return recs, nil
}

// List returns a page of requests; see [Store.List].
func (s *sqlStore) List(ctx context.Context, q Query) (Page, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil {
		return Page{}, err
	}
	where, args, err := s.where(q)
	if err != nil {
		return Page{}, err
	}
	args = append(args, limit+1) // one more than the page says whether another follows
	tail := where + " ORDER BY started_at DESC, id DESC LIMIT " + s.d.ph(len(args))
	var page Page
	err = s.read(ctx, func(tx *sql.Tx) (err error) {
		page.Requests, err = s.requests(ctx, tx, tail, args...)
		if err != nil {
			return err
		}
		if len(page.Requests) > limit {
			page.Requests = page.Requests[:limit]
			last := page.Requests[limit-1]
			page.Next = encodeCursor(last.Start, last.ID)
		}
		return s.attach(ctx, tx, page.Requests)
	})
	if err != nil {
		return Page{}, fmt.Errorf("journal: list: %w", err)
	}
	if page.Requests == nil {
		page.Requests = []record.Request{}
	}
	return page, nil
}

// Ended returns the requests that ended after (end, id); see [Store.Ended].
func (s *sqlStore) Ended(ctx context.Context, end time.Time, id string, limit int) ([]record.Request, error) {
	n, err := pageLimit(limit)
	if err != nil {
		return nil, err
	}
	where, args := "WHERE ended_at IS NOT NULL", []any{}
	if !end.IsZero() {
		// Row values compare as the ORDER BY sorts, so requests that
		// ended in the same millisecond are neither skipped nor repeated.
		where = "WHERE (ended_at, id) > (" + s.d.ph(1) + ", " + s.d.ph(2) + ")"
		args = append(args, s.d.timeArg(end), id)
	}
	args = append(args, n)
	var recs []record.Request
	err = s.read(ctx, func(tx *sql.Tx) (err error) {
		recs, err = s.requests(ctx, tx, where+" ORDER BY ended_at, id LIMIT "+s.d.ph(len(args)), args...)
		if err != nil {
			return err
		}
		return s.attach(ctx, tx, recs)
	})
	if err != nil {
		return nil, fmt.Errorf("journal: ended: %w", err)
	}
	return recs, nil
}

func pageLimit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("journal: list: limit %d is negative", n)
	case n == 0:
		return DefaultLimit, nil
	}
	return min(n, MaxLimit), nil
}

// where returns the WHERE clause of q, and its arguments.
func (s *sqlStore) where(q Query) (string, []any, error) {
	var conds []string
	var args []any
	add := func(cond string, vs ...any) {
		for i := range vs {
			cond = strings.Replace(cond, "#", s.d.ph(len(args)+1+i), 1)
		}
		conds = append(conds, cond)
		args = append(args, vs...)
	}
	if q.Run != "" {
		add("run = #", q.Run)
	}
	if q.Status != 0 {
		add("status = #", q.Status)
	}
	if !q.Since.IsZero() {
		add("started_at >= #", s.d.timeArg(q.Since))
	}
	if q.Cursor != "" {
		t, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		// Row values compare as the ORDER BY sorts: the page goes on
		// after the last request it showed, even among equal times.
		add("(started_at, id) < (#, #)", s.d.timeArg(t), id)
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return "WHERE " + strings.Join(conds, " AND "), args, nil
}

// encodeCursor returns the cursor of the page that follows a request
// started at t with the given ID.
func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMilli(), 10) + " " + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w %q: not base64url", ErrBadCursor, c)
	}
	msText, id, ok := strings.Cut(string(b), " ")
	msec, err := strconv.ParseInt(msText, 10, 64)
	if !ok || err != nil || id == "" || !inRange(time.UnixMilli(msec)) {
		return time.Time{}, "", fmt.Errorf("%w %q: not a cursor from a page's next", ErrBadCursor, c)
	}
	return time.UnixMilli(msec).UTC(), id, nil
}

// read runs f in a read-only transaction.
func (s *sqlStore) read(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &s.d.readTx)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// requests returns the requests that tail (a WHERE, ORDER BY and LIMIT)
// selects, without their attempts.
func (s *sqlStore) requests(ctx context.Context, tx *sql.Tx, tail string, args ...any) ([]record.Request, error) {
	rows, err := tx.QueryContext(ctx, "SELECT "+requestCols+" FROM outlast_requests "+tail, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []record.Request
	for rows.Next() {
		var r record.Request
		var headers, moves, continuations []byte
		var count int
		err := rows.Scan(&r.ID, &r.Run, &r.Method, &r.Path, &r.Upstream, &r.Slot, &r.Model, &headers,
			timeScan{&r.Start}, timeScan{&r.End}, &r.Status, &r.Error, &count, &r.Stream, &r.Committed, &r.Bytes, &moves,
			timeScan{&r.Deadline}, &r.DeadlineSource, &continuations, &r.Held)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(headers, &r.Header); err != nil {
			return nil, fmt.Errorf("request %q: headers: %w", r.ID, err)
		}
		if err := json.Unmarshal(moves, &r.Moves); err != nil {
			return nil, fmt.Errorf("request %q: moves: %w", r.ID, err)
		}
		if len(r.Moves) == 0 {
			r.Moves = nil // as the record has it: "[]" is no moves
		}
		if err := json.Unmarshal(continuations, &r.Continuations); err != nil {
			return nil, fmt.Errorf("request %q: continuations: %w", r.ID, err)
		}
		if len(r.Continuations) == 0 {
			r.Continuations = nil
		}
		recs = append(recs, r)
	}
	return recs, rows.Err()
}

// attach reads the attempts of recs into them.
func (s *sqlStore) attach(ctx context.Context, tx *sql.Tx, recs []record.Request) error {
	at := make(map[string]*record.Request, len(recs))
	ids := make([]string, len(recs))
	for i := range recs {
		at[recs[i].ID] = &recs[i]
		ids[i] = recs[i].ID
	}
	for len(ids) > 0 {
		n := min(len(ids), chunkRows)
		q := "SELECT " + attemptCols + " FROM outlast_attempts WHERE " + s.in("request_id", 1, n) + " ORDER BY request_id, n"
		if err := s.attempts(ctx, tx, at, q, anys(ids[:n])); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func (s *sqlStore) attempts(ctx context.Context, tx *sql.Tx, at map[string]*record.Request, q string, args []any) error {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a record.Attempt
		var gateWait, retryIn, retryAfter, admissionWait int64
		var class string
		err := rows.Scan(&id, &a.N, &a.CallID, timeScan{&a.Start}, timeScan{&a.End}, &a.QueuedAhead, &gateWait,
			&a.Status, &class, &a.Error, &retryIn, &retryAfter, &a.Bytes, &admissionWait, &a.Probe,
			&a.Upstream, &a.Fallback, &a.RetryAfterCut, &a.Continued, &a.PrefillBytes)
		if err != nil {
			return err
		}
		a.Class = record.ParseClass(class, a.Status)
		a.GateWait, a.RetryIn, a.RetryAfter = millis(gateWait), millis(retryIn), millis(retryAfter)
		a.AdmissionWait = millis(admissionWait)
		if r := at[id]; r != nil {
			r.Attempts = append(r.Attempts, a)
		}
	}
	return rows.Err()
}

// millis is n milliseconds.
func millis(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// timeScan scans a time column of either dialect: timestamptz comes as a
// time.Time, SQLite's text as a string, NULL as the zero time.
type timeScan struct{ t *time.Time }

func (ts timeScan) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*ts.t = time.Time{}
	case time.Time:
		*ts.t = v.UTC()
	case string:
		return ts.parse(v)
	case []byte:
		return ts.parse(string(v))
	default:
		return fmt.Errorf("time column: unexpected %T", v)
	}
	return nil
}

func (ts timeScan) parse(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("time column: %w", err)
	}
	*ts.t = t.UTC()
	return nil
}

// pruneChunk bounds the requests one Prune transaction deletes, so that a
// first prune of a large database does not hold SQLite's write lock, and
// the batches waiting for it, for long.
const pruneChunk = 1000

// Prune deletes old requests and state changes; see [Store.Prune].
func (s *sqlStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.pruneChunk(ctx, before)
		total += int64(n)
		if err != nil {
			return total, fmt.Errorf("journal: prune before %s: %w", before.UTC().Format(timeLayout), err)
		}
		if n < pruneChunk {
			break
		}
	}
	if err := s.pruneStates(ctx, before); err != nil {
		return total, fmt.Errorf("journal: prune states before %s: %w", before.UTC().Format(timeLayout), err)
	}
	return total, nil
}

func (s *sqlStore) pruneChunk(ctx context.Context, before time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.prepare(ctx); err != nil {
		return 0, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // after Commit, a no-op
	ids, err := s.prunable(ctx, tx, before)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	if err := s.deleteIn(ctx, tx, "outlast_attempts", ids); err != nil {
		return 0, err
	}
	if err := s.deleteIn(ctx, tx, "outlast_requests", ids); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// prunable returns up to pruneChunk IDs of requests that started and
// ended before. A request ends after it starts, so the index on started_at
// finds them, and the table needs none on ended_at for Prune alone.
func (s *sqlStore) prunable(ctx context.Context, tx *sql.Tx, before time.Time) ([]string, error) {
	q := "SELECT id FROM outlast_requests WHERE started_at < " + s.d.ph(1) +
		" AND (ended_at IS NULL OR ended_at < " + s.d.ph(2) + ") LIMIT " + strconv.Itoa(pruneChunk)
	rows, err := tx.QueryContext(ctx, q, s.d.timeArg(before), s.d.timeArg(before))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
