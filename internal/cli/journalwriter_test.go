package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/internal/journalproc"
	"github.com/outlast-llm/outlast/journal"
)

// TestMain lets the test binary be serve's journal writer, as the outlast
// binary is.
func TestMain(m *testing.M) {
	journalproc.RunIfChild()
	os.Exit(m.Run())
}

// TestJournalWriterModes checks which journals serve writes through a
// process: a SQLite file by default, nothing else, and nothing with
// --journal-writer inline.
func TestJournalWriterModes(t *testing.T) {
	for _, tt := range []struct {
		spec, mode string
		process    bool
	}{
		{"sqlite:" + filepath.Join(t.TempDir(), "a.db"), writerProcess, true},
		{"sqlite:" + filepath.Join(t.TempDir(), "b.db"), writerInline, false},
		{"sqlite::memory:", writerProcess, false},
	} {
		cfg := loadServe(t, "--upstream", "http://127.0.0.1:1", "--journal", tt.spec, "--journal-writer", tt.mode)
		rec, err := openRecord(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s %s: %v", tt.spec, tt.mode, err)
		}
		_, isProc := rec.store.(*journalproc.Store)
		if isProc != tt.process {
			t.Errorf("%s with --journal-writer %s: written by a process %v, want %v", tt.spec, tt.mode, isProc, tt.process)
		}
		// A record added is in the store once the writer has closed.
		start := time.Now()
		rec.writer.Add(journal.Record{ID: "r1", Start: start, End: start})
		rec.close(new(lockedBuffer))
		if tt.spec == "sqlite::memory:" {
			continue
		}
		s, err := journal.Open(context.Background(), tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(context.Background(), "r1"); err != nil {
			t.Errorf("%s %s: the record after close: %v", tt.spec, tt.mode, err)
		}
		s.Close()
	}
}

// TestJournalWriterFlag checks that a bad --journal-writer is refused as
// a usage error naming it.
func TestJournalWriterFlag(t *testing.T) {
	_, _, err := serveConfigFrom([]string{"--upstream", "http://127.0.0.1:1", "--journal-writer", "thread"}, new(lockedBuffer))
	if !errors.Is(err, ErrUsage) || err == nil || !strings.Contains(err.Error(), "--journal-writer") {
		t.Errorf("got %v, want a usage error naming --journal-writer", err)
	}
}
