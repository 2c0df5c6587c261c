package main

import (
	"context"
	"os"
	"os/exec"

	"github.com/outlast-llm/outlast/internal/journalproc"
	"github.com/outlast-llm/outlast/journal"
)

// childEnv names the SQLite database a child writer writes; main runs
// childMain instead of the benchmark when it is set.
const childEnv = "OUTLAST_LOAD_JOURNAL_CHILD"

// childMain is the child writer, for --journal-child: it writes the
// batches it reads on stdin to the SQLite database that childEnv names.
func childMain() error {
	store, err := journal.Open(context.Background(), "sqlite:"+os.Getenv(childEnv))
	if err != nil {
		return err
	}
	defer store.Close()
	return journalproc.Serve(os.Stdin, os.Stdout, store)
}

// newChildStore returns a Store that reads from base and writes through
// this program re-run as a child writer at nice 19, so that the OS,
// rather than Go's scheduler, puts the requests first.
func newChildStore(path string, base journal.Store) (journal.Store, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return journalproc.New(base, func() *exec.Cmd {
		cmd := exec.Command("nice", "-n", "19", exe)
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		cmd.Stderr = os.Stderr
		return cmd
	}), nil
}
