package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
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
