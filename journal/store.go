package journal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// DefaultSpec is the store [Open] opens for an empty spec: a SQLite
// database in the working directory.
const DefaultSpec = "sqlite:outlast.db"

// Limits of [Query.Limit].
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// Errors a Store returns; match them with errors.Is.
var (
	// ErrNotFound is returned by Get for an unknown request, and by Run
	// for a run with no requests.
	ErrNotFound = errors.New("journal: not found")

	// ErrBadCursor is returned by List for a cursor it did not make.
	ErrBadCursor = errors.New("journal: bad cursor")
)

// A Store keeps records. Its methods are safe for concurrent use, and
// every record they return has its attempts, in order of N.
type Store interface {
	// Write stores recs in one transaction: all of them, each with all
	// its attempts, or none. A record whose ID is already stored replaces
	// it, attempts and all, so writing a batch again is harmless. A record
	// that cannot be stored (see [ErrInvalid]) fails the batch before
	// anything is written. Write must not keep recs after it returns.
	Write(ctx context.Context, recs []Record) error

	// Get returns the request with the given ID, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)

	// List returns a page of the requests that q selects, newest first.
	List(ctx context.Context, q Query) (Page, error)

	// Run returns the requests of a run, oldest first, or an error
	// wrapping ErrNotFound if it has none.
	Run(ctx context.Context, run string) ([]Record, error)

	// Prune deletes the requests that ended before the given time, with
	// their attempts, and returns how many requests it deleted. A request
	// with no end counts from its start, and one whose end is before its
	// start (a clock stepped back) from its start too.
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

// A Page is one page of [Store.List].
type Page struct {
	// Records are the page's requests, newest first.
	Records []Record `json:"records"`
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
	if spec == "" {
		spec = DefaultSpec
	}
	switch {
	case spec == "off":
		return nil, nil
	case strings.HasPrefix(spec, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(spec, "sqlite:"))
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		return openPostgres(ctx, spec)
	}
	return nil, fmt.Errorf("journal: spec %q: want off, sqlite:PATH or postgres://…", redactSpec(spec))
}

// redactSpec hides a password in spec, for error messages.
func redactSpec(spec string) string {
	if u, err := url.Parse(spec); err == nil && u.User != nil {
		return u.Redacted()
	}
	return spec
}
