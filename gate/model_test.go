package gate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/outlast-llm/outlast/gate"
)

// modelKeys are the keys that runs spread their requests over.
var modelKeys = []string{"a", "b", "c"}

// maxOps bounds a run, so that one fuzz input stays fast.
const maxOps = 200

// FuzzGate holds the Gate to a simple model under random sequences of
// acquire, cancel, release and late second release across several keys.
func FuzzGate(f *testing.F) {
	// capacity 1, queue 1: acquire a, acquire a, acquire a (busy), release, release.
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0})
	// capacity 2, queue 3: a pile on one key, cancels at front and back.
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 4, 2, 0, 2, 1, 3, 0})
	// capacity 3, queue 0: refusals only, across keys, with late releases.
	f.Add([]byte{2, 0, 0, 0, 4, 1, 8, 2, 0, 0, 0, 0, 0, 0, 2, 0, 3, 0, 2, 1, 3, 0})
	// Mixed.
	f.Add([]byte{0, 2, 0, 0, 4, 0, 0, 0, 4, 1, 1, 1, 2, 0, 3, 0, 2, 1, 1, 0, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { runModel(t, data) })
	})
}

// TestGateMatchesModel is FuzzGate over fixed pseudo-random inputs, so that
// every plain test run covers it.
func TestGateMatchesModel(t *testing.T) {
	t.Parallel()
	runs := 300
	if testing.Short() {
		runs = 30
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range runs {
		data := make([]byte, 2+rng.IntN(2*maxOps))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runModel(t, data) })
		})
	}
}

// runModel decodes data into bounds and operations and checks the Gate
// against the model after each one. data[0] and data[1] choose the capacity
// (1 to 3) and queue bound (0 to 3); each later pair is an operation and its
// argument.
func runModel(t *testing.T, data []byte) {
	if len(data) < 2 {
		return
	}
	capacity, maxQueue := 1+int(data[0]%3), int(data[1]%4)
	h := &harness{t: t, g: gate.New(capacity, maxQueue), m: newModel(capacity, maxQueue)}
	for i := 2; i+1 < len(data) && i < 2+2*maxOps; i += 2 {
		h.step(data[i], data[i+1])
		synctest.Wait()
		h.check()
	}
	h.drain()
}

// model is what the Gate should do: per key, the actors holding a slot and
// the actors waiting, in order. An actor is one Acquire, by number.
type model struct {
	capacity, maxQueue int
	keys               map[string]*modelKey
}

type modelKey struct{ holders, queue []int }

func newModel(capacity, maxQueue int) model {
	m := model{capacity: capacity, maxQueue: maxQueue, keys: make(map[string]*modelKey)}
	for _, key := range modelKeys {
		m.keys[key] = new(modelKey)
	}
	return m
}

// state is where the model says an actor is.
type state int

const (
	waiting state = iota
	holding
	refused   // got ErrBusy
	cancelled // gave up while waiting
	released  // held, then released
)

// actor is one Acquire under test: what the model says and what was seen.
type actor struct {
	key    string
	state  state
	aheads []int // what queued should have been called with
	call   *call
}

// harness runs one sequence against the Gate and the model side by side.
type harness struct {
	t      *testing.T
	g      *gate.Gate
	m      model
	actors []*actor
}

func (h *harness) step(op, arg byte) {
	switch op % 4 {
	case 0:
		h.acquire(modelKeys[int(arg)%len(modelKeys)])
	case 1:
		// Cancelling a holder must change nothing: its ctx is spent.
		if a := h.pick(arg, waiting, holding); a >= 0 {
			h.cancel(a)
		}
	case 2:
		if a := h.pick(arg, holding); a >= 0 {
			h.release(a)
		}
	case 3:
		// A late second call, often after the ticket has been reused.
		if a := h.pick(arg, released); a >= 0 {
			h.actors[a].call.wait().release()
		}
	}
}

// pick returns the arg'th actor, wrapping around, of those in the given
// states, or -1 if there is none.
func (h *harness) pick(arg byte, states ...state) int {
	var in []int
	for i, a := range h.actors {
		if slices.Contains(states, a.state) {
			in = append(in, i)
		}
	}
	if len(in) == 0 {
		return -1
	}
	return in[int(arg)%len(in)]
}

func (h *harness) acquire(key string) {
	k := h.m.keys[key]
	a := &actor{key: key, call: start(h.t, h.g, key)}
	switch {
	case len(k.holders) < h.m.capacity && len(k.queue) == 0:
		a.state = holding
		k.holders = append(k.holders, len(h.actors))
	case len(k.queue) >= h.m.maxQueue:
		a.state = refused
	default:
		a.state = waiting
		a.aheads = []int{len(k.holders) + len(k.queue)}
		k.queue = append(k.queue, len(h.actors))
	}
	h.actors = append(h.actors, a)
}

func (h *harness) cancel(i int) {
	a := h.actors[i]
	a.call.cancel()
	if a.state == waiting {
		k := h.m.keys[a.key]
		k.queue = slices.DeleteFunc(k.queue, func(j int) bool { return j == i })
		a.state = cancelled
	}
}

func (h *harness) release(i int) {
	a := h.actors[i]
	a.call.wait().release()
	a.state = released
	k := h.m.keys[a.key]
	k.holders = slices.DeleteFunc(k.holders, func(j int) bool { return j == i })
	if len(k.queue) > 0 {
		// Strict FIFO: the slot goes to the oldest waiter, no one else.
		next := k.queue[0]
		k.queue = k.queue[1:]
		k.holders = append(k.holders, next)
		h.actors[next].state = holding
	}
}

// check compares every actor and every key with the model.
func (h *harness) check() {
	h.t.Helper()
	for i, a := range h.actors {
		if got := observe(a.call); got != a.state && !(a.state == released && got == holding) {
			h.t.Fatalf("actor %d on %q: got %s, want %s", i, a.key, got, a.state)
		}
		if got := a.call.queuedWith(); !slices.Equal(got, a.aheads) {
			h.t.Fatalf("actor %d on %q: queued called with %v, want %v", i, a.key, got, a.aheads)
		}
	}
	var busy []string
	for _, key := range modelKeys {
		k := h.m.keys[key]
		checkLoad(h.t, h.g, key, len(k.holders), len(k.queue))
		if len(k.holders)+len(k.queue) > 0 {
			busy = append(busy, key)
		}
	}
	if got := h.g.Keys(); !slices.Equal(got, busy) {
		h.t.Fatalf("Keys() = %q, want %q", got, busy)
	}
	if h.t.Failed() {
		h.t.FailNow()
	}
}

// observe says where a call is, from what Acquire has returned so far. A
// released holder reads as holding: only the model knows it let go.
func observe(c *call) state {
	r, done := c.poll()
	switch {
	case !done:
		return waiting
	case r.err == nil:
		return holding
	case errors.Is(r.err, gate.ErrBusy):
		return refused
	case errors.Is(r.err, context.Canceled):
		return cancelled
	}
	return -1
}

func (s state) String() string {
	switch s {
	case waiting:
		return "waiting"
	case holding:
		return "holding"
	case refused:
		return "refused"
	case cancelled:
		return "cancelled"
	case released:
		return "released"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// drain cancels every waiter, then releases every holder, and checks that
// each key is left idle with all its slots.
func (h *harness) drain() {
	for i, a := range h.actors {
		if a.state == waiting {
			h.cancel(i)
		}
	}
	synctest.Wait()
	for i, a := range h.actors {
		if a.state == holding {
			h.release(i)
		}
	}
	synctest.Wait()
	h.check()
	for _, key := range slices.Sorted(maps.Keys(h.m.keys)) {
		checkConserved(h.t, h.g, key)
	}
}
