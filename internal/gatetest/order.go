package gatetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// orderRun drives waiters that report their grant, then hold their slot
// until the test lets them go.
type orderRun struct {
	t        *testing.T
	g        Gate
	ctx      context.Context // the waiters', cancelled when the test ends
	capacity int
	granted  chan int // waiter numbers, in the order they got a slot; -1 for a failure
	holders  []func() // lets the current holders go, oldest first
	wg       sync.WaitGroup

	inFlight, maxInFlight atomic.Int32
}

// newOrderRun fills g's key "k" with capacity holders and returns a run
// with room for n waiters. If the test stops early, its cleanup cancels
// the waiters, lets the holders go and waits for every waiter to return.
func newOrderRun(t *testing.T, g Gate, capacity, n int) *orderRun {
	ctx, cancel := context.WithCancel(context.Background())
	o := &orderRun{t: t, g: g, ctx: ctx, capacity: capacity, granted: make(chan int, n)}
	for range capacity {
		o.holders = append(o.holders, take(t, g, "k"))
	}
	t.Cleanup(func() {
		cancel()
		for _, release := range o.holders {
			release()
		}
		o.wg.Wait()
	})
	return o
}

// startWaiter starts waiter i and waits until it has queued, so that
// arrival order is i's order. The waiter checks the queued hook's ahead.
func (o *orderRun) startWaiter(i int) {
	o.t.Helper()
	finish := make(chan struct{})
	o.holders = append(o.holders, sync.OnceFunc(func() { close(finish) }))
	queued := make(chan struct{})
	o.wg.Go(func() {
		release, err := o.g.Acquire(o.ctx, "k", func(ahead int) {
			if want := o.capacity + i; ahead != want {
				o.t.Errorf("waiter %d: queued(%d), want queued(%d)", i, ahead, want)
			}
			close(queued)
		})
		if err != nil {
			if o.ctx.Err() == nil {
				o.t.Errorf("waiter %d: %v", i, err)
			}
			o.granted <- -1 // fails checkGranted at once
			return
		}
		raise(&o.maxInFlight, o.inFlight.Add(1))
		o.granted <- i
		<-finish
		o.inFlight.Add(-1)
		release()
	})
	receive(o.t, queued, "the queued hook")
}

// releaseOldest lets the oldest holder go.
func (o *orderRun) releaseOldest() {
	release := o.holders[0]
	o.holders = o.holders[1:]
	release()
}

// checkGranted checks that waiter want is the next to get a slot.
func (o *orderRun) checkGranted(want int) {
	o.t.Helper()
	got := receive(o.t, o.granted, "grant")
	if got < 0 {
		o.t.FailNow() // the waiter has said why
	}
	if got != want {
		o.t.Fatalf("waiter %d got the slot, want waiter %d", got, want)
	}
}

// finish lets every holder go, waits for the waiters to return, and checks
// that the capacity was never exceeded.
func (o *orderRun) finish() {
	o.t.Helper()
	for _, release := range o.holders {
		release()
	}
	o.wg.Wait()
	if got := o.maxInFlight.Load(); got > int32(o.capacity) {
		o.t.Errorf("%d held at once, want at most %d", got, o.capacity)
	}
}
