package main

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/outlast-llm/outlast/journal"
)

// childEnv names the SQLite database a child writer writes; main runs
// childMain instead of the benchmark when it is set.
const childEnv = "OUTLAST_LOAD_JOURNAL_CHILD"

// childMain is the child writer, for --journal-child: it reads batches
// of records (gob) from stdin, writes each to the SQLite database that
// childEnv names, and answers each with a line, "ok" or the error.
func childMain() error {
	store, err := journal.Open(context.Background(), "sqlite:"+os.Getenv(childEnv))
	if err != nil {
		return err
	}
	defer store.Close()
	dec := gob.NewDecoder(bufio.NewReader(os.Stdin))
	out := bufio.NewWriter(os.Stdout)
	for {
		var recs []journal.Record
		if err := dec.Decode(&recs); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := store.Write(context.Background(), recs); err != nil {
			fmt.Fprintln(out, "error:", err)
		} else {
			fmt.Fprintln(out, "ok")
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// childStore is a journal.Store whose writes go to a child writer process
// at nice 19, so that the OS, rather than Go's scheduler, puts the
// requests first. Reads go to base, the same database opened here.
type childStore struct {
	journal.Store // base, for reads and Close

	mu  sync.Mutex // one batch at a time on the pipe
	enc *gob.Encoder
	buf *bufio.Writer
	in  io.WriteCloser
	out *bufio.Reader
	cmd *exec.Cmd
}

func newChildStore(path string, base journal.Store) (*childStore, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nice", "-n", "19", exe)
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the child writer: %w", err)
	}
	c := &childStore{Store: base, buf: bufio.NewWriterSize(in, 64<<10), in: in, out: bufio.NewReader(out), cmd: cmd}
	c.enc = gob.NewEncoder(c.buf)
	return c, nil
}

func (c *childStore) Write(ctx context.Context, recs []journal.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(recs); err != nil {
		return err
	}
	if err := c.buf.Flush(); err != nil {
		return err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("child writer: %w", err)
	}
	if line != "ok\n" {
		return fmt.Errorf("child writer: %s", line)
	}
	return nil
}

func (c *childStore) Close() error {
	err := c.in.Close()
	err = errors.Join(err, c.cmd.Wait(), c.Store.Close())
	return err
}
