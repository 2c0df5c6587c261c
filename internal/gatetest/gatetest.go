// Package gatetest holds the rules that every outlast.Gate of this module
// follows, as one suite of tests that runs over each of them: the
// in-process gate of package gate and the Redis-backed one of package
// redisgate.
//
// The subtests run in real time, so that a gate whose waiters block on a
// network can run them, but they wait on events (a queued hook called, an
// Acquire returned), never on sleeps, for the order of what happens.
//
// Like package gate, the package uses only the standard library, so that
// gate's tests import nothing more: it names the gate by an interface of
// its own, the same as outlast.Gate, and matches a busy refusal the way
// outlast.ErrBusy does.
package gatetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Gate is outlast.Gate's interface, repeated here so that the package does
// not import the root one; *gate.Gate and *redisgate.Gate have it.
type Gate interface {
	Acquire(ctx context.Context, key string, queued func(ahead int)) (release func(), err error)
}

// errBusy stands for outlast.ErrBusy: errors.Is(err, errBusy) holds for a
// gate's refusal just as errors.Is(err, outlast.ErrBusy) does, by its Busy
// method.
var errBusy error = busyError{}

type busyError struct{}

func (busyError) Error() string { return "busy" }
func (busyError) Busy() bool    { return true }

func (busyError) Is(target error) bool {
	b, ok := target.(interface{ Busy() bool })
	return ok && b.Busy()
}

// NewGate returns a new gate, with no key in use, that admits capacity
// requests per key at a time and lets maxQueue more wait. It arranges with
// t.Cleanup for whatever the gate holds to be freed.
type NewGate func(t *testing.T, capacity, maxQueue int) Gate

// patience bounds every wait for an event that must come: a gate that
// breaks a rule fails the test instead of hanging it.
const patience = 10 * time.Second

// Run runs the suite over the gates that newGate makes, each subtest on a
// gate of its own.
func Run(t *testing.T, newGate NewGate) {
	tests := []struct {
		name string
		run  func(t *testing.T, newGate NewGate)
	}{
		{"CancelledBeforeAcquire", testCancelledBeforeAcquire},
		{"TakenAtOnce", testTakenAtOnce},
		{"QueuedOnceWithAhead", testQueuedOnceWithAhead},
		{"Busy", testBusy},
		{"FIFO", testFIFO},
		{"CapacityUnderConcurrency", testCapacityUnderConcurrency},
		{"CancelWhileQueued", testCancelWhileQueued},
		{"DeadlineWhileQueued", testDeadlineWhileQueued},
		{"CancelRacingGrant", testCancelRacingGrant},
		{"CancelRacingRelease", testCancelRacingRelease},
		{"ReleaseIdempotent", testReleaseIdempotent},
		{"KeysIndependent", testKeysIndependent},
		{"QueuedHookPanics", testQueuedHookPanics},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newGate)
		})
	}
}

// testCancelledBeforeAcquire: a caller that has given up takes nothing,
// not even a free slot, and is not queued.
func testCancelledBeforeAcquire(t *testing.T, newGate NewGate) {
	for _, holders := range []int{0, 1} {
		g := newGate(t, 1, 2)
		for range holders {
			take(t, g, "k")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		release, err := g.Acquire(ctx, "k", func(int) { t.Error("queued was called") })
		if !errors.Is(err, context.Canceled) || release != nil {
			t.Errorf("%d holders: Acquire = release %v, err %v; want nil, %v", holders, release != nil, err, context.Canceled)
		}
		if holders == 0 {
			checkConserved(t, g, "k", 1, 2)
		}
	}
}

// testTakenAtOnce: free slots are taken without a wait or a queued call,
// up to the capacity, and no further.
func testTakenAtOnce(t *testing.T, newGate NewGate) {
	g := newGate(t, 3, 4)
	for range 3 {
		take(t, g, "k")
	}
	c := start(t, g, "k")
	if got := c.queuedOnce(t); got != 3 {
		t.Errorf("fourth of capacity 3: queued(%d), want queued(3)", got)
	}
}

// testQueuedOnceWithAhead: each waiter is told once how many are ahead of
// it, holders and earlier waiters alike.
func testQueuedOnceWithAhead(t *testing.T, newGate NewGate) {
	const capacity, waiters = 2, 5
	g := newGate(t, capacity, waiters)
	holders := []func(){take(t, g, "k"), take(t, g, "k")}
	var calls []*call
	for i := range waiters {
		c := start(t, g, "k")
		if got, want := c.queuedOnce(t), capacity+i; got != want {
			t.Errorf("waiter %d: queued(%d), want queued(%d)", i, got, want)
		}
		calls = append(calls, c)
	}
	for _, release := range holders {
		release()
	}
	for i, c := range calls {
		c.granted(t, "waiter")()
		if n := len(c.queued); n != 0 {
			t.Errorf("waiter %d: queued called %d more times, want once", i, n)
		}
	}
	checkConserved(t, g, "k", capacity, waiters)
}

// testBusy: a full queue refuses at once with an error that is
// outlast.ErrBusy, and leaves the queue as it was.
func testBusy(t *testing.T, newGate NewGate) {
	tests := []struct {
		name               string
		capacity, maxQueue int
		waiters            int // queued before the call, behind capacity holders
	}{
		// With no queue allowed, a held key refuses at once.
		{"max queue 0", 1, 0, 0},
		// A full queue refuses rather than growing.
		{"queue full", 1, 2, 2},
		// The same with several slots.
		{"capacity 2 queue full", 2, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, tt.capacity, tt.maxQueue)
			for range tt.capacity {
				take(t, g, "k")
			}
			var calls []*call
			for range tt.waiters {
				c := start(t, g, "k")
				c.queuedOnce(t)
				calls = append(calls, c)
			}
			// A deadline far beyond any round trip: a refusal that waited
			// for it would fail as DeadlineExceeded, not ErrBusy.
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			release, err := g.Acquire(ctx, "k", func(int) { t.Error("queued was called") })
			if !errors.Is(err, errBusy) || release != nil {
				t.Fatalf("Acquire on a full queue: release %v, err %v; want nil, ErrBusy", release != nil, err)
			}
			for i, c := range calls {
				if _, done := c.poll(); done {
					t.Errorf("waiter %d returned after the refusal; want still queued", i)
				}
			}
		})
	}
}

// testFIFO: waiters that queued one after another are granted in that
// order, one per release, with one slot or several.
func testFIFO(t *testing.T, newGate NewGate) {
	for _, capacity := range []int{1, 3} {
		const n = 10
		o := newOrderRun(t, newGate(t, capacity, n), capacity, n)
		for i := range n {
			o.startWaiter(i)
		}
		for want := range n {
			o.releaseOldest()
			o.checkGranted(want)
		}
		o.finish()
		checkConserved(t, o.g, "k", capacity, n)
	}
}

// testCapacityUnderConcurrency: many callers at once never hold more slots
// than the capacity, and all are served.
func testCapacityUnderConcurrency(t *testing.T, newGate NewGate) {
	const capacity, n = 3, 24
	g := newGate(t, capacity, n)
	var inFlight, maxInFlight, served atomic.Int32
	acquired, queued := make(chan struct{}, n), make(chan struct{}, n)
	drain := make(chan struct{})
	drainOnce := sync.OnceFunc(func() { close(drain) })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Should the test stop early, no caller may outlive it.
	defer func() {
		cancel()
		drainOnce()
		wg.Wait()
	}()
	for range n {
		wg.Go(func() {
			release, err := g.Acquire(ctx, "k", func(int) { queued <- struct{}{} })
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("Acquire: %v", err)
				}
				return
			}
			raise(&maxInFlight, inFlight.Add(1))
			acquired <- struct{}{}
			<-drain
			inFlight.Add(-1)
			served.Add(1)
			release()
		})
	}
	// The first capacity take their slot and the rest queue, in whatever
	// order the callers arrived; only then may anyone let go.
	for range capacity {
		receive(t, acquired, "a holder")
	}
	for range n - capacity {
		receive(t, queued, "a waiter")
	}
	drainOnce()
	wg.Wait()
	if got := maxInFlight.Load(); got > capacity {
		t.Errorf("%d held at once, want at most %d", got, capacity)
	}
	if got := served.Load(); got != n {
		t.Errorf("%d served, want %d", got, n)
	}
	checkConserved(t, g, "k", capacity, n)
}

// testCancelWhileQueued: a waiter that gives up leaves the queue, from the
// front, the middle or the back, and the others keep their order.
func testCancelWhileQueued(t *testing.T, newGate NewGate) {
	const waiters = 4
	for _, cancelled := range []int{0, 2, waiters - 1} {
		g := newGate(t, 1, waiters+1)
		holders := []func(){take(t, g, "k")}
		var calls []*call
		for range waiters {
			c := start(t, g, "k")
			c.queuedOnce(t)
			calls = append(calls, c)
		}
		calls[cancelled].cancel()
		if r := calls[cancelled].wait(t); !errors.Is(r.err, context.Canceled) || r.release != nil {
			t.Fatalf("cancelled waiter %d: release %v, err %v; want nil, %v", cancelled, r.release != nil, r.err, context.Canceled)
		}
		// A newcomer joins behind the rest, with the one that left no
		// longer counted ahead of it.
		c := start(t, g, "k")
		if got := c.queuedOnce(t); got != waiters {
			t.Errorf("newcomer after waiter %d left: queued(%d), want queued(%d)", cancelled, got, waiters)
		}
		rest := append(append(calls[:cancelled:cancelled], calls[cancelled+1:]...), c)
		serveInOrder(t, holders, rest)
		checkConserved(t, g, "k", 1, waiters+1)
	}
}

// testDeadlineWhileQueued: a waiter whose deadline passes returns
// DeadlineExceeded and leaves no trace.
func testDeadlineWhileQueued(t *testing.T, newGate NewGate) {
	g := newGate(t, 1, 1)
	release := take(t, g, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Acquire(ctx, "k", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline: err %v, want %v", err, context.DeadlineExceeded)
	}
	release()
	checkConserved(t, g, "k", 1, 1)
}

// testCancelRacingGrant: a waiter cancelled just as the holder ahead of it
// releases either keeps the slot or passes it on to the next waiter, but
// never loses it, whichever of the two comes first.
func testCancelRacingGrant(t *testing.T, newGate NewGate) {
	g := newGate(t, 1, 2)
	for i := range 60 {
		release := take(t, g, "k")
		w, next := start(t, g, "k"), start(t, g, "k")
		w.queuedOnce(t)
		next.queuedOnce(t)
		// Both at once, in either order of starting.
		var wg sync.WaitGroup
		if i%2 == 0 {
			wg.Go(release)
			w.cancel()
		} else {
			wg.Go(w.cancel)
			release()
		}
		wg.Wait()
		r := w.wait(t)
		switch {
		case r.err == nil:
			// w had the slot before it saw its ctx end.
			r.release()
		case !errors.Is(r.err, context.Canceled):
			t.Fatalf("round %d: cancelled waiter: err %v, want nil or %v", i, r.err, context.Canceled)
		}
		next.granted(t, "next waiter")()
	}
	checkConserved(t, g, "k", 1, 2)
}

// testCancelRacingRelease: releases and cancellations at once, over
// several slots and waiters, neither lose a slot nor make one up.
func testCancelRacingRelease(t *testing.T, newGate NewGate) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		capacity, waiters := 1+rng.IntN(3), 1+rng.IntN(6)
		g := newGate(t, capacity, waiters)
		raceOnce(t, g, capacity, waiters, rng.Uint64())
		checkConserved(t, g, "k", capacity, waiters)
	}
}

// raceOnce fills g's key "k", queues waiters, then at once releases every
// holder and cancels a random half of the waiters. Every waiter that gets a
// slot releases it at once.
func raceOnce(t *testing.T, g Gate, capacity, waiters int, seed uint64) {
	t.Helper()
	var holders []func()
	for range capacity {
		holders = append(holders, take(t, g, "k"))
	}
	var wg sync.WaitGroup
	queued := make(chan struct{}, waiters)
	cancels := make([]context.CancelFunc, waiters)
	// Should the test stop early, no waiter may outlive it.
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
	}()
	for i := range waiters {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() {
			release, err := g.Acquire(ctx, "k", func(int) { queued <- struct{}{} })
			if err == nil {
				release()
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("waiter: err %v, want nil or %v", err, context.Canceled)
			}
		})
	}
	for range waiters {
		receive(t, queued, "a waiter")
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
}

// testReleaseIdempotent: only the first call of a release func frees its
// slot, even once the slot has passed to another.
func testReleaseIdempotent(t *testing.T, newGate NewGate) {
	t.Run("twice", func(t *testing.T) {
		g := newGate(t, 1, 1)
		release := take(t, g, "k")
		release()
		release()
		checkConserved(t, g, "k", 1, 1)
	})
	t.Run("after handoff", func(t *testing.T) {
		g := newGate(t, 1, 1)
		a := take(t, g, "k")
		w := start(t, g, "k")
		w.queuedOnce(t)
		a()
		b := w.granted(t, "waiter")
		a()
		// The slot is still b's: another caller must wait.
		if _, queued, err := tryAcquire(g, "k"); !queued || !errors.Is(err, context.Canceled) {
			t.Errorf("after a late second release: queued %v, err %v; want queued, %v", queued, err, context.Canceled)
		}
		b()
		b()
		checkConserved(t, g, "k", 1, 1)
	})
	t.Run("capacity 2", func(t *testing.T) {
		g := newGate(t, 2, 0)
		a, b := take(t, g, "k"), take(t, g, "k")
		a()
		a()
		// One slot is free and one is still b's.
		c := take(t, g, "k")
		if _, _, err := tryAcquire(g, "k"); !errors.Is(err, errBusy) {
			t.Errorf("third of capacity 2 with b and c holding: err %v, want ErrBusy", err)
		}
		b()
		c()
		checkConserved(t, g, "k", 2, 0)
	})
}

// testKeysIndependent: one key's holders and queue do not count for another.
func testKeysIndependent(t *testing.T, newGate NewGate) {
	g := newGate(t, 1, 0)
	release := take(t, g, "a")
	take(t, g, "b")()
	if _, _, err := tryAcquire(g, "a"); !errors.Is(err, errBusy) {
		t.Errorf("held key a: err %v, want ErrBusy", err)
	}
	release()
	checkConserved(t, g, "a", 1, 0)
	checkConserved(t, g, "b", 1, 0)
}

// testQueuedHookPanics: a waiter whose queued hook panics leaves the queue
// before the panic goes on, or the next release would grant its slot to
// nobody.
func testQueuedHookPanics(t *testing.T, newGate NewGate) {
	g := newGate(t, 1, 1)
	release := take(t, g, "k")
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_, _ = g.Acquire(context.Background(), "k", func(int) { panic("hook") })
	}()
	if got := receive(t, recovered, "the panic"); got != "hook" {
		t.Errorf("recovered %v, want the hook's panic", got)
	}
	// Had the panicking caller stayed queued, this would be busy.
	if _, queued, err := tryAcquire(g, "k"); !queued || !errors.Is(err, context.Canceled) {
		t.Errorf("after the panic: queued %v, err %v; want queued, %v", queued, err, context.Canceled)
	}
	release()
	checkConserved(t, g, "k", 1, 1)
}
