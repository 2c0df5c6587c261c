package cli

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The log's buffer: lines wait at most logFlushAfter, or until logBuffer
// bytes are waiting, and go in one write. A write per line would cost
// each request more than the line's formatting does.
const (
	logFlushAfter = 100 * time.Millisecond
	logBuffer     = 32 << 10
)

// A logWriter buffers what is written to it for w, as the constants say.
// Flush writes what waits at once. It is safe for concurrent use.
type logWriter struct {
	w     io.Writer
	mu    sync.Mutex
	buf   []byte
	timer *time.Timer // armed while lines wait: while buf holds any
}

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w}
	l.timer = time.AfterFunc(time.Hour, l.Flush)
	l.timer.Stop()
	return l
}

// Write keeps p, and writes what waits if it is logBuffer or more. Its
// error is the last write's to w.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := len(l.buf) == 0
	l.buf = append(l.buf, p...)
	if len(l.buf) >= logBuffer {
		return len(p), l.flushLocked()
	}
	if first {
		l.timer.Reset(logFlushAfter)
	}
	return len(p), nil
}

// writeLine is Write(appendLine(nil, r)) without the copy: r is
// encoded in place, after what waits.
func (l *logWriter) writeLine(r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := len(l.buf) == 0
	l.buf = appendLine(l.buf, r)
	if len(l.buf) >= logBuffer {
		return l.flushLocked()
	}
	if first {
		l.timer.Reset(logFlushAfter)
	}
	return nil
}

// Flush writes what waits.
func (l *logWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *logWriter) flushLocked() error {
	l.timer.Stop()
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	if cap(l.buf) > 4*logBuffer {
		l.buf = nil // a burst's buffer is not kept
	}
	return err
}

// jsonLog is serve's JSON handler: it writes durations as Go writes
// them ("1.5s"), not as a count of nanoseconds, and writes what waits in
// w after each line of level warn or more, so that trouble is seen at
// once. It converts durations itself rather than with ReplaceAttr, which
// would make every line's level go through encoding/json, and writes
// plain lines (see plainLine), the request lines among them, itself.
type jsonLog struct {
	slog.Handler
	w       *logWriter
	derived bool // by WithAttrs or WithGroup: every line goes to Handler
}

func (h jsonLog) Handle(ctx context.Context, r slog.Record) error {
	if !h.derived && plainLine(r) {
		err := h.w.writeLine(r)
		if r.Level >= slog.LevelWarn {
			h.w.Flush()
		}
		return err
	}
	if hasDuration(r) {
		var buf [16]slog.Attr
		as := buf[:0]
		r.Attrs(func(a slog.Attr) bool {
			as = append(as, durationText(a))
			return true
		})
		r2 := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
		r2.AddAttrs(as...) // at once: one allocation at most
		r = r2
	}
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.w.Flush()
	}
	return err
}

func (h jsonLog) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = durationText(a)
	}
	return jsonLog{h.Handler.WithAttrs(out), h.w, true}
}

func (h jsonLog) WithGroup(name string) slog.Handler {
	return jsonLog{h.Handler.WithGroup(name), h.w, true}
}

// hasDuration reports whether r has an attribute that durationText
// changes.
func hasDuration(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Value.Kind() == slog.KindDuration || a.Value.Kind() == slog.KindGroup
		return !found
	})
	return found
}

// durationText returns a with its durations, in groups too, as text.
func durationText(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindGroup:
		g := a.Value.Group()
		out := make([]slog.Attr, len(g))
		for i, x := range g {
			out[i] = durationText(x)
		}
		a.Value = slog.GroupValue(out...)
	}
	return a
}
