package gateway

import (
	"context"
	"log/slog"
	"time"
)

// RequestLine is the line the gateway logs at level info once a request
// is done: its Record is what a logger's handler gets, unless the handler
// is a RequestLineHandler.
type RequestLine struct {
	End      time.Time     // when the gateway was done with the request: the line's time
	ID       string        // the request's Outlast-Request-Id
	Run      string        // its Outlast-Run, or ""
	Method   string        // its HTTP method
	Path     string        // its path, without the query
	Upstream string        // the upstream that served it
	Status   int           // the status the caller got; 499 if it left before its answer began
	Attempts int           // the attempts made
	Took     time.Duration // from its arrival to End
	Error    string        // the kind of its failure (see record.Request.Error), or ""
}

// Record returns the line as a slog.Record at level info, with the
// message "outlast: request" and no program counter: its attributes are id, run, method, path, upstream,
// status, attempts, took and error, in that order.
func (l *RequestLine) Record() slog.Record {
	r := slog.NewRecord(l.End, slog.LevelInfo, "outlast: request", 0)
	r.AddAttrs(
		slog.String("id", l.ID),
		slog.String("run", l.Run),
		slog.String("method", l.Method),
		slog.String("path", l.Path),
		slog.String("upstream", l.Upstream),
		slog.Int("status", l.Status),
		slog.Int("attempts", l.Attempts),
		slog.Duration("took", l.Took),
		slog.String("error", l.Error),
	)
	return r
}

// A RequestLineHandler is a slog.Handler that takes the request's line as
// it is, rather than as its Record: the gateway calls HandleRequestLine
// in place of Handle, once Enabled has accepted level info. It may keep
// the line and make its Record later, off the request's path, as
// outlast serve's log does: a Record of nine attributes costs the
// request more than the line's fields do.
type RequestLineHandler interface {
	slog.Handler
	HandleRequestLine(context.Context, RequestLine) error
}
