package journalproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// testDBEnv makes the test binary a writer: it runs Serve against the
// SQLite database the variable names. childHang makes it read and never
// answer.
const (
	testDBEnv = "OUTLAST_TEST_JOURNALPROC_DB"
	childHang = "OUTLAST_TEST_JOURNALPROC_HANG"
)

// childPriority makes the test binary lower its priority, as the writer
// does, and print each of its threads' nice value and policy, where
// /proc has them (TestLowerPriority, on Linux).
const childPriority = "OUTLAST_TEST_JOURNALPROC_PRIORITY"

func printPriority() {
	lowerPriority()
	tasks, _ := filepath.Glob("/proc/self/task/*/stat")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		// After "pid (comm) ", field 3 on: nice is field 19, policy 41.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		fmt.Printf("nice %s policy %s\n", f[19-3], f[41-3])
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(childPriority) != "" {
		printPriority()
		os.Exit(0)
	}
	if path := os.Getenv(testDBEnv); path != "" {
		if os.Getenv(childHang) != "" {
			select {}
		}
		s, err := journal.Open(context.Background(), "sqlite:"+path)
		if err == nil {
			err = Serve(os.Stdin, os.Stdout, s)
			s.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func newStore(t *testing.T, env ...string) (*Store, *int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.db")
	base, err := journal.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	starts := new(int)
	s := New(base, func() *exec.Cmd {
		*starts++
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(append(os.Environ(), testDBEnv+"="+path), env...)
		cmd.Stderr = os.Stderr
		return cmd
	})
	return s, starts
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func batch(prefix string, n int) []record.Request {
	recs := make([]record.Request, n)
	for i := range recs {
		recs[i] = record.Request{ID: fmt.Sprintf("%s%d", prefix, i), Start: t0,
			Attempts: []record.Attempt{{N: 1, Start: t0, Status: 200}}}
	}
	return recs
}

// TestWritesReachTheDatabase checks that batches written through the
// child can be read back, and that Close stops it.
func TestWritesReachTheDatabase(t *testing.T) {
	s, starts := newStore(t)
	for i := range 3 {
		if err := s.Write(context.Background(), batch(fmt.Sprint("b", i, "-"), 50)); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
	}
	got, err := s.Get(context.Background(), "b2-49")
	if err != nil || len(got.Attempts) != 1 || got.Attempts[0].Status != 200 {
		t.Errorf("Get: got %+v, %v; want the record with its attempt", got, err)
	}
	if *starts != 1 {
		t.Errorf("started %d writers, want 1", *starts)
	}
	c := s.child
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !c.cmd.ProcessState.Success() {
		t.Errorf("the writer did not exit cleanly: %v", c.cmd.ProcessState)
	}
}

// TestRefusedBatch checks that a batch the child's store refuses fails
// the write with its reason, and keeps the child.
func TestRefusedBatch(t *testing.T) {
	s, starts := newStore(t)
	defer s.Close()
	bad := []record.Request{{ID: "no-start"}}
	err := s.Write(context.Background(), bad)
	if !errors.As(err, new(refusedError)) {
		t.Fatalf("Write of a record with no start: got %v, want the store's refusal", err)
	}
	if err := s.Write(context.Background(), batch("ok", 1)); err != nil || *starts != 1 {
		t.Errorf("next Write: got %v with %d writers started; want nil with 1", err, *starts)
	}
}

// TestDeadChildRestarts checks that a child that died fails the write
// under way and that the next write starts a new one.
func TestDeadChildRestarts(t *testing.T) {
	s, starts := newStore(t)
	defer s.Close()
	if err := s.Write(context.Background(), batch("a", 1)); err != nil {
		t.Fatal(err)
	}
	s.child.cmd.Process.Kill()
	s.child.cmd.Process.Wait()
	if err := s.Write(context.Background(), batch("b", 1)); err == nil {
		t.Errorf("Write to a dead writer: got nil, want an error")
	}
	if err := s.Write(context.Background(), batch("c", 1)); err != nil {
		t.Errorf("Write after: %v", err)
	}
	if *starts != 2 {
		t.Errorf("started %d writers, want 2", *starts)
	}
	if _, err := s.Get(context.Background(), "c0"); err != nil {
		t.Errorf("Get c0: %v", err)
	}
}

// TestHungChildTimesOut checks that a write to a child that never answers
// ends with its context, killing the child.
func TestHungChildTimesOut(t *testing.T) {
	s, _ := newStore(t, childHang+"=1")
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.Write(ctx, batch("h", 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Write to a hung writer: got %v, want %v", err, context.DeadlineExceeded)
	}
	if s.child != nil {
		t.Errorf("the hung writer is kept, want it gone")
	}
}

// TestInlineCutsAStuckWrite checks that Inline ends a write the child
// does not finish, as a busy machine keeps a writer at the lowest
// priority from a core, and makes it, and later ones, in this process,
// with no child started again; and that Close does not wait for the
// child.
func TestInlineCutsAStuckWrite(t *testing.T) {
	s, starts := newStore(t, childHang+"=1")
	done := make(chan error, 1)
	go func() { done <- s.Write(context.Background(), batch("stuck", 2)) }()
	for s.writing.Load() == nil { // the child has the batch
		select {
		case err := <-done:
			t.Fatalf("Write to a hung writer returned %v before Inline", err)
		case <-time.After(time.Millisecond):
		}
	}
	s.Inline()
	if err := <-done; err != nil {
		t.Fatalf("the write Inline cut short: %v, want it written here", err)
	}
	if err := s.Write(context.Background(), batch("after", 1)); err != nil {
		t.Fatalf("Write after Inline: %v", err)
	}
	if err := s.WriteStates(context.Background(), []record.StateChange{{Upstream: "u", At: t0, To: outlast.Down}}); err != nil {
		t.Fatalf("WriteStates after Inline: %v", err)
	}
	for _, id := range []string{"stuck1", "after0"} {
		if _, err := s.Get(context.Background(), id); err != nil {
			t.Errorf("Get %s: %v", id, err)
		}
	}
	if *starts != 1 || s.child != nil {
		t.Errorf("%d writers started, child %v; want 1, and none left", *starts, s.child)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStatesAndAdmissionCross checks that what admission adds to the
// record crosses the pipe: an attempt's wait for its upstream and its
// probe mark, and upstreams' state changes, which the child writes and
// refuses as its store does.
func TestStatesAndAdmissionCross(t *testing.T) {
	s, starts := newStore(t)
	defer s.Close()
	recs := batch("p", 1)
	recs[0].Attempts[0].AdmissionWait, recs[0].Attempts[0].Probe = 1500*time.Millisecond, true
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := s.Get(context.Background(), "p0")
	if err != nil || len(got.Attempts) != 1 || got.Attempts[0].AdmissionWait != 1500*time.Millisecond || !got.Attempts[0].Probe {
		t.Errorf("Get: got %+v, %v; want the probe, with its 1.5s wait", got.Attempts, err)
	}

	changes := []record.StateChange{
		{Upstream: "up", At: t0, From: outlast.Healthy, To: outlast.Down},
		{Upstream: "up", At: t0.Add(time.Second), From: outlast.Down, To: outlast.Probing},
	}
	if err := s.WriteStates(context.Background(), changes); err != nil {
		t.Fatalf("WriteStates: %v", err)
	}
	if got, err := s.States(context.Background(), journal.StateQuery{}); err != nil || !reflect.DeepEqual(got, changes) {
		t.Errorf("States: got %v, %v; want %v", got, err, changes)
	}
	err = s.WriteStates(context.Background(), []record.StateChange{{Upstream: "up", To: outlast.Down}})
	if !errors.As(err, new(refusedError)) {
		t.Errorf("WriteStates of a change with no time: got %v, want the store's refusal", err)
	}
	if *starts != 1 {
		t.Errorf("started %d writers, want 1", *starts)
	}
}
