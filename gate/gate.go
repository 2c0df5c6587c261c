package gate

import (
	"context"
	"slices"
	"sync"
)

// maxFree bounds each free list. Reuse only has to cover steady traffic; a
// burst of distinct keys or waiters should not pin its peak memory for the
// life of the Gate.
const maxFree = 256

// Gate admits a bounded number of requests per key at a time and lets a
// bounded number more wait, served strictly in arrival order. Keys are
// independent of each other. A Gate remembers only the keys in use and the
// one that went idle last, so any number of distinct keys may pass through.
//
// Use [New] to choose the bounds. The zero value is a usable Gate with a
// capacity of 1 and no queue: one request per key at a time, and any other
// refused with [ErrBusy].
//
// A Gate is safe for concurrent use. It must not be copied after first use.
type Gate struct {
	capacity int // requests in flight per key; values below 1 mean 1
	maxQueue int // waiters per key; negative values mean 0

	// mu guards the fields below, and every field of the keyStates and
	// tickets that they or a queue reach, except that a waiting ticket's
	// ready and gen are also read by its own Acquire (see ticket).
	mu sync.Mutex
	// keys holds the keys with a holder or a waiter, and idle. Idle keys are
	// otherwise forgotten, so that the map stays as small as the traffic
	// rather than growing with every key ever seen.
	keys map[string]*keyState
	// idle is the key that went idle last, or nil. It stays in keys so that
	// a key used by one request at a time does not pay a map insert and
	// delete for every request (they were half the cost of an uncontended
	// Acquire); it is forgotten when another key goes idle.
	idle        *keyState
	freeKeys    []*keyState
	freeTickets []*ticket
}

// keyState is one key's holders and waiters.
type keyState struct {
	key  string
	held int   // slots in use; while q is not empty, held equals the capacity
	q    queue // waiters, front first
}

// ticket is one Acquire: perhaps a place in its key's queue, then a hold on
// one slot. Tickets are reused, so each release func carries the gen it was
// issued for, and a late call for a hold that has ended changes nothing.
//
// ready and gen change only while the ticket's own Acquire is certain not to
// be reading them (before it is queued, or after it has returned), so that
// Acquire reads them without the lock.
type ticket struct {
	g          *Gate
	k          *keyState
	gen        uint64        // bumped whenever a wait or hold ends
	prev, next *ticket       // links in k.q while waiting
	ready      chan struct{} // closed on grant; nil unless waiting
	granted    bool
}

// New returns a Gate that lets capacity requests per key be in flight at once
// and at most maxQueue more wait. A capacity below 1 is treated as 1, and a
// negative maxQueue as 0, meaning nobody may wait.
func New(capacity, maxQueue int) *Gate {
	return &Gate{capacity: max(capacity, 1), maxQueue: max(maxQueue, 0)}
}

// Capacity returns how many requests per key may be in flight at once.
func (g *Gate) Capacity() int { return max(g.capacity, 1) }

// MaxQueue returns how many requests per key may wait for a slot.
func (g *Gate) MaxQueue() int { return max(g.maxQueue, 0) }

// Acquire takes one of key's slots, waiting for one if need be, and returns
// a func that gives it back.
//
// A key with a free slot and nobody waiting is taken at once. If MaxQueue
// requests already wait for key, Acquire returns [ErrBusy] at once.
// Otherwise it joins the back of key's queue, calls queued (if not nil) once
// with the number of requests ahead of it, holders and earlier waiters, and
// blocks until a release hands it the slot or ctx is done. queued runs in the
// caller's goroutine with no lock held, and may be called after the slot has
// already been granted.
//
// If ctx is done, Acquire returns ctx.Err() and leaves the Gate as it was.
// That holds even on a free key: a caller that has given up adds no load.
// On any error, release is nil.
//
// release may be called from any goroutine and more than once; only the
// first call frees the slot.
func (g *Gate) Acquire(ctx context.Context, key string, queued func(ahead int)) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	k := g.keyState(key)
	if k.held < g.Capacity() && k.q.len == 0 {
		k.held++
		t := g.newTicket(k)
		gen := t.gen
		g.mu.Unlock()
		return t.releaseFunc(gen), nil
	}
	if k.q.len >= g.MaxQueue() {
		g.mu.Unlock()
		return nil, ErrBusy
	}
	t, ahead := g.enqueue(k)
	g.mu.Unlock()
	return g.wait(ctx, t, queued, ahead)
}

// enqueue puts a new ticket at the back of k's queue and returns it with the
// number of requests ahead of it.
func (g *Gate) enqueue(k *keyState) (*ticket, int) {
	t := g.newTicket(k)
	// A fresh channel for every wait rather than one kept on the reused
	// ticket: a channel belongs to the synctest bubble that made it, and only
	// a bubble's own channels block durably inside it.
	t.ready = make(chan struct{})
	ahead := k.held + k.q.len
	k.q.push(t)
	return t, ahead
}

// wait blocks until t is granted or ctx is done.
func (g *Gate) wait(ctx context.Context, t *ticket, queued func(int), ahead int) (func(), error) {
	if queued != nil {
		g.notify(t, queued, ahead)
	}
	select {
	case <-t.ready:
		// select picks at random when ctx ended too; fail then, as for a
		// done ctx on entry, so that a caller that gave up sends nothing.
		select {
		case <-ctx.Done():
		default:
			return t.releaseFunc(t.gen), nil
		}
	case <-ctx.Done():
	}
	g.abandon(t)
	return nil, ctx.Err()
}

// notify calls queued. If queued panics, t leaves the queue before the panic
// unwinds Acquire's caller, or its slot would be granted to nobody.
func (g *Gate) notify(t *ticket, queued func(int), ahead int) {
	done := false
	defer func() {
		if !done {
			g.abandon(t)
		}
	}()
	queued(ahead)
	done = true
}

// abandon ends a wait that its Acquire gives up on. A grant that raced the
// cancellation is given back like a release, so the slot passes to the next
// waiter instead of being lost.
func (g *Gate) abandon(t *ticket) {
	g.mu.Lock()
	if t.granted {
		g.end(t)
	} else {
		t.k.q.remove(t)
		g.putTicket(t)
	}
	g.mu.Unlock()
}

// releaseFunc returns the func that ends t's hold for grant gen. It is the
// one allocation of an uncontended Acquire: a func kept on the reused ticket
// would let a late second call from an earlier holder free a later holder's
// slot, and only a func of its own can tell the two apart.
func (t *ticket) releaseFunc(gen uint64) func() {
	return func() { t.g.release(t, gen) }
}

// release ends t's hold for grant gen, unless it has ended already.
func (g *Gate) release(t *ticket, gen uint64) {
	g.mu.Lock()
	if t.gen == gen {
		g.end(t)
	}
	g.mu.Unlock()
}

// end finishes t's hold. The slot goes straight to the front waiter rather
// than back to the pool, so that a release wakes exactly one goroutine and
// no newcomer can overtake the queue.
func (g *Gate) end(t *ticket) {
	k := t.k
	g.putTicket(t)
	if w := k.q.pop(); w != nil {
		w.granted = true
		close(w.ready)
		return
	}
	k.held--
	if k.held == 0 {
		g.retire(k)
	}
}

// keyState returns key's state, adding it if the key is unknown.
func (g *Gate) keyState(key string) *keyState {
	if k := g.idle; k != nil && k.key == key {
		g.idle = nil
		return k
	}
	if k := g.keys[key]; k != nil {
		return k
	}
	if g.keys == nil {
		g.keys = make(map[string]*keyState)
	}
	var k *keyState
	if n := len(g.freeKeys); n > 0 {
		k = g.freeKeys[n-1]
		g.freeKeys[n-1] = nil
		g.freeKeys = g.freeKeys[:n-1]
	} else {
		k = new(keyState)
	}
	k.key = key
	g.keys[key] = k
	return k
}

// retire makes k, which has gone idle, the idle key, and forgets the one
// before it.
func (g *Gate) retire(k *keyState) {
	if g.idle != nil {
		g.forget(g.idle)
	}
	g.idle = k
}

// forget removes k, which is idle, from the map, and keeps it for reuse.
func (g *Gate) forget(k *keyState) {
	if g.keys[k.key] == k {
		delete(g.keys, k.key)
	}
	k.key = "" // do not pin the caller's string while k sits unused
	if len(g.freeKeys) < maxFree {
		g.freeKeys = append(g.freeKeys, k)
	}
}

// newTicket returns an unused ticket for k.
func (g *Gate) newTicket(k *keyState) *ticket {
	var t *ticket
	if n := len(g.freeTickets); n > 0 {
		t = g.freeTickets[n-1]
		g.freeTickets[n-1] = nil
		g.freeTickets = g.freeTickets[:n-1]
	} else {
		t = &ticket{g: g}
	}
	t.k = k
	return t
}

// putTicket ends t's wait or hold and keeps it for reuse. Bumping gen is
// what turns the release func issued for the hold into a no-op.
func (g *Gate) putTicket(t *ticket) {
	t.gen++
	t.k, t.ready, t.granted = nil, nil, false
	if len(g.freeTickets) < maxFree {
		g.freeTickets = append(g.freeTickets, t)
	}
}

// Load returns how many requests hold one of key's slots and how many wait
// for one. An idle key reports 0, 0.
func (g *Gate) Load(key string) (inFlight, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if k := g.keys[key]; k != nil {
		return k.held, k.q.len
	}
	return 0, 0
}

// Keys returns, sorted, the keys that have a request in flight or waiting:
// those for which [Gate.Load] does not report 0, 0.
func (g *Gate) Keys() []string {
	g.mu.Lock()
	keys := make([]string, 0, len(g.keys))
	for key, k := range g.keys {
		if k != g.idle {
			keys = append(keys, key)
		}
	}
	g.mu.Unlock()
	slices.Sort(keys)
	return keys
}
