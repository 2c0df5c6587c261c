package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/outlast-llm/outlast/internal/journalproc"
	"github.com/outlast-llm/outlast/journal"
)

// writerEnv, when set, makes the outlast binary the journal's writer
// process rather than the command its arguments name: serve starts
// itself again with it set to the SQLite spec to write.
const writerEnv = "OUTLAST_INTERNAL_JOURNAL_WRITER"

// writerArg is the writer's first argument: the variable alone, set by
// mistake, does not make outlast a writer.
const writerArg = "__journal-writer"

// Writer modes, for --journal-writer.
const (
	writerProcess = "process"
	writerInline  = "inline"
)

// JournalWriter reports whether this process was started as serve's
// journal writer and, if so, runs it: it writes the batches it reads on
// stdin to the store, at the lowest CPU priority, until stdin ends. Main
// calls it first.
func JournalWriter() (bool, error) {
	spec := os.Getenv(writerEnv)
	if spec == "" || len(os.Args) < 2 || os.Args[1] != writerArg {
		return false, nil
	}
	lowerPriority()
	// Ctrl-C reaches the whole process group: the writer ends when serve,
	// having flushed, closes its stdin, not before.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	store, err := journal.Open(context.Background(), spec)
	if err != nil {
		return true, fmt.Errorf("journal writer: %w", err)
	}
	defer store.Close()
	return true, journalproc.Serve(os.Stdin, os.Stdout, store)
}

// writeThroughProcess returns base, the SQLite store spec opened, with
// its writes made by a child process at the lowest CPU priority, so that
// they never take a core from the requests. It starts the child once to
// check that it can.
func writeThroughProcess(ctx context.Context, spec string, base journal.Store) (journal.Store, error) {
	exe, err := self()
	if err != nil {
		return nil, fmt.Errorf("the journal writer: %w", err)
	}
	s := journalproc.New(base, func() *exec.Cmd {
		cmd := exec.Command(exe, writerArg)
		cmd.Env = append(os.Environ(), writerEnv+"="+spec)
		cmd.Stderr = os.Stderr
		return cmd
	})
	if err := s.Write(ctx, nil); err != nil {
		return nil, fmt.Errorf("the journal writer: %w", err)
	}
	return s, nil
}

// inProcessWriter says whether the store spec names is written by serve
// itself: PostgreSQL, whose writes spend their CPU on its server; SQLite
// in memory, which no other process can reach; and any with
// --journal-writer inline; and all where the writer's priority cannot be
// lowered.
func inProcessWriter(spec, mode string) bool {
	return mode == writerInline || !canLowerPriority || !strings.HasPrefix(spec, "sqlite:") || spec == "sqlite::memory:"
}
