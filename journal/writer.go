package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// Defaults for the zero values of WriterConfig.
const (
	DefaultWriterSize    = 4096
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultWriteTimeout  = 30 * time.Second
)

const (
	// maxBatch bounds a batch: a batch this large is written at once,
	// without waiting for the flush interval. A batch costs the requests
	// around it about the same whatever its size (a transaction; with
	// serve's writer process, that process woken and answering on its
	// pipe), so a busy gateway writes few large ones: at 256 records,
	// the journal's sequential p99 over a bare proxy's was 1.11 to 1.47;
	// at 1,024, 1.07 to 1.12 (bench/load, six interleaved pairs; at 32,
	// worse).
	maxBatch = 1024
	// maxTries is how many writes a batch gets before it is given up.
	// Writes are retried because a database restart or failover should
	// not cost records, and bounded because a batch the database keeps
	// refusing would otherwise hold the buffer forever.
	maxTries = 3
)

// WriterConfig configures a [Writer].
type WriterConfig struct {
	// Size bounds the records the Writer holds and has not written yet,
	// state changes included, and so what a crash can lose. When it holds
	// that many, Add and AddState drop them. Zero means DefaultWriterSize
	// (4096).
	Size int

	// FlushInterval spaces the writes of a busy gateway: records are
	// written as they come while the writes allow, up to 4 in a row, and
	// beyond that one write goes every FlushInterval, with the records
	// that came meanwhile (or sooner, when they make a batch of 1,024).
	// It bounds how long a record waits, and so what a crash can lose. It
	// is also the wait before a failed write is tried again. Zero means
	// DefaultFlushInterval (100 ms): a quiet gateway's request is in the
	// journal as soon as its answer ends, and a busy one writes one batch
	// for many requests.
	FlushInterval time.Duration

	// WriteTimeout bounds one write of a batch. Zero means
	// DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration

	// Logger receives a warn line per failed write and an error line per
	// batch given up. If nil, slog.Default() is used.
	Logger *slog.Logger
}

// A Writer writes records to a Store in batches, from a goroutine of its
// own, so that keeping the record never slows a request. Add never blocks,
// and nor does AddState, which takes upstreams' state changes the same way:
// each batch's state changes are written, by Store.WriteStates, just
// before its requests.
//
// Each batch is written in one transaction: a request and all its
// attempts reach the store together or not at all. A write that fails is
// tried again after FlushInterval (or at once by Flush), while new records
// wait in the buffer; a batch that fails three times is given up and
// counted by Failed. A batch's state changes are a batch of their own in
// this: if their write fails three times they are given up, and its
// requests are tried afresh.
//
// What a crash loses is what the Writer holds: at most Size records, and
// at most those added in the last FlushInterval (plus the write under
// way), while the store keeps up.
//
// A Writer is made by NewWriter, which starts its goroutine; the zero
// Writer is not usable. It is safe for concurrent use. Close it to write
// what it holds and stop the goroutine.
type Writer struct {
	store    Store
	size     int
	max      int // a batch's most records
	interval time.Duration
	timeout  time.Duration
	logger   *slog.Logger

	// mu guards pending, states, inflight and closed. Add and AddState
	// hold it to append, and the goroutine to swap pending and states for
	// empty slices: Adds never wait for a write.
	mu       sync.Mutex
	pending  []record.Request     // added, not yet taken by the goroutine
	states   []record.StateChange // added by AddState, not yet taken
	inflight int                  // requests and changes taken by the goroutine, not yet written or given up
	closed   bool

	// kick wakes the goroutine when pending or states gets its first
	// entry, to start the flush interval, and when pending holds a full
	// batch.
	kick    chan struct{}
	flushes chan chan error // Flush's requests to the goroutine
	dropped atomic.Uint64
	failed  atomic.Uint64

	stopOnce sync.Once
	stop     chan struct{}      // closed by the first Close
	done     chan struct{}      // closed when the goroutine has returned
	cancel   context.CancelFunc // ends the goroutine's writes when Close gives up waiting
	err      error              // what the final flush lost; written before done is closed
}

// NewWriter returns a Writer that writes to s, and starts its goroutine.
func NewWriter(s Store, cfg WriterConfig) *Writer {
	w := &Writer{
		store:    s,
		size:     cfg.Size,
		interval: cfg.FlushInterval,
		timeout:  cfg.WriteTimeout,
		logger:   cfg.Logger,
		kick:     make(chan struct{}, 1),
		flushes:  make(chan chan error),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if w.size <= 0 {
		w.size = DefaultWriterSize
	}
	w.max = min(w.size, maxBatch)
	if w.interval <= 0 {
		w.interval = DefaultFlushInterval
	}
	if w.timeout <= 0 {
		w.timeout = DefaultWriteTimeout
	}
	if w.logger == nil {
		w.logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	b := &batcher{w: w, timer: time.NewTimer(w.interval), writes: writeBurst, counted: time.Now()}
	b.timer.Stop()
	go b.run(ctx)
	return w
}

// Add queues rec to be written and reports whether it was taken. It never
// blocks: it returns false, and counts the record as dropped, when the
// Writer holds Size records already, when rec cannot be stored (no ID, no
// start, or two attempts with one N), or after Close.
//
// The Writer keeps rec's Header and Attempts as they are: the caller must
// not change them after Add.
func (w *Writer) Add(rec record.Request) bool {
	return w.take(validate(&rec), func() bool {
		w.pending = append(w.pending, rec)
		n := len(w.pending)
		return n == 1 || n == w.max
	})
}

// AddState queues c, an upstream's state change, to be written with the
// next batch, and reports whether it was taken. It never blocks, and drops
// and counts c as Add drops a record: when the Writer holds Size records
// and changes already, when c has no time, or after Close.
func (w *Writer) AddState(c record.StateChange) bool {
	return w.take(validateState(&c), func() bool {
		w.states = append(w.states, c)
		return len(w.states) == 1
	})
}

// take is Add's and AddState's bookkeeping: unless invalid is not nil,
// the Writer is closed or it is full, it calls push with w.mu held, and
// wakes the batcher if push says to; otherwise it counts a drop.
func (w *Writer) take(invalid error, push func() (wake bool)) bool {
	if invalid != nil {
		w.dropped.Add(1)
		return false
	}
	w.mu.Lock()
	if w.closed || w.held() >= w.size {
		w.mu.Unlock()
		w.dropped.Add(1)
		return false
	}
	wake := push()
	w.mu.Unlock()
	if wake {
		w.wake()
	}
	return true
}

// held counts the requests and changes the Writer holds. w.mu must be
// held.
func (w *Writer) held() int { return len(w.pending) + len(w.states) + w.inflight }

// wake kicks the goroutine, without waiting.
func (w *Writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default: // a kick is already waiting; the goroutine reads the lengths itself
	}
}

// Flush writes the records the Writer holds, without waiting for the
// flush interval, and returns when they are written. It returns an error
// if a write fails (the records are kept and tried again, as any batch's
// are), if ctx ends first, or after Close. A batch that has failed is
// tried at once, and the try counts towards the three it gets. Records
// added while Flush runs may wait for their own batch.
func (w *Writer) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case w.flushes <- done:
	case <-w.done:
		return errors.New("journal: flush: the writer is closed")
	case <-ctx.Done():
		return fmt.Errorf("journal: flush: %w", context.Cause(ctx))
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("journal: flush: %w", context.Cause(ctx))
	}
}

// Dropped returns how many records Add, and state changes AddState, have
// refused.
func (w *Writer) Dropped() uint64 { return w.dropped.Load() }

// Failed returns how many records and state changes were taken but given
// up because the store refused them three times, or because Close's
// context ended first.
func (w *Writer) Failed() uint64 { return w.failed.Load() }

// Close stops taking records, writes those it holds, and stops the
// goroutine. If ctx ends first, the write under way is canceled, the
// records not yet written are given up, and Close returns once the
// goroutine has. It returns an error counting the records the final
// flush lost, if any. It does not close the Store.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stop) })
	select {
	case <-w.done:
	case <-ctx.Done():
		w.cancel()
		<-w.done
	}
	return w.err
}

// pendingLen counts the requests and changes added and not yet taken.
func (w *Writer) pendingLen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) + len(w.states)
}

// batcher is the Writer's goroutine and what it alone touches.
type batcher struct {
	w *Writer
	// buf holds the records taken from pending; buf[off:] are not yet
	// written, and the first max of them are the batch being tried.
	buf []record.Request
	off int
	// states holds the changes taken from Writer.states, all not yet
	// written: they go before the next batch of buf, all at once, being
	// few.
	states []record.StateChange
	tries  int         // failed writes of the batch, or of states, so far
	timer  *time.Timer // runs while records wait for the flush interval
	armed  bool
	// writes is the writes that may go at once, up to writeBurst, and
	// counted is when it was last brought up to date: one comes back
	// each FlushInterval.
	writes  float64
	counted time.Time
}

// writeBurst is how many writes may go in a row, as records come, before
// they are spaced FlushInterval apart: a request's record and the
// upstream's state changes just before it are written at once.
const writeBurst = 4

// due returns how long the next write must wait for the writes that may
// go: none while one is left.
func (b *batcher) due() time.Duration {
	now := time.Now()
	b.writes = min(writeBurst, b.writes+float64(now.Sub(b.counted))/float64(b.w.interval))
	b.counted = now
	if b.writes >= 1 {
		return 0
	}
	return time.Duration((1 - b.writes) * float64(b.w.interval))
}

// schedule writes what is pending at once if the writes allow, else arms
// the timer for when they do.
func (b *batcher) schedule(ctx context.Context) {
	if d := b.due(); d > 0 {
		b.timer.Reset(d)
		b.armed = true
		return
	}
	b.flush(ctx)
}

func (b *batcher) run(ctx context.Context) {
	defer close(b.w.done)
	defer b.w.cancel()
	for {
		select {
		case <-b.w.kick:
			switch {
			case b.tries > 0:
				// A failed batch waits for the timer, and the new
				// records with it.
			case b.w.pendingLen() >= b.w.max:
				b.flush(ctx)
			case !b.armed:
				b.schedule(ctx)
			}
		case <-b.timer.C:
			b.armed = false
			b.flush(ctx)
		case done := <-b.w.flushes:
			done <- b.flushAll(ctx)
		case <-b.w.stop:
			b.timer.Stop()
			b.w.err = b.drain(ctx)
			return
		}
	}
}

func (b *batcher) arm() {
	b.timer.Reset(b.w.interval)
	b.armed = true
}

// flush writes what was taken and what is pending, a batch at a time,
// until a write fails or less than a batch is pending.
func (b *batcher) flush(ctx context.Context) {
	b.timer.Stop()
	b.armed = false
	for {
		if !b.holds() && !b.take() {
			return
		}
		if _, err := b.writeNext(ctx); err != nil {
			return
		}
		if !b.holds() {
			// Records that came during the writes go when the writes
			// allow, unless they are a batch already.
			if p := b.w.pendingLen(); p < b.w.max {
				if p > 0 {
					b.schedule(ctx)
				}
				return
			}
		}
	}
}

// holds reports whether the batcher holds records or changes it has
// taken and not written.
func (b *batcher) holds() bool { return b.off < len(b.buf) || len(b.states) > 0 }

// next is the size of the next batch of records.
func (b *batcher) next() int { return min(len(b.buf)-b.off, b.w.max) }

// writeNext writes the next batch of what was taken, after the changes
// taken, and returns how many records and changes it is done with:
// written, or given up after maxTries. If the write fails sooner, it arms
// the timer to try again and returns the error.
func (b *batcher) writeNext(ctx context.Context) (int, error) {
	s, n := len(b.states), b.next()
	b.due()
	b.writes = max(b.writes-1, 0) // a full batch or Flush may write past it, and owes nothing
	err := b.write(ctx, n)
	if err == nil {
		b.release(n)
		return s + n, nil
	}
	if b.tries++; b.tries >= maxTries {
		return b.giveUp(n, err), nil
	}
	b.w.logger.Warn("journal: write failed; will try again",
		"records", n, "state_changes", len(b.states), "try", b.tries, "retry_in", b.w.interval, "err", err)
	b.arm()
	return s - len(b.states), err
}

// flushAll writes the records held when it is called, for Flush: those
// taken and those pending, however few.
func (b *batcher) flushAll(ctx context.Context) error {
	b.timer.Stop()
	b.armed = false
	left := len(b.buf) - b.off + len(b.states) + b.w.pendingLen()
	failed := b.w.failed.Load()
	// Everything taken is written, even records taken after left was
	// counted: nothing else would write them before the next Add.
	for b.holds() || left > 0 && b.take() {
		n, err := b.writeNext(ctx)
		if err != nil {
			return fmt.Errorf("journal: flush: %w", err)
		}
		left -= n
	}
	if b.w.pendingLen() > 0 {
		b.arm()
	}
	if lost := b.w.failed.Load() - failed; lost > 0 {
		return fmt.Errorf("journal: flush: %d records lost: the store refused them %d times", lost, maxTries)
	}
	return nil
}

// take swaps pending and states for the written buffers, once the
// batcher holds nothing, and reports whether it got anything.
func (b *batcher) take() bool {
	clear(b.buf) // let the written records' maps and slices go
	w := b.w
	w.mu.Lock()
	b.buf, w.pending = w.pending, b.buf[:0]
	b.states, w.states = w.states, b.states[:0]
	w.inflight = len(b.buf) + len(b.states)
	w.mu.Unlock()
	b.off = 0
	return b.holds()
}

// write writes the changes held, if any, and then the batch of the next n
// records. Changes written are released at once: a failure of the records
// does not write them again.
func (b *batcher) write(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, b.w.timeout)
	defer cancel()
	if len(b.states) > 0 {
		if err := b.w.store.WriteStates(ctx, b.states); err != nil {
			return err
		}
		b.releaseStates()
	}
	if n == 0 {
		return nil
	}
	return b.w.store.Write(ctx, b.buf[b.off:b.off+n])
}

// release forgets the batch of n records, written or given up.
func (b *batcher) release(n int) {
	b.off += n
	b.tries = 0
	b.w.mu.Lock()
	b.w.inflight -= n
	b.w.mu.Unlock()
}

// releaseStates forgets the changes held, written or given up.
func (b *batcher) releaseStates() {
	n := len(b.states)
	clear(b.states)
	b.states = b.states[:0]
	b.tries = 0
	b.w.mu.Lock()
	b.w.inflight -= n
	b.w.mu.Unlock()
}

// giveUp gives up what the failed write failed on, and returns how many:
// the changes held, if they failed, or else the next batch of n records.
func (b *batcher) giveUp(n int, err error) int {
	s := len(b.states)
	if s > 0 {
		// The records were not tried: they keep their place, and get
		// tries of their own.
		b.w.failed.Add(uint64(s))
		b.w.logger.Error("journal: state changes lost: the store refused them",
			"state_changes", s, "tries", b.tries, "err", err)
		b.releaseStates()
		return s
	}
	b.w.failed.Add(uint64(n))
	b.w.logger.Error("journal: records lost: the store refused them",
		"records", n, "tries", b.tries, "err", err)
	b.release(n)
	return n
}

// drain writes everything left, each batch once, and reports what it
// lost. Close has stopped Add, so pending only empties.
func (b *batcher) drain(ctx context.Context) error {
	var lost int
	var last error
	for b.holds() || b.take() {
		n := b.next()
		if err := b.write(ctx, n); err != nil {
			lost += b.giveUp(n, err)
			last = err
			continue
		}
		b.release(n)
	}
	if lost > 0 {
		return fmt.Errorf("journal: writer: %d records not written: %w", lost, last)
	}
	return nil
}
