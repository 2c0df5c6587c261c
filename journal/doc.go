// Package journal is the gateway's durable record: one record.Request per
// request, with one record.Attempt per try at it, so that anyone reading a
// run later sees each failure, the wait that followed and the next
// attempt; and each change of an upstream's admission state (a
// record.StateChange), so that the same reader sees when the upstream
// went down, was probed and came back.
//
// A [Store] keeps the records. [Open] makes one from a spec:
//   - "sqlite:PATH", an embedded SQLite database (pure Go, no cgo), the
//     default being [DefaultSpec];
//   - "postgres://…" or "postgresql://…", a PostgreSQL database that
//     several gateway replicas share;
//   - "off", no record at all: Open returns a nil Store and a nil error.
//
// Open creates the schema, or migrates it, before it returns. The
// migrations are an ordered list recorded in the table
// outlast_schema_version; applying them twice changes nothing, and
// replicas that start together on PostgreSQL take turns under an advisory
// lock.
//
// # What is kept, and what never is
//
// No request or response body is kept, and headers only when asked
// ([ObserverConfig.Headers]). The records arrive already safe: the
// gateway has removed the credentials (Authorization, X-Api-Key, Cookie,
// Proxy-Authorization and the like) and any header a deployment names,
// and cut the query and user info from every URL in an error message,
// since transport errors quote the URL they failed on and some APIs take
// keys in the query. Every Store does both again on write, with the same
// list and the same sanitizer, in case a caller forgot.
//
// # Writes never slow a request
//
// A [Writer] takes records from the request path without blocking and
// writes them in batches, each batch in one transaction, from a goroutine
// of its own. When its buffer is full it drops records and counts them; a
// crash loses what it held, which is at most [WriterConfig.Size] records
// and at most [WriterConfig.FlushInterval] of them.
//
// A [Keeper] deletes old records and state changes on a schedule.
package journal
