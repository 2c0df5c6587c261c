// Package journalproc writes a journal from another process: a Store whose
// writes, of records and of upstreams' state changes, go batch by batch
// through a pipe to a child process that runs Serve on its standard input
// and output.
//
// SQLite runs inside the process that writes it, so its writes take CPU
// from the gateway's requests; Go's scheduler cannot put the requests
// first, but the operating system can, if the writes run in a process of
// lower priority. outlast serve writes a SQLite journal this way (Start,
// with RunIfChild first in main); the load benchmark measures it.
package journalproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// A message is one write through the pipe, in the encoding wire.go
// describes: a batch of records for Store.Write, or of state changes for
// Store.WriteStates.
type message struct {
	Requests []record.Request
	States   []record.StateChange
}

// write writes m to s: its changes, if it has any, else its records (none
// for the parent's first write, which checks that the child runs).
func (m *message) write(ctx context.Context, s journal.Store) error {
	if len(m.States) > 0 {
		return s.WriteStates(ctx, m.States)
	}
	return s.Write(ctx, m.Requests)
}

// Serve reads batches of records and of state changes from r, writes each
// to s, and answers each on w with a line: "ok", or the write's error. It
// returns nil when r ends, or the error that ended it.
func Serve(r io.Reader, w io.Writer, s journal.Store) error {
	in := bufio.NewReaderSize(r, 64<<10)
	out := bufio.NewWriter(w)
	var buf []byte
	for {
		var m message
		var err error
		if buf, err = readMessage(in, buf, &m); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("journalproc: reading a batch: %w", err)
		}
		if err := m.write(context.Background(), s); err != nil {
			fmt.Fprintf(out, "error: %v\n", oneLine(err))
		} else {
			out.WriteString("ok\n")
		}
		if err := out.Flush(); err != nil {
			return fmt.Errorf("journalproc: answering: %w", err)
		}
	}
}

// oneLine keeps an error's message to one line of the protocol.
func oneLine(err error) string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(err.Error())
}

// A Store writes through a child process and reads from the Store it
// wraps, which must open the same database. A child that dies fails the
// write under way, and the next write starts a new one. It is safe for
// concurrent use; writes go one batch at a time.
type Store struct {
	journal.Store // for reads, and closed by Close

	newCmd func() *exec.Cmd

	// inline, set by Inline, sends writes to the wrapped Store. writing
	// is the child's process while a write waits for it, for Inline to
	// kill.
	inline  atomic.Bool
	writing atomic.Pointer[os.Process]

	mu     sync.Mutex // guards the fields below, and the pipe
	child  *child
	closed bool
}

// child is one running child process and its pipe.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	buf []byte // the last batch's frame, kept for its room
	out *bufio.Reader
}

// New returns a Store that writes through the child processes newCmd
// makes, each of which must run Serve on its standard input and output
// against the database base reads. The first starts with the first write.
func New(base journal.Store, newCmd func() *exec.Cmd) *Store {
	return &Store{Store: base, newCmd: newCmd}
}

// Write sends recs to the child and returns when it has written them. If
// ctx ends first, the child is killed and the write fails.
func (s *Store) Write(ctx context.Context, recs []record.Request) error {
	return s.send(ctx, &message{Requests: recs})
}

// WriteStates sends changes to the child, as Write sends records.
func (s *Store) WriteStates(ctx context.Context, changes []record.StateChange) error {
	if len(changes) == 0 {
		return nil // nothing to write: not worth starting a child
	}
	return s.send(ctx, &message{States: changes})
}

// send sends m to the child and returns when it has written it.
func (s *Store) send(ctx context.Context, m *message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("journalproc: write after Close")
	case ctx.Err() != nil:
		// Not worth a child started only to be killed.
		return fmt.Errorf("journalproc: %w", context.Cause(ctx))
	}
	if s.inline.Load() {
		s.kill()
		return m.write(ctx, s.Store)
	}
	if s.child == nil {
		c, err := s.start()
		if err != nil {
			return err
		}
		s.child = c
	}
	c := s.child
	// A write that outlives ctx kills the child, which ends the wait for
	// its answer; so does Inline.
	stop := context.AfterFunc(ctx, func() { c.cmd.Process.Kill() })
	s.writing.Store(c.cmd.Process)
	err := errInlined
	if !s.inline.Load() { // else Inline came before writing was set
		err = c.write(m)
	}
	s.writing.Store(nil)
	killed := !stop()
	if err != nil && s.inline.Load() && ctx.Err() == nil {
		// Inline cut the write short, or came just after it failed: it is
		// written here. The child may have written it too: a record
		// written twice is one (the journal upserts), a state change two
		// rows, which its readers allow.
		s.kill()
		return m.write(ctx, s.Store)
	}
	var refused refusedError
	if killed || err != nil && !errors.As(err, &refused) {
		// The pipe is broken or out of step, or ctx's kill came after the
		// answer: start afresh next time.
		c.cmd.Process.Kill()
		c.cmd.Wait()
		s.child = nil
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
	}
	return err
}

// errInlined is a write that Inline kept from the child, to be made in
// this process, unless its context has ended.
var errInlined = errors.New("journalproc: the write was left to this process by Inline")

// Inline makes this and every later write in this process, through the
// Store s wraps, at this process's priority, rather than in the child at
// the lowest: a write the child has under way is cut short and made again
// here. A server calls it once its requests are done, before the final
// flush, which a busy machine would otherwise hold up for as long as it
// keeps the child from a core.
func (s *Store) Inline() {
	s.inline.Store(true)
	if p := s.writing.Load(); p != nil {
		p.Kill()
	}
}

// kill ends the child, if one runs, without waiting for it to finish: it
// is between writes, or cut short in one. s.mu must be held.
func (s *Store) kill() {
	if s.child != nil {
		s.child.cmd.Process.Kill()
		s.child.cmd.Wait()
		s.child = nil
	}
}

func (s *Store) start() (*child, error) {
	cmd := s.newCmd()
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("journalproc: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("journalproc: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("journalproc: starting the writer: %w", err)
	}
	return &child{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// refusedError is a write the child's store refused; the child is fine.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return "journalproc: the writer's store: " + e.msg }

func (c *child) write(m *message) error {
	c.buf = appendMessage(c.buf[:0], m)
	if n := len(c.buf); n > maxFrame {
		// The child would refuse it, out of step: it is refused here,
		// the child untouched.
		c.buf = nil
		return refusedError{fmt.Sprintf("a batch of %d bytes, over the pipe's bound of %d", n, maxFrame)}
	}
	_, err := c.in.Write(c.buf)
	if cap(c.buf) > 1<<20 {
		c.buf = nil // an outsized batch's room is not kept
	}
	if err != nil {
		return fmt.Errorf("journalproc: sending a batch: %w", err)
	}
	line, err := c.out.ReadString('\n')
	switch {
	case err != nil:
		return fmt.Errorf("journalproc: the writer did not answer: %w", err)
	case line == "ok\n":
		return nil
	}
	if msg, ok := strings.CutPrefix(line, "error: "); ok {
		return refusedError{strings.TrimSuffix(msg, "\n")}
	}
	return fmt.Errorf("journalproc: the writer answered %q", line)
}

// stopWait bounds how long stop waits for the child to finish its batch
// and exit before it kills it.
const stopWait = 10 * time.Second

// stop ends the child: it closes its input, which ends Serve, and waits,
// for up to stopWait.
func (c *child) stop() error {
	err := c.in.Close()
	t := time.AfterFunc(stopWait, func() { c.cmd.Process.Kill() })
	defer t.Stop()
	if werr := c.cmd.Wait(); werr != nil && err == nil {
		err = werr
	}
	return err
}

// Close stops the child, if one runs, and closes the wrapped Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	switch {
	case s.inline.Load():
		s.kill() // not worth waiting for: it holds no write
	case s.child != nil:
		err = s.child.stop()
		s.child = nil
	}
	return errors.Join(err, s.Store.Close())
}
