package journalproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/outlast-llm/outlast/journal"
)

// childEnv, with childArg as the first argument, makes a binary that
// calls Child first the journal's writer process rather than what its
// arguments name: Start runs the binary again with it set to the SQLite
// spec to write.
const childEnv = "OUTLAST_INTERNAL_JOURNAL_WRITER"

// childArg is the writer's first argument: the variable alone, set by
// mistake, does not make a binary a writer.
const childArg = "__journal-writer"

// Child reports whether this process was started by Start as a journal
// writer and, if so, runs it: it writes the batches it reads on stdin to
// the store, at the lowest CPU priority, until stdin ends. A binary that
// uses Start calls Child first in main (a test binary, in TestMain).
func Child() (bool, error) {
	spec := os.Getenv(childEnv)
	if spec == "" || len(os.Args) < 2 || os.Args[1] != childArg {
		return false, nil
	}
	lowerPriority()
	// Ctrl-C reaches the whole process group: the writer ends when its
	// parent, having flushed, closes its stdin, not before.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	store, err := journal.Open(context.Background(), spec)
	if err != nil {
		return true, fmt.Errorf("journal writer: %w", err)
	}
	defer store.Close()
	return true, Serve(os.Stdin, os.Stdout, store)
}

// Start returns base, the store spec opened, with its writes made by this
// binary run again as a Child, at the lowest CPU priority, so that they
// never take a core from the requests. It starts the child once to check
// that it can.
func Start(ctx context.Context, spec string, base journal.Store) (*Store, error) {
	exe, err := self()
	if err != nil {
		return nil, fmt.Errorf("the journal writer: %w", err)
	}
	s := New(base, func() *exec.Cmd {
		cmd := exec.Command(exe, childArg)
		cmd.Env = append(os.Environ(), childEnv+"="+spec)
		cmd.Stderr = os.Stderr
		return cmd
	})
	if err := s.Write(ctx, nil); err != nil {
		return nil, fmt.Errorf("the journal writer: %w", err)
	}
	return s, nil
}
