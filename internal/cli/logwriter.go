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
// each request more than the line's formatting does. The writes are made
// by the timer's goroutine, not a request's, unless logMax bytes wait:
// then the writer is behind, and the line that finds it so waits for it
// too, so that the log's memory is bounded and no line is lost.
const (
	logFlushAfter = 100 * time.Millisecond
	logBuffer     = 32 << 10
	logMax        = 8 * logBuffer
)

// A logWriter buffers what is written to it for w, as the constants say.
// Flush writes what waits at once. It is safe for concurrent use, and
// writes to w in the order its lines came.
type logWriter struct {
	w     io.Writer
	timer *time.Timer // armed while lines wait

	mu     sync.Mutex // guards the fields below
	buf    []byte     // the lines waiting
	spare  []byte     // a written buffer, for buf to reuse
	kicked bool       // the timer is set to fire at once

	// writing is held while a buffer is taken and written to w, so that
	// buffers are written in the order they were filled. A channel
	// rather than a sync.Mutex: waiting for it is then durably blocked in
	// a synctest bubble, where the tests of a stuck collector run.
	writing chan struct{}
}

func newLogWriter(w io.Writer) *logWriter {
	l := &logWriter{w: w, writing: make(chan struct{}, 1)}
	l.timer = time.AfterFunc(time.Hour, l.Flush)
	l.timer.Stop()
	return l
}

// Write keeps p, as the constants say. Its error is that of the write to
// w that it made, if it made one.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	first := len(l.buf) == 0
	l.buf = append(l.buf, p...)
	return len(p), l.keptLocked(first)
}

// writeLine is Write(appendLine(nil, r)) without the copy: r is encoded
// in place, after what waits.
func (l *logWriter) writeLine(r slog.Record) error {
	l.mu.Lock()
	first := len(l.buf) == 0
	l.buf = appendLine(l.buf, r)
	return l.keptLocked(first)
}

// keptLocked arranges for the write of what waits, now that a line has
// been added to it (to an empty buffer if first). It unlocks mu.
func (l *logWriter) keptLocked(first bool) error {
	switch {
	case len(l.buf) >= logMax:
		return l.flushLocked()
	case len(l.buf) >= logBuffer && !l.kicked:
		l.kicked = true
		l.timer.Reset(0)
	case first:
		l.timer.Reset(logFlushAfter)
	}
	l.mu.Unlock()
	return nil
}

// Flush writes what waits.
func (l *logWriter) Flush() {
	l.mu.Lock()
	l.flushLocked()
}

// flushLocked writes what waits, letting lines be added meanwhile: it
// waits for a write under way without holding mu, and takes the buffer
// only once it may write, so that buffers go out in the order they were
// filled. It unlocks mu.
func (l *logWriter) flushLocked() error {
	l.timer.Stop()
	l.kicked = false
	l.mu.Unlock()
	l.writing <- struct{}{}
	l.mu.Lock()
	buf := l.buf
	l.buf, l.spare = l.spare[:0], nil
	l.mu.Unlock()
	var err error
	if len(buf) > 0 {
		_, err = l.w.Write(buf)
	}
	<-l.writing
	if cap(buf) <= 4*logBuffer { // a burst's buffer is not kept
		l.mu.Lock()
		l.spare = buf[:0]
		l.mu.Unlock()
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
