package journal

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// stateTable keeps the upstreams' admission state changes, one row each,
// its states by name.
const (
	stateTable = "outlast_upstream_states"
	stateCols  = "upstream, changed_at, from_state, to_state"
	stateNCols = 4
)

// validateState reports why c cannot be stored.
func validateState(c *record.StateChange) error {
	why := ""
	switch {
	case c.At.IsZero():
		why = "no time"
	case !inRange(c.At):
		why = "a time outside the years 1 to 9999"
	default:
		return nil
	}
	return fmt.Errorf("%w: state change of %q: %s", ErrInvalid, c.Upstream, why)
}

// unknownState is what a state's name that this version does not know
// reads as: a newer replica's, sharing the database.
const unknownState = outlast.UpstreamState(255)

// stateByName maps each state's name, as UpstreamState.String writes it, to
// the state. The names, not the numbers, are kept, so that a reordering of
// the constants changes nothing stored.
var stateByName = func() map[string]outlast.UpstreamState {
	m := map[string]outlast.UpstreamState{}
	for s := outlast.UpstreamState(0); s < unknownState; s++ {
		name := s.String()
		if strings.HasPrefix(name, "UpstreamState(") {
			break // past the last state that has a name
		}
		m[name] = s
	}
	return m
}()

// parseState returns the state that name stands for, or unknownState, so
// that a reader never fails on a change that a newer writer made.
func parseState(name string) outlast.UpstreamState {
	if s, ok := stateByName[name]; ok {
		return s
	}
	return unknownState
}

// WriteStates stores state changes; see [Store.WriteStates]. Its
// statements are not prepared: a batch of them is rare, a handful of rows
// per outage.
func (s *sqlStore) WriteStates(ctx context.Context, changes []record.StateChange) error {
	if len(changes) == 0 {
		return nil
	}
	for i := range changes {
		if err := validateState(&changes[i]); err != nil {
			return err
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("journal: write states: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	per := max(s.d.rowsPerInsert, 1)
	args := make([]any, 0, min(len(changes), per)*stateNCols)
	for len(changes) > 0 {
		n := min(len(changes), per)
		args = args[:0]
		for _, c := range changes[:n] {
			args = append(args, clean(c.Upstream), s.d.timeArg(c.At), c.From.String(), c.To.String())
		}
		// One statement keeps its rows' order: ids number them as given.
		if _, err := tx.ExecContext(ctx, s.insert(stateTable, stateCols, stateNCols, n), args...); err != nil {
			return fmt.Errorf("journal: write states: %w", err)
		}
		changes = changes[n:]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("journal: write states: commit: %w", err)
	}
	return nil
}

// States returns state changes; see [Store.States].
func (s *sqlStore) States(ctx context.Context, q StateQuery) ([]record.StateChange, error) {
	limit, err := pageLimit(q.Limit)
	if err != nil {
		return nil, fmt.Errorf("journal: states: limit %d is negative", q.Limit)
	}
	var conds []string
	var args []any
	if q.Upstream != "" {
		args = append(args, q.Upstream)
		conds = append(conds, "upstream = "+s.d.ph(len(args)))
	}
	if !q.Since.IsZero() {
		args = append(args, s.d.timeArg(q.Since))
		conds = append(conds, "changed_at >= "+s.d.ph(len(args)))
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, limit)
	// The newest limit changes, turned oldest first.
	query := "SELECT " + stateCols + " FROM (SELECT id, " + stateCols + " FROM " + stateTable + where +
		" ORDER BY changed_at DESC, id DESC LIMIT " + s.d.ph(len(args)) + ") AS newest ORDER BY changed_at, id"
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("journal: states: %w", err)
	}
	defer rows.Close()
	out := []record.StateChange{}
	for rows.Next() {
		var c record.StateChange
		var from, to string
		if err := rows.Scan(&c.Upstream, timeScan{&c.At}, &from, &to); err != nil {
			return nil, fmt.Errorf("journal: states: %w", err)
		}
		c.From, c.To = parseState(from), parseState(to)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: states: %w", err)
	}
	return out, nil
}

// pruneStatesSQL deletes up to n state changes from before its one
// parameter. A subquery bounds it, since neither database's DELETE takes
// a LIMIT as built.
func pruneStatesSQL(d *dialect, n int) string {
	return "DELETE FROM " + stateTable + " WHERE id IN (SELECT id FROM " + stateTable +
		" WHERE changed_at < " + d.ph(1) + " LIMIT " + strconv.Itoa(n) + ")"
}

// pruneStates deletes the state changes from before, pruneChunk at a time,
// as Prune deletes requests, so that SQLite's write lock is never held
// long.
func (s *sqlStore) pruneStates(ctx context.Context, before time.Time) error {
	for {
		n, err := s.pruneStatesChunk(ctx, before)
		if err != nil || n < pruneChunk {
			return err
		}
	}
}

func (s *sqlStore) pruneStatesChunk(ctx context.Context, before time.Time) (int64, error) {
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
	res, err := s.exec(ctx, tx, stmtKey{true, stateTable, pruneChunk}, []any{s.d.timeArg(before)})
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
