package cli

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/gateway"
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
//
// A request's line waits as its fields (a gateway.RequestLine) and is
// formatted by the goroutine that writes it, in a batch with the others,
// so that a request pays only for keeping it.
type logWriter struct {
	w     io.Writer
	timer *time.Timer // armed while lines wait

	mu         sync.Mutex // guards the fields below
	held       int        // the bytes waiting, a request line's as requestLineSize counts them
	buf        []byte     // the lines waiting that were written as bytes
	lines      []heldLine // the request lines waiting, in order with buf
	spare      []byte     // a written buf, for buf to reuse
	spareLines []heldLine // a written lines, emptied, for lines to reuse
	kicked     bool       // the timer is set to fire at once

	// writing is held while the lines waiting are taken, formatted and
	// written to w, so that they are written in the order they came. A
	// channel rather than a sync.Mutex: waiting for it is then durably
	// blocked in a synctest bubble, where the tests of a stuck collector
	// run.
	writing chan struct{}
	out     []byte     // the bytes being written; guarded by writing
	stamps  stampCache // the records' times; guarded by writing
}

// A heldLine is a request's line waiting as its fields: it goes after
// the first at bytes of buf.
type heldLine struct {
	at   int
	line gateway.RequestLine
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
	first := l.held == 0
	l.buf = append(l.buf, p...)
	l.held += len(p)
	return len(p), l.keptLocked(first)
}

// writeRequestLine keeps line, to be written as appendLine writes its
// Record.
func (l *logWriter) writeRequestLine(line gateway.RequestLine) error {
	size := requestLineSize(&line)
	l.mu.Lock()
	first := l.held == 0
	l.lines = append(l.lines, heldLine{len(l.buf), line})
	l.held += size
	return l.keptLocked(first)
}

// requestLineSize is the length of line's text before escapes, as
// plainLine counts it for line's Record: that of a line with no text,
// and its text.
func requestLineSize(line *gateway.RequestLine) int {
	return emptyRequestLine + len(line.ID) + len(line.Run) + len(line.Method) + len(line.Path) + len(line.Upstream) + len(line.Error)
}

// emptyRequestLine is the length plainLine counts for a request line
// with no text: its time, level and message, its keys, its strings'
// quotes and its numbers at their longest.
var emptyRequestLine, _ = plainLine((&gateway.RequestLine{}).Record())

// keptLocked arranges for the write of what waits, now that a line has
// been added to it (to nothing if first). It unlocks mu.
func (l *logWriter) keptLocked(first bool) error {
	switch {
	case l.held >= logMax:
		return l.flushLocked()
	case l.held >= logBuffer && !l.kicked:
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
// waits for a write under way without holding mu, and takes what waits
// only once it may write, so that lines go out in the order they came.
// It unlocks mu.
func (l *logWriter) flushLocked() error {
	l.timer.Stop()
	l.kicked = false
	l.mu.Unlock()
	l.writing <- struct{}{}
	l.mu.Lock()
	buf, lines := l.buf, l.lines
	l.buf, l.spare = l.spare[:0], nil
	l.lines, l.spareLines = l.spareLines[:0], nil
	l.held = 0
	l.mu.Unlock()
	out := buf
	if len(lines) > 0 {
		out = l.out[:0]
		from := 0
		for i := range lines {
			h := &lines[i]
			out = append(out, buf[from:h.at]...)
			out = appendLine(out, h.line.Record(), &l.stamps)
			from = h.at
		}
		out = append(out, buf[from:]...)
		clear(lines) // the lines' strings are garbage now
		if cap(out) <= 4*logBuffer {
			l.out = out
		}
	}
	var err error
	if len(out) > 0 {
		_, err = l.w.Write(out)
	}
	<-l.writing
	l.mu.Lock()
	// A burst's buffers are not kept: a buf past 4·logBuffer bytes, a
	// lines past 512 lines (80 KiB).
	if cap(buf) <= 4*logBuffer {
		l.spare = buf[:0]
	}
	if cap(lines) <= 512 {
		l.spareLines = lines[:0]
	}
	l.mu.Unlock()
	return err
}

// jsonLog is serve's JSON handler: it writes durations as Go writes
// them ("1.5s"), not as a count of nanoseconds, and writes what waits in
// w after each line of level warn or more, so that trouble is seen at
// once. It converts durations itself rather than with ReplaceAttr, which
// would make every line's level go through encoding/json, and writes
// plain lines (see plainLine) and the gateway's request lines itself.
type jsonLog struct {
	slog.Handler
	w       *logWriter
	derived bool // by WithAttrs or WithGroup: every line goes to Handler
}

// HandleRequestLine keeps the gateway's request line as its fields, for
// the log's goroutine to format: see gateway.RequestLineHandler.
func (h jsonLog) HandleRequestLine(ctx context.Context, line gateway.RequestLine) error {
	if h.derived {
		return h.Handle(ctx, line.Record())
	}
	return h.w.writeRequestLine(line)
}

func (h jsonLog) Handle(ctx context.Context, r slog.Record) error {
	if !h.derived {
		// A derived handler's lines carry its attributes and groups, which
		// only slog's handler writes, so plainLine is not asked.
		if _, ok := plainLine(r); ok {
			var b [512]byte
			var c stampCache
			_, err := h.w.Write(appendLine(b[:0], r, &c))
			if r.Level >= slog.LevelWarn {
				h.w.Flush()
			}
			return err
		}
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
