package gate_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/outlast-llm/outlast/gate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is an Acquire running in a goroutine of its own, so that a test can
// watch it queue, block and return.
type call struct {
	cancel context.CancelFunc
	queued chan int    // one value per call of the queued hook
	done   chan result // the outcome, once

	res    *result // the outcome, once poll has seen it
	aheads []int   // what queued was called with, as far as seen
}

// result is what Acquire returned.
type result struct {
	release func()
	err     error
}

// start runs g.Acquire for key in a new goroutine, with a ctx that the
// returned call can cancel. The test's cleanup cancels it, so that no
// goroutine outlives the test.
func start(t *testing.T, g *gate.Gate, key string) *call {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// queued has room for a second call, so that a broken "exactly once"
	// shows up as a failure rather than as a goroutine stuck sending.
	c := &call{cancel: cancel, queued: make(chan int, 2), done: make(chan result, 1)}
	go func() {
		release, err := g.Acquire(ctx, key, func(ahead int) { c.queued <- ahead })
		c.done <- result{release, err}
	}()
	return c
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

// wait blocks until Acquire has returned, and returns its outcome.
func (c *call) wait() result {
	if c.res == nil {
		r := <-c.done
		c.res = &r
	}
	return *c.res
}

// queuedWith returns every value queued has been called with so far.
func (c *call) queuedWith() []int {
	for {
		select {
		case a := <-c.queued:
			c.aheads = append(c.aheads, a)
		default:
			return c.aheads
		}
	}
}

// tryAcquire acquires key if that needs no wait. Otherwise it leaves the
// queue at once, because its queued hook cancels its own ctx, so it never
// blocks, inside a synctest bubble or out.
func tryAcquire(g *gate.Gate, key string) (release func(), queued bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release, err = g.Acquire(ctx, key, func(int) {
		queued = true
		cancel()
	})
	return release, queued, err
}

// take acquires key at once, failing the test if that would need a wait.
func take(t *testing.T, g *gate.Gate, key string) func() {
	t.Helper()
	release, queued, err := tryAcquire(g, key)
	if err != nil || queued {
		t.Fatalf("Acquire(%q): queued %v, err %v; want taken at once", key, queued, err)
	}
	return release
}

// checkLoad fails the test unless g.Load(key) reports inFlight and waiting.
func checkLoad(t *testing.T, g *gate.Gate, key string, inFlight, waiting int) {
	t.Helper()
	if gotIn, gotWait := g.Load(key); gotIn != inFlight || gotWait != waiting {
		t.Errorf("Load(%q) = %d, %d; want %d, %d", key, gotIn, gotWait, inFlight, waiting)
	}
}

// checkConserved fails the test unless key is idle and forgotten, and then
// admits exactly Capacity requests at once: no slot was lost or made up.
func checkConserved(t *testing.T, g *gate.Gate, key string) {
	t.Helper()
	checkLoad(t, g, key, 0, 0)
	if slices.Contains(g.Keys(), key) {
		t.Errorf("Keys() = %q; want no %q", g.Keys(), key)
	}
	var releases []func()
	for range g.Capacity() {
		releases = append(releases, take(t, g, key))
	}
	_, queued, err := tryAcquire(g, key)
	// One more must wait, or be refused outright where nobody may wait.
	want := context.Canceled
	if g.MaxQueue() == 0 {
		want = gate.ErrBusy
	}
	if !errors.Is(err, want) || queued != (g.MaxQueue() > 0) {
		t.Errorf("Acquire %d of capacity %d: queued %v, err %v; want queued %v, err %v",
			g.Capacity()+1, g.Capacity(), queued, err, g.MaxQueue() > 0, want)
	}
	for _, release := range releases {
		release()
	}
	checkLoad(t, g, key, 0, 0)
}
