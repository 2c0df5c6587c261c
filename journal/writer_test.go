package journal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// fakeStore is a Store that keeps written batches in memory. Its Write can
// be made to wait on a channel, or to fail.
type fakeStore struct {
	// block, if not nil, is received from before each Write records its
	// batch; a closed channel lets every Write through.
	block chan struct{}
	// discard, if set, makes Write keep nothing, for benchmarks.
	discard bool

	mu         sync.Mutex // guards the fields below
	batches    [][]string // the IDs of each batch written, and of each batch of changes as "upstream>state", in order
	at         []time.Time
	fails      int // the next fails Writes fail
	writes     int // Write calls, failed ones included
	stateFails int // the next stateFails WriteStates fail
}

var errFake = errors.New("fake: the database is down")

func (f *fakeStore) Write(ctx context.Context, recs []record.Request) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.fails > 0 {
		f.fails--
		return errFake
	}
	if f.discard {
		return nil
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	f.batches = append(f.batches, ids)
	f.at = append(f.at, time.Now())
	return nil
}

func (f *fakeStore) WriteStates(ctx context.Context, changes []record.StateChange) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stateFails > 0 {
		f.stateFails--
		return errFake
	}
	names := make([]string, len(changes))
	for i, c := range changes {
		names[i] = c.Upstream + ">" + c.To.String()
	}
	f.batches = append(f.batches, names)
	f.at = append(f.at, time.Now())
	return nil
}

func (f *fakeStore) States(context.Context, journal.StateQuery) ([]record.StateChange, error) {
	return nil, nil
}

// times returns when each batch was written.
func (f *fakeStore) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

// written returns every ID written, in order.
func (f *fakeStore) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, b := range f.batches {
		ids = append(ids, b...)
	}
	return ids
}

func (f *fakeStore) Get(context.Context, string) (record.Request, error) {
	return record.Request{}, journal.ErrNotFound
}
func (f *fakeStore) List(context.Context, journal.Query) (journal.Page, error) {
	return journal.Page{}, nil
}
func (f *fakeStore) Run(context.Context, string) ([]record.Request, error) {
	return nil, journal.ErrNotFound
}
func (f *fakeStore) Ended(context.Context, time.Time, string, int) ([]record.Request, error) {
	return nil, nil
}
func (f *fakeStore) Prune(context.Context, time.Time) (int64, error) { return 0, nil }
func (f *fakeStore) Close() error                                    { return nil }

var quiet = slog.New(slog.DiscardHandler)

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func addAll(t *testing.T, w *journal.Writer, ids []string) {
	t.Helper()
	for _, id := range ids {
		if !w.Add(request(id, "", t0, 200, 1)) {
			t.Fatalf("Add(%s): got false, want true", id)
		}
	}
}

func closeWriter(t *testing.T, w *journal.Writer) {
	t.Helper()
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// With the defaults, a quiet gateway's record reaches the store as soon
// as it is added, so that outlast requests lists a request as soon as its
// answer ends, even after the upstream's state changes just before it.
func TestWriterDefaultInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Logger: quiet})
		start := time.Now()
		for _, c := range []record.StateChange{change("up", t0, outlast.Probing, outlast.Recovering), change("up", t0, outlast.Recovering, outlast.Healthy)} {
			w.AddState(c)
			synctest.Wait()
		}
		addAll(t, w, []string{"a"})
		synctest.Wait()
		if got, at := f.written(), f.times(); fmt.Sprint(got) != "[up>recovering up>healthy a]" || at[len(at)-1] != start {
			t.Errorf("got %v written at %v, want a at once", got, at)
		}
		closeWriter(t, w)
	})
}

// spendBurst adds records one at a time, each written at once, until
// the writes that may go in a row are spent, and flushes the last: what
// is added next waits for the flush interval. It returns how many
// records the store holds then.
func spendBurst(t *testing.T, w *journal.Writer, f *fakeStore) int {
	t.Helper()
	for i := 0; ; i++ {
		id := "p" + strconv.Itoa(i)
		addAll(t, w, []string{id})
		synctest.Wait()
		if got := f.written(); len(got) == 0 || got[len(got)-1] != id {
			if err := w.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			return len(f.written())
		}
	}
}

// TestWriterFlushInterval checks that records are written as they come
// for 4 writes in a row, and then one write goes each FlushInterval, with
// the records that came meanwhile; after a quiet spell, they go at once
// again.
func TestWriterFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{FlushInterval: time.Second, Logger: quiet})
		start := time.Now()
		for _, id := range ids("p", 4) {
			addAll(t, w, []string{id})
			synctest.Wait()
		}
		if got, at := f.written(), f.times(); fmt.Sprint(got) != "[p0 p1 p2 p3]" || len(at) != 4 {
			t.Errorf("at once: got %v written in %d writes, want [p0 p1 p2 p3] in 4", got, len(at))
		}
		time.Sleep(500 * time.Millisecond)
		addAll(t, w, []string{"b"}) // one write is back at 1s
		time.Sleep(499 * time.Millisecond)
		addAll(t, w, []string{"c"}) // joins b's batch
		synctest.Wait()
		if got := f.written(); len(got) != 4 {
			t.Errorf("after 999ms: got %v written, want the first 4", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, at := f.written(), f.times(); fmt.Sprint(got[4:]) != "[b c]" || len(at) != 5 || at[4].Sub(start) != time.Second {
			t.Errorf("after 1s: got %v written at %v, want [b c] at 1s", got, at)
		}
		// After a quiet spell, a record is written at once again.
		time.Sleep(5 * time.Second)
		addAll(t, w, []string{"d"})
		synctest.Wait()
		if got, at := f.written(), f.times(); fmt.Sprint(got[6:]) != "[d]" || len(at) != 6 || at[5].Sub(start) != 6*time.Second {
			t.Errorf("after a quiet spell: got %v in writes at %v, want d at once, at 6s", got, at)
		}
		closeWriter(t, w)
	})
}

// TestWriterFullBatch checks that a full batch is written at once, without
// waiting for the interval.
func TestWriterFullBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 8, FlushInterval: time.Hour, Logger: quiet})
		// Once the burst is spent, records wait for the interval,
		// unless they make a batch.
		n := spendBurst(t, w, f)
		addAll(t, w, ids("r", 8))
		synctest.Wait()
		if got := f.written(); len(got) != n+8 {
			t.Errorf("got %d written at once, want %d", len(got)-n, 8)
		}
		closeWriter(t, w)
	})
}

// TestWriterDrops checks that when the store is stuck and the buffer is
// full, Add returns false at once and counts the drop; and that what was
// taken is written once the store moves.
func TestWriterDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{block: make(chan struct{})}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 4, FlushInterval: time.Millisecond, Logger: quiet})
		addAll(t, w, ids("r", 4))
		synctest.Wait() // the first batch is in the stuck Write
		start := time.Now()
		for i := range 3 {
			if w.Add(request(fmt.Sprintf("x%d", i), "", t0, 200, 1)) {
				t.Errorf("Add to a full writer: got true, want false")
			}
		}
		if time.Since(start) != 0 {
			t.Errorf("Add to a full writer took %v, want no time", time.Since(start))
		}
		if got := w.Dropped(); got != 3 {
			t.Errorf("Dropped: got %d, want 3", got)
		}
		close(f.block)
		closeWriter(t, w)
		if got := f.written(); fmt.Sprint(got) != "[r0 r1 r2 r3]" {
			t.Errorf("written: got %v, want [r0 r1 r2 r3]", got)
		}
	})
}

// TestWriterClose checks that Close writes what the Writer holds at once,
// and that Add refuses records afterwards.
func TestWriterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 1000, FlushInterval: time.Hour, Logger: quiet})
		want := ids("r", 600) // more than one batch
		addAll(t, w, want)
		start := time.Now()
		closeWriter(t, w)
		if got := f.written(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("written: got %d records, want %d", len(got), len(want))
		}
		if time.Since(start) != 0 {
			t.Errorf("Close waited %v, want no wait", time.Since(start))
		}
		if w.Add(request("late", "", t0, 200, 1)) {
			t.Errorf("Add after Close: got true, want false")
		}
		if got := w.Dropped(); got != 1 {
			t.Errorf("Dropped: got %d, want 1", got)
		}
		closeWriter(t, w) // a second Close is harmless
	})
}

// TestWriterCloseDeadline checks that Close gives up when its context
// ends before a stuck store does, and says what it lost.
func TestWriterCloseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{block: make(chan struct{})}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 10, FlushInterval: time.Millisecond, Logger: quiet})
		addAll(t, w, ids("r", 5))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := w.Close(ctx)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Close: got %v, want an error wrapping context.Canceled", err)
		}
		if got := w.Failed(); got != 5 {
			t.Errorf("Failed: got %d, want 5", got)
		}
	})
}

// TestWriterRetries checks that a failed write is tried again after the
// interval, that new records wait meanwhile, and that a batch failing
// three times is given up.
func TestWriterRetries(t *testing.T) {
	tests := []struct {
		name       string
		fails      int
		wantFailed uint64
		wantWrites int
		want       string
	}{
		// Two failures, then the database is back: nothing is lost.
		{"recovers", 2, 0, 4, "[a b]"},
		// Three failures: a is given up; b, which waited behind it, is not.
		{"gives up", 3, 1, 4, "[b]"},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeStore{fails: c.fails}
				w := journal.NewWriter(f, journal.WriterConfig{FlushInterval: time.Second, Logger: quiet})
				addAll(t, w, []string{"a"})
				time.Sleep(1500 * time.Millisecond) // a's first write has failed
				addAll(t, w, []string{"b"})
				time.Sleep(10 * time.Second)
				synctest.Wait()
				f.mu.Lock()
				writes := f.writes
				f.mu.Unlock()
				if got := f.written(); fmt.Sprint(got) != c.want || w.Failed() != c.wantFailed || writes != c.wantWrites {
					t.Errorf("got %v written, %d failed, %d writes; want %s, %d, %d", got, w.Failed(), writes, c.want, c.wantFailed, c.wantWrites)
				}
				closeWriter(t, w)
			})
		})
	}
}

// TestWriterInvalid checks that Add drops a record no store could keep,
// rather than let it fail a batch.
func TestWriterInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Logger: quiet})
		if w.Add(request("", "", t0, 200, 1)) {
			t.Errorf("Add without an ID: got true, want false")
		}
		if got := w.Dropped(); got != 1 {
			t.Errorf("Dropped: got %d, want 1", got)
		}
		closeWriter(t, w)
	})
}

// TestWriterConcurrentAdd checks, under -race, that Adds from several
// goroutines racing Close each end written or refused, never lost.
func TestWriterConcurrentAdd(t *testing.T) {
	t.Parallel()
	f := &fakeStore{}
	w := journal.NewWriter(f, journal.WriterConfig{Size: 64, FlushInterval: time.Millisecond, Logger: quiet})
	const adders, per = 4, 500
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for a := range adders {
		wg.Go(func() {
			n := 0
			for i := range per {
				if w.Add(request(fmt.Sprintf("a%d-%d", a, i), "", t0, 200, 1)) {
					n++
				}
			}
			mu.Lock()
			taken += n
			mu.Unlock()
		})
	}
	wg.Go(func() { closeWriter(t, w) })
	wg.Wait()
	if got := len(f.written()); got != taken {
		t.Errorf("written: got %d, want the %d taken", got, taken)
	}
	if got, want := w.Dropped()+uint64(taken), uint64(adders*per); got != want {
		t.Errorf("dropped+taken: got %d, want %d", got, want)
	}
}

// TestWriterSQLite checks that records reach a real store through a
// Writer.
func TestWriterSQLite(t *testing.T) {
	t.Parallel()
	s := open(t, sqliteBackend.fresh(t))
	w := journal.NewWriter(s, journal.WriterConfig{Logger: quiet})
	for _, id := range ids("r", 300) {
		w.Add(request(id, "w", t0, 200, 2))
	}
	closeWriter(t, w)
	recs, err := s.Run(context.Background(), "w")
	if err != nil || len(recs) != 300 {
		t.Fatalf("Run: got %d records, %v; want 300", len(recs), err)
	}
}

func BenchmarkWriterAdd(b *testing.B) {
	f := &fakeStore{discard: true}
	w := journal.NewWriter(f, journal.WriterConfig{Size: 1 << 16, Logger: quiet})
	rec := request("r", "", t0, 200, 2)
	b.ReportAllocs()
	for b.Loop() {
		w.Add(rec)
	}
	b.StopTimer()
	w.Close(context.Background())
	b.ReportMetric(float64(w.Dropped()), "dropped")
}

// TestWriterFlush checks that Flush writes what the Writer holds at once,
// a partial batch too, and returns once it is written.
func TestWriterFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 2 * journal.MaxBatch, FlushInterval: time.Hour, Logger: quiet})
		n := spendBurst(t, w, f)
		want := append(f.written(), ids("r", journal.MaxBatch+44)...) // a full batch and a partial one
		addAll(t, w, want[n:])
		start := time.Now()
		if err := w.Flush(context.Background()); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("Flush took %v, want no time", time.Since(start))
		}
		if got := f.written(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("written after Flush: got %d records, want %d", len(got), len(want))
		}
		// The interval starts afresh for what comes after.
		addAll(t, w, []string{"late"})
		time.Sleep(time.Hour - time.Nanosecond)
		synctest.Wait()
		if got := len(f.written()); got != len(want) {
			t.Errorf("before the interval: got %d written, want %d", got, len(want))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := len(f.written()); got != len(want)+1 {
			t.Errorf("after the interval: got %d written, want %d", got, len(want)+1)
		}
		closeWriter(t, w)
		if err := w.Flush(context.Background()); err == nil {
			t.Errorf("Flush after Close: got nil, want an error")
		}
	})
}

// TestWriterFlushFails checks that a Flush whose write fails says so, and
// that the records are kept and written by the next try.
func TestWriterFlushFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{FlushInterval: time.Second, Logger: quiet})
		// Once the burst is spent, records wait for the interval, or
		// for Flush.
		n := spendBurst(t, w, f)
		f.mu.Lock()
		f.fails = 1
		f.mu.Unlock()
		addAll(t, w, ids("r", 3))
		if err := w.Flush(context.Background()); !errors.Is(err, errFake) {
			t.Errorf("Flush: got %v, want %v", err, errFake)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := f.written()[n:]; fmt.Sprint(got) != "[r0 r1 r2]" {
			t.Errorf("written after the retry: got %v, want [r0 r1 r2]", got)
		}
		closeWriter(t, w)
	})
}

// TestWriterFlushContext checks that Flush returns when its context ends
// while the store is stuck, and that the records still reach the store.
func TestWriterFlushContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{block: make(chan struct{})}
		w := journal.NewWriter(f, journal.WriterConfig{FlushInterval: time.Hour, Logger: quiet})
		addAll(t, w, ids("r", 2))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := w.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Flush: got %v, want %v", err, context.DeadlineExceeded)
		}
		close(f.block)
		closeWriter(t, w)
		if got := f.written(); fmt.Sprint(got) != "[r0 r1]" {
			t.Errorf("written: got %v, want [r0 r1]", got)
		}
	})
}

// callStore is a fakeStore that runs a function during its next Write.
type callStore struct {
	*fakeStore
	during func()
}

func (c *callStore) Write(ctx context.Context, recs []record.Request) error {
	if f := c.during; f != nil {
		c.during = nil
		f()
	}
	return c.fakeStore.Write(ctx, recs)
}

// TestWriterFlushTakesMore checks that records Flush takes beyond those
// it was called for are written too, not stranded until the next Add:
// here more than a batch arrives while Flush writes.
func TestWriterFlushTakesMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &callStore{fakeStore: &fakeStore{fails: 1}}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 4 * journal.MaxBatch, FlushInterval: time.Hour, Logger: quiet})
		addAll(t, w, ids("a", journal.MaxBatch)) // a full batch, whose write fails
		synctest.Wait()
		addAll(t, w, ids("b", 1))
		more := journal.MaxBatch + 44                      // more than a batch
		f.during = func() { addAll(t, w, ids("c", more)) } // while Flush writes the a's
		if err := w.Flush(context.Background()); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if got, want := len(f.written()), journal.MaxBatch+1+more; got != want {
			t.Errorf("written after Flush: got %d, want %d (what Flush took, all of it)", got, want)
		}
		closeWriter(t, w)
	})
}

// TestWriterStates checks that state changes take the records' path: a
// change alone starts the flush interval, is written before the records
// of its batch, counts towards Size, and is dropped when it has no time
// or the writer is closed.
func TestWriterStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{}
		w := journal.NewWriter(f, journal.WriterConfig{Size: 4, FlushInterval: time.Second, Logger: quiet})
		if !w.AddState(change("up", t0, outlast.Healthy, outlast.Down)) {
			t.Fatal("AddState: got false, want true")
		}
		// A change alone is written as a record is, at once after a
		// quiet spell: an outage with no traffic is still written.
		synctest.Wait()
		if got := f.written(); fmt.Sprint(got) != "[up>down]" {
			t.Errorf("at once: got %v written, want [up>down]", got)
		}

		// Once the writes in a row are spent, a record and the changes
		// after it wait together: the changes go first, in their own
		// write.
		spendBurst(t, w, f)
		f.mu.Lock()
		before := len(f.batches)
		f.mu.Unlock()
		addAll(t, w, []string{"a"})
		w.AddState(change("up", t0.Add(time.Second), outlast.Down, outlast.Probing))
		w.AddState(change("up", t0.Add(2*time.Second), outlast.Probing, outlast.Recovering))
		// Size counts both: a, two changes and this record fill it.
		addAll(t, w, []string{"b"})
		if w.AddState(change("up", t0.Add(3*time.Second), outlast.Recovering, outlast.Healthy)) {
			t.Errorf("AddState to a full writer: got true, want false")
		}
		if err := w.Flush(context.Background()); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		f.mu.Lock()
		batches := fmt.Sprint(f.batches[before:])
		f.mu.Unlock()
		if want := "[[up>probing up>recovering] [a b]]"; batches != want {
			t.Errorf("batches: got %s, want %s", batches, want)
		}
		if w.AddState(record.StateChange{Upstream: "up", To: outlast.Down}) {
			t.Errorf("AddState with no time: got true, want false")
		}
		closeWriter(t, w)
		if w.AddState(change("up", t0, outlast.Healthy, outlast.Down)) {
			t.Errorf("AddState after Close: got true, want false")
		}
		if got := w.Dropped(); got != 3 {
			t.Errorf("Dropped: got %d, want 3 (full, no time, closed)", got)
		}
	})
}

// TestWriterStatesGiveUp checks that changes the store refuses three
// times are given up alone: the records of their batch get tries of
// their own, and are written.
func TestWriterStatesGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{stateFails: 3}
		w := journal.NewWriter(f, journal.WriterConfig{FlushInterval: time.Hour, Logger: quiet})
		// Once the burst is spent, what follows waits for the interval,
		// or for Flush.
		n := spendBurst(t, w, f)
		w.AddState(change("up", t0, outlast.Healthy, outlast.Down))
		addAll(t, w, ids("r", 2))
		for i := range 2 {
			if err := w.Flush(context.Background()); !errors.Is(err, errFake) {
				t.Errorf("Flush %d: got %v, want %v", i+1, err, errFake)
			}
		}
		if got := f.written()[n:]; len(got) != 0 {
			t.Errorf("after two failed tries: got %v written, want nothing", got)
		}
		// The third try gives the change up and writes the records.
		if err := w.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "1 records lost") {
			t.Errorf("Flush 3: got %v, want one lost", err)
		}
		if got := f.written()[n:]; fmt.Sprint(got) != "[r0 r1]" || w.Failed() != 1 {
			t.Errorf("got %v written, %d failed; want [r0 r1], 1", got, w.Failed())
		}
		closeWriter(t, w)
	})
}
