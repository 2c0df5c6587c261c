package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/synctest"

	"github.com/outlast-llm/outlast/gate"
)

func TestAcquireRules(t *testing.T) {
	t.Parallel()
	const (
		taken  = "taken at once"
		busy   = "refused busy"
		queued = "queued"
	)
	tests := []struct {
		name               string
		capacity, maxQueue int
		holders, waiters   int    // already on key "a" before the call
		key                string // the call's key
		want               string
		wantAhead          int // for queued
	}{
		// The plain case: nobody there, so no wait and no queued call.
		{name: "free key", capacity: 1, maxQueue: 4, key: "a", want: taken},
		// A slot left over is taken even though others hold the key.
		{name: "capacity left", capacity: 3, maxQueue: 4, holders: 2, key: "a", want: taken},
		// With no queue allowed, a held key refuses at once.
		{name: "max queue 0", capacity: 1, maxQueue: 0, holders: 1, key: "a", want: busy},
		// A full queue refuses at once rather than growing.
		{name: "queue full", capacity: 1, maxQueue: 2, holders: 1, waiters: 2, key: "a", want: busy},
		// ahead counts the holder.
		{name: "behind holder", capacity: 1, maxQueue: 4, holders: 1, key: "a", want: queued, wantAhead: 1},
		// ahead counts holders and earlier waiters alike.
		{name: "behind holders and waiters", capacity: 2, maxQueue: 4, holders: 2, waiters: 2, key: "a", want: queued, wantAhead: 4},
		// The last place in the queue is still given.
		{name: "last place", capacity: 1, maxQueue: 2, holders: 1, waiters: 1, key: "a", want: queued, wantAhead: 2},
		// Another key's holders and queue do not count.
		{name: "keys independent", capacity: 1, maxQueue: 0, holders: 1, key: "b", want: taken},
		// A capacity below 1 means 1, not "nobody".
		{name: "capacity 0 means 1", capacity: 0, maxQueue: 4, holders: 1, key: "a", want: queued, wantAhead: 1},
		// A negative queue bound means nobody may wait.
		{name: "negative max queue means 0", capacity: 1, maxQueue: -1, holders: 1, key: "a", want: busy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(tt.capacity, tt.maxQueue)
				for range tt.holders {
					take(t, g, "a")
				}
				for range tt.waiters {
					start(t, g, "a")
					synctest.Wait()
				}
				c := start(t, g, tt.key)
				synctest.Wait()
				got, ahead := outcome(t, c)
				if got != tt.want || ahead != tt.wantAhead {
					t.Errorf("got %s (ahead %d), want %s (ahead %d)", got, ahead, tt.want, tt.wantAhead)
				}
			})
		})
	}
}

// outcome names what a call did once every goroutine has settled, and the
// value queued got if it queued.
func outcome(t *testing.T, c *call) (string, int) {
	t.Helper()
	aheads := c.queuedWith()
	r, done := c.poll()
	switch {
	case !done && len(aheads) == 1:
		return "queued", aheads[0]
	case done && r.err == nil && len(aheads) == 0:
		return "taken at once", 0
	case done && errors.Is(r.err, gate.ErrBusy) && len(aheads) == 0:
		return "refused busy", 0
	}
	return fmt.Sprintf("returned %v, err %v, queued with %v", done, r.err, aheads), 0
}

// busyStandIn is shaped like outlast.ErrBusy's type, which this package must
// not import.
type busyStandIn struct{ busy bool }

func (busyStandIn) Error() string { return "outlast: busy" }
func (e busyStandIn) Busy() bool  { return e.busy }
func (e busyStandIn) Is(target error) bool {
	var b interface{ Busy() bool }
	return errors.As(target, &b) && b.Busy()
}

func TestErrBusyIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err, target error
		want        bool
	}{
		// What a caller of the root package will write about a gate's refusal.
		{"gate matches root", gate.ErrBusy, busyStandIn{busy: true}, true},
		// Wrapping on the way up must not hide the refusal.
		{"wrapped gate matches root", fmt.Errorf("gateway: %w", gate.ErrBusy), busyStandIn{busy: true}, true},
		// The root's Is works the other way round, by the same Busy method.
		{"root matches gate", busyStandIn{busy: true}, gate.ErrBusy, true},
		// An error that says it is not busy is not matched.
		{"not busy", gate.ErrBusy, busyStandIn{busy: false}, false},
		// An error without Busy is not matched.
		{"other error", gate.ErrBusy, io.EOF, false},
		// And the sentinel is itself.
		{"itself", gate.ErrBusy, gate.ErrBusy, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
	if got, want := gate.ErrBusy.Error(), "gate: queue is full"; got != want {
		t.Errorf("ErrBusy.Error() = %q, want %q", got, want)
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                       string
		g                          *gate.Gate
		wantCapacity, wantMaxQueue int
	}{
		// The zero value is documented as capacity 1 with no queue.
		{"zero value", new(gate.Gate), 1, 0},
		// Values in range are kept.
		{"in range", gate.New(4, 16), 4, 16},
		// Out-of-range values are clamped, not rejected.
		{"clamped", gate.New(-3, -1), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.g.Capacity(); got != tt.wantCapacity {
				t.Errorf("Capacity() = %d, want %d", got, tt.wantCapacity)
			}
			if got := tt.g.MaxQueue(); got != tt.wantMaxQueue {
				t.Errorf("MaxQueue() = %d, want %d", got, tt.wantMaxQueue)
			}
			// The clamped bounds are the ones enforced.
			checkConserved(t, tt.g, "k")
		})
	}
}

func TestReleaseIdempotent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		run      func(t *testing.T, g *gate.Gate)
	}{
		// The plain double call frees one slot, not two.
		{"twice", 1, func(t *testing.T, g *gate.Gate) {
			release := take(t, g, "k")
			release()
			release()
		}},
		// The ticket behind A's release is reused for B, so a late second
		// call from A must not free B's slot.
		{"after reuse", 1, func(t *testing.T, g *gate.Gate) {
			a := take(t, g, "k")
			a()
			b := take(t, g, "k")
			a()
			checkLoad(t, g, "k", 1, 0)
			b()
		}},
		// After a handoff the slot belongs to the waiter, not to A.
		{"after handoff", 1, func(t *testing.T, g *gate.Gate) {
			a := take(t, g, "k")
			w := start(t, g, "k")
			synctest.Wait()
			a()
			synctest.Wait()
			a()
			checkLoad(t, g, "k", 1, 0)
			w.wait().release()
		}},
		// With two slots, one holder's double call leaves the other's alone.
		{"capacity 2", 2, func(t *testing.T, g *gate.Gate) {
			a, b := take(t, g, "k"), take(t, g, "k")
			a()
			a()
			checkLoad(t, g, "k", 1, 0)
			b()
			b()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(tt.capacity, 4)
				tt.run(t, g)
				checkConserved(t, g, "k")
			})
		})
	}
}

func TestIdleKeysForgotten(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, g *gate.Gate)
	}{
		// A key per request, one after another: the map must not keep them.
		{"many keys in turn", func(t *testing.T, g *gate.Gate) {
			for i := range 1000 {
				take(t, g, fmt.Sprint(i))()
			}
		}},
		// All held at once, then all released: the map empties and the
		// free lists stay bounded.
		{"many keys at once", func(t *testing.T, g *gate.Gate) {
			var releases []func()
			for i := range 1000 {
				releases = append(releases, take(t, g, fmt.Sprint(i)))
			}
			if got := len(g.Keys()); got != 1000 {
				t.Errorf("len(Keys()) = %d while held, want 1000", got)
			}
			for _, release := range releases {
				release()
			}
		}},
		// A waiter that gives up leaves the key to its holder alone.
		{"cancelled waiter", func(t *testing.T, g *gate.Gate) {
			release := take(t, g, "k")
			w := start(t, g, "k")
			synctest.Wait()
			w.cancel()
			synctest.Wait()
			release()
		}},
		// The key stays known through a handoff and goes with the last holder.
		{"handoff", func(t *testing.T, g *gate.Gate) {
			release := take(t, g, "k")
			w := start(t, g, "k")
			synctest.Wait()
			release()
			if got := g.Keys(); len(got) != 1 {
				t.Errorf("Keys() = %q mid-handoff, want [k]", got)
			}
			w.wait().release()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := gate.New(1, 4)
				tt.run(t, g)
				keys, freeKeys, freeTickets := gate.Sizes(g)
				// The one idle key the Gate keeps for reuse may remain.
				if keys > 1 || len(g.Keys()) != 0 {
					t.Errorf("%d keys in the map, Keys() = %q; want at most 1, and none listed", keys, g.Keys())
				}
				if freeKeys > gate.MaxFree || freeTickets > gate.MaxFree {
					t.Errorf("free lists hold %d keys, %d tickets; want at most %d each", freeKeys, freeTickets, gate.MaxFree)
				}
			})
		})
	}
}

func TestQueuedHookPanics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := gate.New(1, 4)
		release := take(t, g, "k")
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_, _ = g.Acquire(context.Background(), "k", func(int) { panic("hook") })
		}()
		synctest.Wait()
		if got := <-recovered; got != "hook" {
			t.Errorf("recovered %v, want the hook's panic", got)
		}
		// The panicking caller must have left the queue, or the release
		// below would hand the slot to nobody.
		checkLoad(t, g, "k", 1, 0)
		release()
		checkConserved(t, g, "k")
	})
}

func TestUncontendedAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts every allocation in the process.
	g := gate.New(1, 0)
	ctx := context.Background()
	got := testing.AllocsPerRun(1000, func() {
		release, err := g.Acquire(ctx, "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		release()
	})
	// The one allocation is the release func, which must be new for every
	// grant to stay idempotent once its ticket is reused (see releaseFunc).
	// Key states and tickets are reused.
	if got != 1 {
		t.Errorf("uncontended Acquire and release: %v allocations, want 1", got)
	}
}
