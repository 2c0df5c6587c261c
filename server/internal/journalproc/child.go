package journalproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/outlast-llm/outlast/journal"
)

// childEnv, with childArg as the first argument, makes a binary that
// calls RunIfChild first the journal's writer process rather than what its
// arguments name: Start runs the binary again with it set to the SQLite
// spec to write.
const childEnv = "OUTLAST_INTERNAL_JOURNAL_WRITER"

// childArg is the writer's first argument: the variable alone, set by
// mistake, does not make a binary a writer.
const childArg = "__journal-writer"

// RunIfChild returns at once unless Start started this process as a
// journal writer. If it did, RunIfChild writes the batches it reads on
// stdin to the store, at the lowest CPU priority, until stdin ends, and
// exits: 0 when all went well, 1 with the error on stderr otherwise. A
// binary that uses Start calls RunIfChild first in main (a test binary,
// in TestMain).
func RunIfChild() {
	spec := os.Getenv(childEnv)
	if spec == "" || len(os.Args) < 2 || os.Args[1] != childArg {
		return
	}
	if err := runChild(spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: journal writer: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(spec string) error {
	lowerPriority()
	// Ctrl-C reaches the whole process group: the writer ends when its
	// parent, having flushed, closes its stdin, not before.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	store, err := journal.Open(context.Background(), spec)
	if err != nil {
		return err
	}
	defer store.Close()
	return Serve(os.Stdin, os.Stdout, store)
}

// Start returns base, the store spec opened, with its writes made by this
// binary run again as a writer (see RunIfChild), at the lowest CPU
// priority, so that they never take a core from the requests. It starts
// the writer once to check that it can.
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
