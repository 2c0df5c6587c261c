package gatetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// call is an Acquire running in a goroutine of its own, so that a test can
// watch it queue, block and return.
type call struct {
	cancel context.CancelFunc
	queued chan int    // one value per call of the queued hook
	done   chan result // the outcome, once
	res    *result     // the outcome, once received from done
}

// result is what Acquire returned.
type result struct {
	release func()
	err     error
}

// start runs g.Acquire for key in a new goroutine, with a ctx that the call
// can cancel. The test's cleanup cancels it, waits for it to return and
// releases what it got, so that no goroutine or slot outlives the test.
func start(t *testing.T, g Gate, key string) *call {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// queued has room for a second call, so that a broken "exactly once"
	// shows up as a failure rather than as a goroutine stuck sending.
	c := &call{cancel: cancel, queued: make(chan int, 2), done: make(chan result, 1)}
	go func() {
		release, err := g.Acquire(ctx, key, func(ahead int) { c.queued <- ahead })
		c.done <- result{release, err}
	}()
	t.Cleanup(func() {
		cancel()
		if r := c.wait(t); r.release != nil {
			r.release()
		}
	})
	return c
}

// queuedOnce waits for c's queued hook and returns what it was called with.
func (c *call) queuedOnce(t *testing.T) int {
	t.Helper()
	return receive(t, c.queued, "the queued hook")
}

// poll returns c's outcome and true if Acquire has returned, without
// blocking.
func (c *call) poll() (result, bool) {
	if c.res == nil {
		select {
		case r := <-c.done:
			c.res = &r
		default:
			return result{}, false
		}
	}
	return *c.res, true
}

// wait waits for Acquire to return, and returns its outcome.
func (c *call) wait(t *testing.T) result {
	t.Helper()
	if c.res == nil {
		r := receive(t, c.done, "Acquire to return")
		c.res = &r
	}
	return *c.res
}

// granted waits for Acquire to return with a slot, and returns its release.
func (c *call) granted(t *testing.T, who string) func() {
	t.Helper()
	r := c.wait(t)
	if r.err != nil {
		t.Fatalf("%s: err %v, want the slot", who, r.err)
	}
	return r.release
}

// receive returns the next value from ch, failing the test if none comes
// within patience.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(patience)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, patience)
		panic("unreachable")
	}
}

// tryAcquire acquires key if that needs no wait. Otherwise it leaves the
// queue at once, because its queued hook cancels its own ctx.
func tryAcquire(g Gate, key string) (release func(), queued bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release, err = g.Acquire(ctx, key, func(int) {
		queued = true
		cancel()
	})
	return release, queued, err
}

// take acquires key at once, failing the test if that would need a wait.
// The test's cleanup releases the slot, if the test has not.
func take(t *testing.T, g Gate, key string) func() {
	t.Helper()
	release, queued, err := tryAcquire(g, key)
	if err != nil || queued {
		t.Fatalf("Acquire(%q): queued %v, err %v; want taken at once", key, queued, err)
	}
	t.Cleanup(release)
	return release
}

// checkConserved fails the test unless key admits exactly capacity
// requests at once, and then queues one more, or refuses it where nobody
// may wait: no slot was lost or made up, and no waiter was left behind.
func checkConserved(t *testing.T, g Gate, key string, capacity, maxQueue int) {
	t.Helper()
	var releases []func()
	for range capacity {
		releases = append(releases, take(t, g, key))
	}
	_, queued, err := tryAcquire(g, key)
	want := context.Canceled
	if maxQueue == 0 {
		want = errBusy
	}
	if !errors.Is(err, want) || queued != (maxQueue > 0) {
		t.Errorf("Acquire %d of capacity %d: queued %v, err %v; want queued %v, err %v",
			capacity+1, capacity, queued, err, maxQueue > 0, want)
	}
	for _, release := range releases {
		release()
	}
}

// serveInOrder releases the oldest holder, one at a time, and checks that
// each release grants the next of waiters, until all have been served and
// released.
func serveInOrder(t *testing.T, holders []func(), waiters []*call) {
	t.Helper()
	for i, w := range waiters {
		holders[0]()
		holders = holders[1:]
		release := w.granted(t, "waiter")
		for j, later := range waiters[i+1:] {
			if _, done := later.poll(); done {
				t.Fatalf("waiter %d returned before waiter %d had been served", i+1+j, i)
			}
		}
		holders = append(holders, release)
	}
	for _, release := range holders {
		release()
	}
}

// raise makes m at least n.
func raise(m *atomic.Int32, n int32) {
	for {
		old := m.Load()
		if n <= old || m.CompareAndSwap(old, n) {
			return
		}
	}
}
