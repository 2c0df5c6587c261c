package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestLogBuffered checks serve's log to a collector: an info line waits
// for the buffer's time, a warning goes at once with what waited before
// it, and every line is JSON with durations as Go writes them.
func TestLogBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		logger, flush := newLogger(&out, slog.LevelInfo)
		defer flush()
		logger.Info("outlast: request", "took", 1500*time.Millisecond)
		if got := out.String(); got != "" {
			t.Fatalf("an info line was written at once: %q; want it held for %v", got, logFlushAfter)
		}
		time.Sleep(logFlushAfter)
		synctest.Wait()
		if !strings.Contains(out.String(), `"took":"1.5s"`) {
			t.Fatalf("after %v the log holds %q; want the info line, its duration as 1.5s", logFlushAfter, out.String())
		}
		logger.Info("first")
		logger.Warn("outlast: retrying", "in", 2*time.Second, slog.Group("g", "d", time.Minute))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("after a warning the log has %d lines, want 3 (the warning and the line before it at once):\n%s", len(lines), out.String())
		}
		var warn struct {
			Msg string
			In  string
			G   struct{ D string }
		}
		if err := json.Unmarshal([]byte(lines[2]), &warn); err != nil || warn.In != "2s" || warn.G.D != "1m0s" {
			t.Errorf("the warning %s: %+v, %v; want in 2s and g.d 1m0s", lines[2], warn, err)
		}
		if !strings.Contains(lines[1], `"msg":"first"`) {
			t.Errorf("the line before the warning is %s; want it before the warning", lines[1])
		}
	})
}

// TestLogBufferFull checks that lines past the buffer's size go without
// waiting for its time.
func TestLogBufferFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		logger, flush := newLogger(&out, slog.LevelInfo)
		defer flush()
		big := strings.Repeat("x", 1024)
		for range logBuffer/1024 + 1 {
			logger.Info("line", "pad", big)
		}
		time.Sleep(time.Nanosecond) // not logFlushAfter
		synctest.Wait()
		if n := len(out.String()); n < logBuffer {
			t.Errorf("%d bytes written of more than %d held; want them written once the buffer is full", n, logBuffer)
		}
	})
}

// TestLogLevel checks --log-level: warn leaves the request lines out,
// and a level that is not one of the four is refused by name.
func TestLogLevel(t *testing.T) {
	args := []string{"--upstream", "http://127.0.0.1:9", "--journal", "off", "--log-level", "warn"}
	sc, _, err := serveConfigFrom(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if sc.logLevel != slog.LevelWarn {
		t.Errorf("--log-level warn: level %v, want WARN", sc.logLevel)
	}
	cfg, _, err := ServeConfig(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.Logger.Enabled(t.Context(), slog.LevelInfo) {
		t.Error("--log-level warn: the logger takes info lines, the request lines")
	}
	for _, bad := range []string{"loud", "info+2", ""} {
		_, _, err := ServeConfig([]string{"--upstream", "http://127.0.0.1:9", "--log-level", bad}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("--log-level %q: err %v, want one that names the levels", bad, err)
		}
	}
}

// stuckWriter is a log collector that takes nothing until released.
type stuckWriter struct {
	release chan struct{}
	writing chan struct{} // closed at the first write
	once    sync.Once
	out     lockedBuffer
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	return w.out.Write(p)
}

// TestLogWriterBehind checks a log collector that stops taking lines: a
// full buffer is written by another goroutine than the request's, which
// goes on; lines keep coming up to logMax bytes, and past it the line
// that finds the writer behind waits for it. Once the collector takes
// lines again, every line is there, in order.
func TestLogWriterBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &stuckWriter{release: make(chan struct{}), writing: make(chan struct{})}
		lw := newLogWriter(w)
		logger := slog.New(jsonLog{Handler: slog.NewJSONHandler(lw, nil), w: lw})
		waiting := func() int {
			lw.mu.Lock()
			defer lw.mu.Unlock()
			return lw.held
		}
		big := strings.Repeat("x", 1000)
		n := 0
		line := func() {
			logger.Info("line", "n", n, "pad", big)
			n++
		}
		for waiting() < logBuffer {
			line()
		}
		<-w.writing // the first buffer's write, stuck, from the timer's goroutine
		for waiting() < logMax-2*1100 {
			line() // the request goes on
			// The buffer's next kick fires too, and its flush waits for
			// the stuck write: it must not hold the lock lines need.
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if !lw.mu.TryLock() {
				t.Fatalf("after %d lines, a flush waiting for the stuck write holds the log's lock", n)
			}
			lw.mu.Unlock()
		}
		waited := make(chan struct{})
		go func() {
			for range 3 {
				line()
			}
			close(waited)
		}()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatalf("%d lines went past a stuck writer; want a line to wait once %d bytes wait", n, logMax)
		default:
		}
		close(w.release)
		<-waited
		lw.Flush()
		lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
		if len(lines) != n {
			t.Fatalf("%d lines written, want %d", len(lines), n)
		}
		for i, line := range lines {
			var l struct{ N int }
			if err := json.Unmarshal([]byte(line), &l); err != nil || l.N != i {
				t.Fatalf("line %d is %.60s… (%v); want line n=%d, in order", i, line, err, i)
			}
		}
	})
}
