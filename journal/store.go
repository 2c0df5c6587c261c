package journal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outlast-llm/outlast/record"
)

// DefaultSpec is the store [Open] opens for an empty spec: a SQLite
// database in the working directory.
const DefaultSpec = "sqlite:outlast.db"

// Limits of [Query.Limit].
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// MaxRun is the most requests [Store.Run] returns: a longer run is
// ErrRunTooLong, to be paged through with List's Query.Run, so that one
// read cannot take the gateway's memory.
const MaxRun = 10_000

// Errors a Store returns; match them with errors.Is.
var (
	// ErrNotFound is returned by Get for an unknown request, and by Run
	// for a run with no requests.
	ErrNotFound = errors.New("journal: not found")

	// ErrBadCursor is returned by List for a cursor it did not make.
	ErrBadCursor = errors.New("journal: bad cursor")

	// ErrRunTooLong is returned by Run for a run of more than MaxRun
	// requests.
	ErrRunTooLong = errors.New("journal: run too long to return at once")

	// ErrNoJournal is wrapped by OpenExisting's error when its spec names
	// no journal: a SQLite file that does not exist, or a database
	// without the journal's tables.
	ErrNoJournal = errors.New("journal: no journal there")
)

// A Store keeps records. Its methods are safe for concurrent use, and
// every record they return has its attempts, in order of N.
type Store interface {
	// Write stores recs in one transaction: all of them, each with all
	// its attempts, or none. A record whose ID is already stored replaces
	// it, attempts and all, so writing a batch again is harmless. A record
	// that cannot be stored (see [ErrInvalid]) fails the batch before
	// anything is written. Write must not keep recs after it returns.
	Write(ctx context.Context, recs []record.Request) error

	// Get returns the request with the given ID, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, id string) (record.Request, error)

	// List returns a page of the requests that q selects, newest first.
	List(ctx context.Context, q Query) (Page, error)

	// Run returns the requests of a run, oldest first, or an error
	// wrapping ErrNotFound if it has none, or ErrRunTooLong if it has
	// more than MaxRun.
	Run(ctx context.Context, run string) ([]record.Request, error)

	// Ended returns up to limit requests (as Query.Limit bounds it) that
	// ended after the request that ended at end with the given ID, in the
	// order they ended: by end, then by ID. A zero end starts at the
	// first request to end. Requests with no end are never returned. A
	// reader that follows the journal asks again from the last request it
	// got, and so never skips a request that started before one it has
	// already seen.
	Ended(ctx context.Context, end time.Time, id string, limit int) ([]record.Request, error)

	// WriteStates stores changes, upstreams' admission state changes, in
	// one transaction: all of them or none. A change that cannot be
	// stored (see [ErrInvalid]) fails the batch before anything is
	// written. Changes have no ID: a batch written again, after a write
	// whose commit went unanswered, is kept twice. WriteStates must not
	// keep changes after it returns.
	WriteStates(ctx context.Context, changes []record.StateChange) error

	// States returns the state changes that q selects: the newest of
	// them, as many as q.Limit allows, oldest first. Changes at the same
	// millisecond come in the order they were written.
	States(ctx context.Context, q StateQuery) ([]record.StateChange, error)

	// Prune deletes the requests that ended before the given time, with
	// their attempts, and the state changes from before it, and returns
	// how many requests it deleted. A request with no end counts from its
	// start, and one whose end is before its start (a clock stepped back)
	// from its start too.
	Prune(ctx context.Context, before time.Time) (int64, error)

	// Close releases the store's connections.
	Close() error
}

// A Query selects requests for [Store.List]. The zero Query selects the
// newest DefaultLimit requests.
type Query struct {
	// Run selects one run's requests. Empty means any.
	Run string
	// Status selects the requests that ended with this status. Zero means
	// any.
	Status int
	// Since selects the requests that started at or after it. Zero means
	// any.
	Since time.Time
	// Limit bounds the page. Zero means DefaultLimit; more than MaxLimit
	// means MaxLimit; a negative limit is an error.
	Limit int
	// Cursor continues from a page's Next. Empty means the first page.
	// Give it with the same Run, Status and Since as the page it came from.
	Cursor string
}

// A StateQuery selects upstream state changes for [Store.States]. The zero
// StateQuery selects the newest DefaultLimit changes of every upstream.
type StateQuery struct {
	// Upstream selects one upstream's changes. Empty means any.
	Upstream string
	// Since selects the changes at or after it. Zero means any.
	Since time.Time
	// Limit bounds the changes returned, which are the newest of those
	// selected. Zero means DefaultLimit; more than MaxLimit means
	// MaxLimit; a negative limit is an error.
	Limit int
}

// A Page is one page of [Store.List].
type Page struct {
	// Requests are the page's requests, newest first.
	Requests []record.Request `json:"requests"`
	// Next is the cursor for the next page, or empty after the last one.
	Next string `json:"next,omitempty"`
}

// Open opens the store that spec names, creating or migrating its schema:
//   - "sqlite:PATH": a SQLite database file, created if missing
//     (PATH ":memory:" is a database that lives as long as the Store);
//   - "postgres://…" or "postgresql://…": a PostgreSQL database, with the
//     connection string pgx takes (search_path and other settings may be
//     given as query parameters or with options=-c …);
//   - "off": no store: Open returns a nil Store and a nil error, and the
//     caller keeps no record;
//   - "": DefaultSpec.
//
// Open checks ctx while it connects and migrates.
func Open(ctx context.Context, spec string) (Store, error) {
	return open(ctx, spec, true)
}

// OpenExisting opens the store that spec names, as Open does, but never
// creates one and never changes its schema: a spec that names no journal
// gets an error wrapping ErrNoJournal. It is for readers, which must not
// leave an empty journal behind where they looked for one. "off" is an
// error too: there is nothing to read.
func OpenExisting(ctx context.Context, spec string) (Store, error) {
	if spec == "off" {
		return nil, fmt.Errorf("%w: the journal is off", ErrNoJournal)
	}
	return open(ctx, spec, false)
}

// CheckSpec reports whether spec is one Open takes, without opening it:
// its errors name what is wrong, for a program to refuse at start.
func CheckSpec(spec string) error {
	switch {
	case spec == "", spec == "off":
		return nil
	case strings.HasPrefix(spec, "sqlite:"):
		return checkSQLitePath(strings.TrimPrefix(spec, "sqlite:"))
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		_, err := pgxpool.ParseConfig(spec)
		if err == nil {
			return nil
		}
		// pgx's message hides the password, but shows the rest of the
		// spec raw in backquotes, line breaks and all, and its reason
		// may hold a value of the spec raw. Keep pgx's redacted spec,
		// cut out of "cannot parse `SPEC`: REASON" with the reason that
		// a copy without the spec gives; quote it, and the reason if it
		// holds a line break, so that the message is one line.
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) {
			bare := *pe
			bare.ConnString = ""
			reason, rok := strings.CutPrefix(bare.Error(), "cannot parse ``: ")
			shown, sok := strings.CutSuffix(pe.Error(), "`: "+reason)
			if shown, pok := strings.CutPrefix(shown, "cannot parse `"); rok && sok && pok {
				if strings.ContainsAny(reason, "\r\n") {
					reason = strconv.Quote(reason)
				}
				return fmt.Errorf("journal: cannot parse %q: %s", hideParams(shown), reason)
			}
		}
		// pgx's message of another shape, quoted whole.
		return fmt.Errorf("journal: %q", hideParams(err.Error()))
	}
	return fmt.Errorf("journal: spec %q: want off, sqlite:PATH or postgres://…", redactSpec(spec))
}

func open(ctx context.Context, spec string, create bool) (Store, error) {
	if spec == "" {
		spec = DefaultSpec
	}
	if err := CheckSpec(spec); err != nil {
		return nil, err
	}
	switch {
	case spec == "off":
		return nil, nil
	case strings.HasPrefix(spec, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(spec, "sqlite:"), create)
	}
	return openPostgres(ctx, spec, create)
}

// redactSpec hides the passwords in spec, for error messages: the user
// info's, and a parameter's whose name holds "password" (libpq's and
// pgx's password and sslpassword).
func redactSpec(spec string) string {
	spec = hideParams(spec)
	if u, err := url.Parse(spec); err == nil && u.User != nil {
		return u.Redacted()
	}
	return spec
}

// hideParams hides the value of every parameter in s whose name ends in
// "password" (password, sslpassword), in a URL's query or a key=value
// string, as pgx's messages quote them.
func hideParams(s string) string { return passwordParam.ReplaceAllString(s, "${1}xxxxx") }

var passwordParam = regexp.MustCompile(`(?i)(password=)[^&\s'"` + "`" + `]*`)
