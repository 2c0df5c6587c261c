package journal

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// A migration is one step of the schema. Migrations are applied in order,
// each once; a database records the versions it has in
// outlast_schema_version.
//
// A migration must leave the schema usable by the code of the versions
// before it (add, never rename or drop), because a replica that has not
// been upgraded yet keeps writing to a database that one that has been
// has migrated.
type migration struct {
	version int
	name    string
	// stmts run in order, with {time}, {json}, {bool} and {serial}
	// replaced by the dialect's types.
	stmts []string
}

var migrations = []migration{
	{1, "requests and attempts", []string{
		`CREATE TABLE outlast_requests (
			id            TEXT PRIMARY KEY,
			run           TEXT NOT NULL,
			method        TEXT NOT NULL,
			path          TEXT NOT NULL,
			upstream      TEXT NOT NULL,
			slot          TEXT NOT NULL,
			model         TEXT NOT NULL,
			headers       {json} NOT NULL,
			started_at    {time} NOT NULL,
			ended_at      {time},
			status        INTEGER NOT NULL,
			error         TEXT NOT NULL,
			attempt_count INTEGER NOT NULL,
			stream        {bool} NOT NULL,
			committed     {bool} NOT NULL,
			bytes         BIGINT NOT NULL
		)`,
		// List pages newest first by (started_at, id), and Prune looks
		// for old starts; Run reads a run oldest first. Every index is
		// written for every request, so there are no more than these.
		`CREATE INDEX outlast_requests_started ON outlast_requests (started_at, id)`,
		`CREATE INDEX outlast_requests_run ON outlast_requests (run, started_at, id)`,
		`CREATE TABLE outlast_attempts (
			request_id     TEXT NOT NULL REFERENCES outlast_requests (id) ON DELETE CASCADE,
			n              INTEGER NOT NULL,
			call_id        TEXT NOT NULL,
			started_at     {time},
			ended_at       {time},
			queued_ahead   INTEGER NOT NULL,
			gate_wait_ms   BIGINT NOT NULL,
			status         INTEGER NOT NULL,
			error_class    TEXT NOT NULL,
			error          TEXT NOT NULL,
			retry_in_ms    BIGINT NOT NULL,
			retry_after_ms BIGINT NOT NULL,
			bytes          BIGINT NOT NULL,
			PRIMARY KEY (request_id, n)
		)`,
	}},
	{2, "failed statuses split by class", []string{
		// A failed status was the class "status"; it is now split by
		// what it asks of the client, as outlast.StatusClass splits it.
		`UPDATE outlast_attempts SET error_class = CASE
			WHEN status = 429 THEN 'rate_limited'
			WHEN status = 529 THEN 'overloaded'
			WHEN status BETWEEN 400 AND 499 THEN 'status_4xx'
			WHEN status BETWEEN 500 AND 599 THEN 'status_5xx'
			ELSE 'other' END
		WHERE error_class = 'status'`,
	}},
	{3, "requests by end", []string{
		// Store.Ended, which outlast requests --follow reads, goes by
		// end: a request that started before one already shown and ended
		// after it must still be shown.
		`CREATE INDEX outlast_requests_ended ON outlast_requests (ended_at, id)`,
	}},
	{4, "admission: attempts' waits and probes, upstreams' states", []string{
		// An older replica's inserts name neither column: the defaults
		// fill them, as they fill the rows already there.
		`ALTER TABLE outlast_attempts ADD COLUMN admission_wait_ms BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE outlast_attempts ADD COLUMN probe {bool} NOT NULL DEFAULT FALSE`,
		// A change has no key of its own; id orders the changes of one
		// millisecond as they were written.
		`CREATE TABLE outlast_upstream_states (
			id         {serial},
			upstream   TEXT NOT NULL,
			changed_at {time} NOT NULL,
			from_state TEXT NOT NULL,
			to_state   TEXT NOT NULL
		)`,
		// States reads the newest changes, of one upstream or all, and
		// Prune the oldest.
		`CREATE INDEX outlast_upstream_states_changed ON outlast_upstream_states (changed_at, id)`,
		`CREATE INDEX outlast_upstream_states_upstream ON outlast_upstream_states (upstream, changed_at, id)`,
	}},
	{5, "fallbacks: attempts' upstreams and why they moved", []string{
		// As in 4, an older replica's inserts name neither column: ''
		// fills them, as it fills the rows already there, and reads as
		// "the request's own upstream, not moved".
		`ALTER TABLE outlast_attempts ADD COLUMN upstream TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE outlast_attempts ADD COLUMN fallback TEXT NOT NULL DEFAULT ''`,
	}},
	{6, "fallbacks: every move of a request", []string{
		// A move to an upstream that then made no attempt is on no
		// attempt's row. An older replica's inserts name no moves, and
		// '[]' reads as none, as for the rows already there, whose
		// attempts' fallback columns tell what they knew.
		`ALTER TABLE outlast_requests ADD COLUMN moves {json} NOT NULL DEFAULT '[]'`,
	}},
	{7, "deadlines and their sources, and cut delays", []string{
		// As in 4, an older replica's inserts name none of them: NULL,
		// '' and FALSE read as no deadline known and no delay cut, as
		// for the rows already there.
		`ALTER TABLE outlast_requests ADD COLUMN deadline {time}`,
		`ALTER TABLE outlast_requests ADD COLUMN deadline_source TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE outlast_attempts ADD COLUMN retry_after_cut {bool} NOT NULL DEFAULT FALSE`,
	}},
	{8, "continuations of streams that broke", []string{
		// As in 4 and 6: '[]', FALSE and 0 read as none, for an older
		// replica's inserts and for the rows already there.
		`ALTER TABLE outlast_requests ADD COLUMN continuations {json} NOT NULL DEFAULT '[]'`,
		`ALTER TABLE outlast_attempts ADD COLUMN continued {bool} NOT NULL DEFAULT FALSE`,
		`ALTER TABLE outlast_attempts ADD COLUMN prefill_bytes BIGINT NOT NULL DEFAULT 0`,
	}},
	{9, "answers held whole before their commit", []string{
		// As in 4: FALSE reads as not held, for an older replica's
		// inserts and for the rows already there, whose answers, read
		// whole up to --max-body then, no record says were.
		`ALTER TABLE outlast_requests ADD COLUMN held {bool} NOT NULL DEFAULT FALSE`,
	}},
}

// migrate brings db's schema up to the last migration, in one
// transaction: a replica that fails halfway leaves the schema as it was.
// The transaction first takes the dialect's lock (SQLite's write lock, taken
// at BEGIN IMMEDIATE, serves on SQLite), so that replicas starting at once
// apply each migration once between them.
func migrate(ctx context.Context, db *sql.DB, d *dialect) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if d.lock != "" {
		if _, err := tx.ExecContext(ctx, d.lock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	have, err := schemaVersion(ctx, tx, d)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		if err := apply(ctx, tx, d, m); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// prepareSchema migrates s's database when create is set, and otherwise
// checks that it holds a journal of this version, without changing it.
func (s *sqlStore) prepareSchema(ctx context.Context, create bool) error {
	if create {
		return migrate(ctx, s.w, s.d)
	}
	var ok bool
	if err := s.r.QueryRowContext(ctx, s.d.hasJournal).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: the database has no journal's tables", ErrNoJournal)
	}
	// A journal that an older outlast made lacks the columns this one
	// reads: say so, rather than fail a query on a missing column.
	have, err := maxVersion(ctx, s.r)
	if err != nil {
		return err
	}
	if have < latestVersion {
		return fmt.Errorf("the database's journal is at schema version %d, and this outlast reads version %d: run this version's outlast serve on it once, which migrates it, or read it with the outlast that wrote it", have, latestVersion)
	}
	return nil
}

// latestVersion is the schema version that migrate brings a database to.
var latestVersion = migrations[len(migrations)-1].version

// maxVersion returns the highest schema version applied to q's database,
// whose version table exists.
func maxVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var have int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM outlast_schema_version`).Scan(&have)
	return have, err
}

// schemaVersion creates the version table if need be and returns the
// highest version applied, 0 for a new database.
func schemaVersion(ctx context.Context, tx *sql.Tx, d *dialect) (int, error) {
	ddl := d.types.Replace(`CREATE TABLE IF NOT EXISTS outlast_schema_version (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at {time} NOT NULL
	)`)
	if _, err := tx.ExecContext(ctx, ddl); err != nil {
		return 0, fmt.Errorf("migrate: version table: %w", err)
	}
	have, err := maxVersion(ctx, tx)
	if err != nil {
		return 0, fmt.Errorf("migrate: version: %w", err)
	}
	return have, nil
}

func apply(ctx context.Context, tx *sql.Tx, d *dialect, m migration) error {
	for _, s := range m.stmts {
		if _, err := tx.ExecContext(ctx, d.types.Replace(s)); err != nil {
			return fmt.Errorf("migrate: version %d (%s): %w", m.version, m.name, err)
		}
	}
	_, err := tx.ExecContext(ctx,
		`INSERT INTO outlast_schema_version (version, name, applied_at) VALUES (`+d.ph(1)+`, `+d.ph(2)+`, `+d.ph(3)+`)`,
		m.version, m.name, d.timeArg(time.Now()))
	if err != nil {
		return fmt.Errorf("migrate: version %d (%s): %w", m.version, m.name, err)
	}
	return nil
}
