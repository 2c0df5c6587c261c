package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// runState is where a demo run stands, for the terminal's board.
type runState int

const (
	stateSending runState = iota
	stateQueued
	stateWaiting
	stateDone
	stateRefused
	stateFailed
)

func (s runState) String() string {
	return [...]string{"sending", "queued", "waiting", "done", "refused", "failed"}[s]
}

// timeline prints the demo's events as they happen: one plain line each,
// and on a terminal a board of the runs below them, redrawn in place.
type demoTimeline struct {
	out   io.Writer
	tty   bool
	start time.Time

	mu     sync.Mutex // guards order, last, drawn and writes to out
	order  []string
	last   map[string]string // run → its board line
	drawn  int               // board lines on screen
	states map[string]runState
}

func newTimeline(out io.Writer, tty bool) *demoTimeline {
	return &demoTimeline{out: out, tty: tty, start: time.Now(), last: map[string]string{}, states: map[string]runState{}}
}

func (t *demoTimeline) intro() {
	fmt.Fprintln(t.out, "outlast demo: a mock provider is down (502) for 1.5s, rate-limited (429, Retry-After: 1) until 3s, then up.")
	fmt.Fprintln(t.out, "The gateway in front of it has one slot and a queue of 2; its policy waits 500ms, 1s, 2s (the last repeats")
	fmt.Fprintln(t.out, "under a deadline) and keeps a 1s reserve. Five host runs send through it, as a host in any language would.")
	fmt.Fprintln(t.out)
}

// event prints one timeline line for run.
func (t *demoTimeline) event(run string, state runState, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	elapsed := time.Since(t.start)
	msg := fmt.Sprintf(format, args...)
	if _, ok := t.last[run]; !ok {
		t.order = append(t.order, run)
	}
	t.states[run] = state
	t.last[run] = msg
	t.erase()
	fmt.Fprintf(t.out, "%6.2fs  %-15s %s\n", elapsed.Seconds(), run, msg)
	t.draw()
}

// finish leaves the final board on a terminal.
func (t *demoTimeline) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drawn = 0
}

// erase removes the board drawn last.
func (t *demoTimeline) erase() {
	if t.tty && t.drawn > 0 {
		fmt.Fprintf(t.out, "\x1b[%dA\x1b[J", t.drawn)
		t.drawn = 0
	}
}

// draw shows each run's state under the timeline.
func (t *demoTimeline) draw() {
	if !t.tty {
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[2m── runs ──\x1b[0m\n")
	for _, run := range t.order {
		fmt.Fprintf(&b, "  %-15s %s%-8s\x1b[0m %s\n", run, stateColor(t.states[run]), t.states[run], trim(t.last[run], 70))
	}
	io.WriteString(t.out, b.String())
	t.drawn = len(t.order) + 1
}

func stateColor(s runState) string {
	switch s {
	case stateQueued, stateWaiting, stateRefused:
		return "\x1b[33m"
	case stateDone:
		return "\x1b[32m"
	case stateFailed:
		return "\x1b[31m"
	}
	return "\x1b[36m"
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// isTerminal reports whether w is a terminal that takes ANSI escapes.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" || os.Getenv("NO_COLOR") != "" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
