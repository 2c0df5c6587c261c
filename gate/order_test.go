package gate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast/gate"
)

func TestWaitersServedInOrderOneAtATime(t *testing.T) {
	t.Parallel()
	const n = 100
	tests := []struct {
		name     string
		capacity int
	}{
		// One request per slot, as for llama.cpp --parallel 1.
		{"capacity 1", 1},
		// Several slots: each release must still wake exactly one waiter,
		// the oldest.
		{"capacity 3", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				o := newOrderRun(t, gate.New(tt.capacity, n), n)
				for i := range n {
					o.startWaiter(i)
					// Let waiter i block in the queue before i+1 starts, so
					// that arrival order is i's order.
					synctest.Wait()
				}
				for want := range n {
					o.releaseOldest()
					synctest.Wait()
					o.checkGranted(want)
				}
				for len(o.holders) > 0 {
					o.releaseOldest()
				}
				synctest.Wait()
				if got := o.maxInFlight.Load(); got > int32(tt.capacity) {
					t.Errorf("%d held at once, want at most %d", got, tt.capacity)
				}
				checkConserved(t, o.g, "k")
			})
		})
	}
}

// orderRun drives waiters that report their grant, then hold their slot
// until the test lets them go.
type orderRun struct {
	t       *testing.T
	g       *gate.Gate
	granted chan int // waiter numbers, in the order they got a slot
	holders []func() // lets the current holders go, oldest first

	inFlight, maxInFlight atomic.Int32
}

// newOrderRun fills g's key "k" with holders and returns a run with room
// for waiters.
func newOrderRun(t *testing.T, g *gate.Gate, waiters int) *orderRun {
	o := &orderRun{t: t, g: g, granted: make(chan int, waiters)}
	for range g.Capacity() {
		o.holders = append(o.holders, take(t, g, "k"))
	}
	return o
}

// startWaiter starts waiter i, which checks the queued hook's ahead.
func (o *orderRun) startWaiter(i int) {
	finish := make(chan struct{})
	o.holders = append(o.holders, func() { close(finish) })
	go func() {
		release, err := o.g.Acquire(context.Background(), "k", func(ahead int) {
			if want := o.g.Capacity() + i; ahead != want {
				o.t.Errorf("waiter %d: queued(%d), want queued(%d)", i, ahead, want)
			}
		})
		if err != nil {
			o.t.Errorf("waiter %d: %v", i, err)
			return
		}
		o.hold()
		o.granted <- i
		<-finish
		o.inFlight.Add(-1)
		release()
	}()
}

// hold counts a new holder and keeps the highest count seen.
func (o *orderRun) hold() {
	n := o.inFlight.Add(1)
	for {
		m := o.maxInFlight.Load()
		if n <= m || o.maxInFlight.CompareAndSwap(m, n) {
			return
		}
	}
}

func (o *orderRun) releaseOldest() {
	release := o.holders[0]
	o.holders = o.holders[1:]
	release()
}

// checkGranted checks that waiter want, and no other, got the slot that the
// last release freed.
func (o *orderRun) checkGranted(want int) {
	o.t.Helper()
	// A release that woke more than one waiter would be a thundering herd.
	if n := len(o.granted); n != 1 {
		o.t.Fatalf("%d waiters got a slot from one release, want 1 (waiter %d)", n, want)
	}
	if got := <-o.granted; got != want {
		o.t.Fatalf("waiter %d got the slot, want waiter %d", got, want)
	}
	if in, _ := o.g.Load("k"); in > o.g.Capacity() {
		o.t.Fatalf("%d in flight, capacity %d", in, o.g.Capacity())
	}
}

func TestCancelBeforeQueueing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		holders, waiters int // on the key before the call
	}{
		// Even a free key is not taken by a caller that has given up.
		{"free key", 0, 0},
		// A held key is not joined.
		{"held key", 1, 0},
		// ctx is checked before the queue bound, so the caller's own ending
		// wins over ErrBusy.
		{"full queue", 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(1, 2)
				for range tt.holders {
					take(t, g, "k")
				}
				for range tt.waiters {
					start(t, g, "k")
					synctest.Wait()
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				release, err := g.Acquire(ctx, "k", func(int) { t.Error("queued was called") })
				if !errors.Is(err, context.Canceled) || release != nil {
					t.Errorf("Acquire = release %v, err %v; want nil, %v", release != nil, err, context.Canceled)
				}
				checkLoad(t, g, "k", tt.holders, tt.waiters)
			})
		})
	}
}

func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	const waiters = 5
	tests := []struct {
		name     string
		capacity int
		cancel   int // which waiter gives up
	}{
		// The front waiter leaving must not strand the one behind it.
		{"front", 1, 0},
		// A waiter leaving from the middle keeps both sides' order.
		{"middle", 1, 2},
		// The back waiter leaving must leave the tail right for newcomers.
		{"back", 1, waiters - 1},
		// With several slots, the same, at the front.
		{"front capacity 2", 2, 0},
		// And at the back.
		{"back capacity 2", 2, waiters - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(tt.capacity, waiters+1)
				var holders []func()
				for range tt.capacity {
					holders = append(holders, take(t, g, "k"))
				}
				var calls []*call
				for range waiters {
					calls = append(calls, start(t, g, "k"))
					synctest.Wait()
				}
				calls[tt.cancel].cancel()
				synctest.Wait()
				if r, done := calls[tt.cancel].poll(); !done || !errors.Is(r.err, context.Canceled) {
					t.Fatalf("cancelled waiter: returned %v, err %v; want %v", done, r.err, context.Canceled)
				}
				checkLoad(t, g, "k", tt.capacity, waiters-1)
				// A newcomer joins behind the rest, at the back of the queue.
				calls = append(calls, start(t, g, "k"))
				synctest.Wait()
				rest := slices.Delete(slices.Clone(calls), tt.cancel, tt.cancel+1)
				serveInOrder(t, g, "k", holders, rest)
				checkConserved(t, g, "k")
			})
		})
	}
}

// serveInOrder releases the oldest holder, one at a time, and checks that
// each release grants the next of waiters, and no one else, until all have
// been served and released.
func serveInOrder(t *testing.T, g *gate.Gate, key string, holders []func(), waiters []*call) {
	t.Helper()
	for i, w := range waiters {
		holders[0]()
		holders = holders[1:]
		synctest.Wait()
		r, done := w.poll()
		if !done || r.err != nil {
			t.Fatalf("waiter %d: returned %v, err %v; want the slot", i, done, r.err)
		}
		for j, later := range waiters[i+1:] {
			if _, done := later.poll(); done {
				t.Fatalf("waiter %d returned before waiter %d", i+1+j, i)
			}
		}
		holders = append(holders, r.release)
	}
	for _, release := range holders {
		release()
	}
	synctest.Wait()
}

func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := gate.New(1, 1)
		release := take(t, g, "k")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := g.Acquire(ctx, "k", nil)
			done <- err
		}()
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		checkLoad(t, g, "k", 1, 1)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire after 10s: err %v, want %v", err, context.DeadlineExceeded)
		}
		release()
		checkConserved(t, g, "k")
	})
}

func TestGrantRacingCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		cancelFirst bool
	}{
		// w wakes for its ctx, perhaps after the release granted it: it
		// must fail, and give the slot on to next if it had it.
		{"cancel then release", true},
		// w wakes for its grant, perhaps after its ctx ended: it may keep
		// the slot or give it on, but must not lose it.
		{"release then cancel", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(1, 2)
				// Who wins is up to the scheduler, so try often enough to
				// see both.
				for range 100 {
					raceGrant(t, g, tt.cancelFirst)
					checkConserved(t, g, "k")
				}
			})
		})
	}
}

// raceGrant queues w and next behind a holder, then cancels w and releases
// the holder with no Wait in between, and releases whatever was granted.
func raceGrant(t *testing.T, g *gate.Gate, cancelFirst bool) {
	t.Helper()
	release := take(t, g, "k")
	w, next := start(t, g, "k"), start(t, g, "k")
	synctest.Wait()
	if cancelFirst {
		w.cancel()
		release()
	} else {
		release()
		w.cancel()
	}
	synctest.Wait()
	r, done := w.poll()
	switch {
	case done && r.err == nil && !cancelFirst:
		// w had the slot before it saw its ctx end; next is still queued.
		checkLoad(t, g, "k", 1, 1)
		r.release()
		synctest.Wait()
	case !done || !errors.Is(r.err, context.Canceled):
		t.Fatalf("cancelled waiter: returned %v, err %v; want %v", done, r.err, context.Canceled)
	}
	r, done = next.poll()
	if !done || r.err != nil {
		t.Fatalf("next waiter: returned %v, err %v; want the slot", done, r.err)
	}
	r.release()
}

// TestCancelRacingRelease runs cancellations and releases truly at once,
// outside synctest, many times, for the race detector and for conservation.
func TestCancelRacingRelease(t *testing.T) {
	t.Parallel()
	iterations := 300
	if testing.Short() {
		iterations = 30
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range iterations {
		capacity, waiters := 1+rng.IntN(3), 1+rng.IntN(8)
		raceOnce(t, gate.New(capacity, waiters), waiters, rng.Uint64())
	}
}

// raceOnce fills g's key "k", queues waiters, then at once releases every
// holder and cancels a random half of the waiters. Every waiter that gets a
// slot releases it at once. When all are done, no slot may be lost or made
// up.
func raceOnce(t *testing.T, g *gate.Gate, waiters int, seed uint64) {
	t.Helper()
	var holders []func()
	for range g.Capacity() {
		holders = append(holders, take(t, g, "k"))
	}
	var wg sync.WaitGroup
	queued := make(chan struct{}, waiters)
	cancels := make([]context.CancelFunc, waiters)
	for i := range waiters {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() {
			release, err := g.Acquire(ctx, "k", func(int) { queued <- struct{}{} })
			if err == nil {
				release()
			}
		})
	}
	for range waiters {
		<-queued
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	wg.Go(func() {
		for _, release := range holders {
			release()
		}
	})
	for _, cancel := range cancels {
		if rng.IntN(2) == 0 {
			cancel()
		}
	}
	wg.Wait()
	for _, cancel := range cancels {
		cancel()
	}
	checkConserved(t, g, "k")
}
